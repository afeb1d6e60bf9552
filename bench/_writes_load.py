"""The load of ``bench/writes.py``: its own process of keep-alive HTTP/1.1 clients sending
``addEntries`` after a warm-up, each answer checked; a slice's :class:`Sample`, and the
printed figure of a workload's slices (:func:`figure`)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import time
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from _cpu import CpuMeters
from _wrk import Row, per_request_ms

USER = "bench"
MEDIA = "chinook:track:1"
WARMUP_S = 2.0
ADD = (
    "mutation Add($input: AddEntriesInput!) { addEntries(input: $input) "
    "{ version rebased replayed userErrors { code message } } }"
)


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Sample:
    """One measured slice: each request's (transaction's) latency in ms, and the window in s;
    with the warm-up before it, the requests ``served`` and the CPU seconds the server's
    processes and PostgreSQL's spent meanwhile (``None``: not measured)."""

    latencies: list[float]
    seconds: float
    served: int = 0
    cpu_s: float | None = None
    db_cpu_s: float | None = None


def figure(name: str, samples: list[Sample]) -> Row:
    """One workload over all its slices as a printed row: rate per second, latencies in
    milliseconds, CPU milliseconds per request of the server and of PostgreSQL (``None``:
    not measured)."""
    latencies = [x for s in samples for x in s.latencies]
    served = sum(s.served for s in samples)
    return Row(
        name,
        len(latencies) / sum(s.seconds for s in samples),
        statistics.median(latencies),
        percentile(latencies, 0.99),
        "",
        per_request_ms([s.cpu_s for s in samples], served),
        per_request_ms([s.db_cpu_s for s in samples], served),
    )


async def _client(
    index: int,
    routes: dict[str, tuple[int, ...]],
    authorization: str,
    stop_at: float,
    window_start: float,
    latencies: list[float],
    failures: list[str],
    served: list[int],
) -> None:
    """Client ``index``: a keep-alive connection per server port, one request after another;
    ``served[0]`` counts its answered requests, warm-up included.

    A playlist's request goes to its ports' ``index % len(ports)``-th: with one
    port per playlist (``--routing playlist``) its owner, with all of them
    (``--routing any``) the same process for every request of this client, the
    clients spread evenly, as a round-robin balancer spreads keep-alive connections.
    """
    import random

    rng = random.Random()
    playlists = list(routes)
    streams: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
    while time.monotonic() < stop_at:
        playlist_id = rng.choice(playlists)
        ports = routes[playlist_id]
        port = ports[index % len(ports)]
        if port not in streams:
            streams[port] = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = streams[port]
        body = json.dumps(
            {
                "query": ADD,
                "variables": {
                    "input": {
                        "playlistId": playlist_id,
                        "operationId": uuid.uuid4().hex,
                        "baseVersion": 0,
                        "mediaIds": [MEDIA],
                    }
                },
            }
        ).encode()
        head = (
            f"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nAuthorization: {authorization}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        started = time.monotonic()
        writer.write(head + body)
        status = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answer = json.loads(await reader.readexactly(length))
        ended = time.monotonic()
        payload = (answer.get("data") or {}).get("addEntries")
        if b" 200 " not in status or payload is None or payload["userErrors"]:
            failures.append(f"{status!r} {answer}"[:300])
        elif not payload["rebased"] or payload["replayed"]:
            failures.append(f"not a rebased fresh commit: {payload}")
        else:
            served[0] += 1
            if window_start <= started:
                latencies.append((ended - started) * 1000)
    for _, writer in streams.values():
        writer.close()


def _load(
    routes: dict[str, tuple[int, ...]],
    authorization: str,
    clients: int,
    seconds: float,
    out: multiprocessing.Queue[Any],
) -> None:
    async def run() -> tuple[list[float], list[str], float, int]:
        latencies: list[float] = []
        failures: list[str] = []
        served = [0]
        start = time.monotonic()
        window_start = start + WARMUP_S
        stop_at = window_start + seconds
        await asyncio.gather(
            *(
                _client(
                    n, routes, authorization, stop_at, window_start, latencies, failures, served
                )
                for n in range(clients)
            )
        )
        # Requests started inside the window; the last ones end a little after it.
        return latencies, failures, seconds, served[0]

    out.put(asyncio.run(run()))


def result_of(process: Any, queue: multiprocessing.Queue[Any], timeout_s: float) -> Any:
    """What ``process`` put on ``queue``; ``SystemExit`` as soon as it died without (a crash
    in it is printed on stderr) or after ``timeout_s``."""
    import queue as queues

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = queue.get(timeout=0.5)
        except queues.Empty:
            if not process.is_alive():
                raise SystemExit(
                    f"the measuring process died (exit code {process.exitcode})"
                ) from None
            if time.monotonic() > deadline:
                process.kill()
                raise SystemExit(
                    f"the measuring process gave no result in {timeout_s:.0f} s"
                ) from None
            continue
        process.join()
        return found


def load(
    routes: dict[str, tuple[int, ...]],
    authorization: str,
    clients: int,
    seconds: float,
    pids: Sequence[int] = (),
    db_pids: Sequence[int] = (),
) -> Sample:
    """Run the load process against ``routes`` (playlist id → its ports) and measure; with
    the CPU time of ``pids`` (the servers) and ``db_pids`` (PostgreSQL) over its whole run.

    The CPU time covers the warm-up and the load process's start as well, so it is
    divided by every request served, warm-up included (an idle server spends next to none).
    """
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[Any] = ctx.Queue()
    process = ctx.Process(target=_load, args=(routes, authorization, clients, seconds, queue))
    meters = CpuMeters(pids, db_pids)
    process.start()
    latencies, failures, window, served = result_of(process, queue, seconds + 120)
    cpu_s, db_cpu_s = meters.spent()
    if failures:
        raise SystemExit(f"{len(failures)} failed requests, first: {failures[0]}")
    return Sample(latencies, window, served, cpu_s, db_cpu_s)


def routed(playlist_ids: list[str], ports: list[int], routing: str) -> dict[str, tuple[int, ...]]:
    """Each playlist's ports: one, ``ports[crc32(id) % len(ports)]`` (``playlist``), or all."""
    if routing == "any":
        return dict.fromkeys(playlist_ids, tuple(ports))
    return {p: (ports[zlib.crc32(p.encode()) % len(ports)],) for p in playlist_ids}
