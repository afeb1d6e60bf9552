"""The load of ``bench/peers.py`` (and ``bench/tracing.py``): ``wrk``, one row's figures.

``wrk`` (``apt-get install wrk``) sends a Lua script's requests round-robin
over keep-alive connections; :func:`wrk` runs it for a slice and reads the
request count, p50 and p99 from its report, and the server's CPU time over
the slice from ``/proc`` (:mod:`_cpu`); :func:`summarize` folds a row's slices.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from _cpu import CpuMeters


@dataclass(frozen=True)
class Row:
    """A printed row: req/s, the median slice's p50 and p99 in ms, CPU ms per request."""

    name: str
    rps: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    note: str = ""
    cpu_ms: float | None = None
    db_cpu_ms: float | None = None


@dataclass(frozen=True)
class Sample:
    """One slice: requests answered in ``seconds``, latencies in ms, failures, and the
    server's and PostgreSQL's CPU seconds over the slice (``None`` when not measured)."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    bad: int
    timeouts: int
    cpu_s: float | None = None
    db_cpu_s: float | None = None


def wrk_script(bodies: list[str], headers: list[dict[str, str]]) -> str:
    """A wrk Lua script sending ``bodies[i]`` with ``headers[i]``, round-robin."""

    def lua(value: str) -> str:
        return json.dumps(value)  # a JSON string is a valid Lua string literal here

    rows = ",\n".join(
        "{" + lua(b) + ", {" + ", ".join(f"[{lua(k)}]={lua(v)}" for k, v in h.items()) + "}}"
        for b, h in zip(bodies, headers, strict=True)
    )
    return (
        "local requests = {\n" + rows + "\n}\n"
        "local i = 0\n"
        "request = function()\n"
        "  i = i % #requests + 1\n"
        '  return wrk.format("POST", "/graphql", requests[i][2], requests[i][1])\n'
        "end\n"
    )


def _ms(out: str, percent: int) -> float:
    """wrk's ``--latency`` percentile in milliseconds (NaN when no request completed)."""
    found = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.MULTILINE)
    if found is None:
        return math.nan
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[found.group(2)]
    return float(found.group(1)) * scale


def wrk(
    url: str,
    script: str,
    seconds: float,
    connections: int,
    pids: Sequence[int] = (),
    db_pids: Sequence[int] = (),
) -> Sample:
    """Drive ``url`` with ``script`` for ``seconds``: its request count, p50, p99, failures,
    and the CPU seconds of the processes ``pids`` (the server) and ``db_pids`` (PostgreSQL),
    with their descendants, meanwhile."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        # wrk reads a whole number of seconds only ("3.33333s" is refused): --seconds 10
        # in 3 rounds is three slices of 3 s.
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, int(seconds))}s", "-s", f.name]
        meters = CpuMeters(pids, db_pids)
        out = subprocess.run(
            [*argv, "--latency", url], check=True, capture_output=True, text=True
        ).stdout
        cpu, db_cpu = meters.spent()
    finally:
        os.unlink(f.name)
    return parse(out, cpu, db_cpu)


def parse(out: str, cpu_s: float | None = None, db_cpu_s: float | None = None) -> Sample:
    """A :class:`Sample` from wrk's ``--latency`` report ``out`` and the CPU seconds measured
    over it.

    Raises:
        AssertionError: ``out`` holds no request count (wrk failed).
    """
    total = re.search(r"(\d+) requests in ([\d.]+)(\w+)", out)
    assert total is not None, out
    took = float(total.group(2)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[total.group(3)]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    timeouts = re.search(r"timeout (\d+)", out)
    return Sample(
        int(total.group(1)),
        took,
        _ms(out, 50),
        _ms(out, 99),
        int(bad.group(1)) if bad else 0,
        int(timeouts.group(1)) if timeouts else 0,
        cpu_s,
        db_cpu_s,
    )


def summarize(name: str, samples: list[Sample]) -> Row:
    """One row from its rounds: req/s over all of them; p50 and p99 the median round's;
    CPU ms per request over all of them (when measured)."""
    requests = sum(s.requests for s in samples)
    seconds = sum(s.seconds for s in samples)
    p50 = statistics.median(s.p50_ms for s in samples)
    p99 = statistics.median(s.p99_ms for s in samples)
    bad = sum(s.bad for s in samples)
    timeouts = sum(s.timeouts for s in samples)
    note = " ".join(
        part
        for part in (
            f"{bad} non-2xx/3xx!" if bad else "",
            f"{timeouts} timeouts" if timeouts else "",
        )
        if part
    )
    return Row(
        name,
        requests / seconds,
        p50,
        p99,
        note,
        per_request_ms([s.cpu_s for s in samples], requests),
        per_request_ms([s.db_cpu_s for s in samples], requests),
    )


def per_request_ms(cpu_s: list[float | None], requests: int) -> float | None:
    """Milliseconds of CPU per request over slices; ``None`` when a slice was not measured."""
    if not requests or any(c is None for c in cpu_s):
        return None
    return sum(c for c in cpu_s if c is not None) * 1000 / requests


def install_wrk() -> None:
    """``wrk`` from Debian's packages, when this user may install them (root in CI)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    print("installing wrk (apt-get install wrk)", file=sys.stderr)
    for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
        subprocess.run(step, check=True, stdout=subprocess.DEVNULL)
    if shutil.which("wrk") is None:
        sys.exit("wrk did not install")
