"""Chorus against PostGraphile v4: the same page of the same data, the same load tool.

One run builds everything it measures:

1. a fresh PostgreSQL database filled by ``chorus import chinook`` (the 18
   Chinook playlists, PUBLIC, owned by ``bench``), plus a table
   ``bench_media`` of the same Chinook media Chorus's embedded catalog serves,
   and a smart comment on ``playlist_entry`` that makes ``media_id`` a foreign
   key to it, so PostGraphile can join an entry to its media;
2. PostGraphile v4 from npm (``postgraphile@4`` with
   ``@graphile-contrib/pg-simplify-inflector``), installed into
   ``bench/.postgraphile/`` on first use, on that same database;
3. ``chorus serve`` on that same database in each configuration measured.

Each system is asked for the first page of 50 live entries, with
``media { title artists album durationMs }``, of the Chinook playlists with at
least 50 entries, round-robin, in its natural query (PostGraphile:
``playlist(id) { playlistEntries(first: 50, orderBy: [POSITION_KEY_ASC,
ENTRY_ID_ASC], condition: {removedAt: null}) … media { … } }``; Chorus:
``playlist(id) { entries(first: 50) … }`` with a bearer token; PostGraphile
runs without authentication). Before the load both answer every playlist and
the media titles of their pages are compared: they must be equal.

The load tool is ``wrk`` (``apt-get install wrk``), one thread, 16 connections
by default, the same for every row. Rows: PostGraphile; Chorus hot (response
cache warm); Chorus cold (``CHORUS_RESPONSE_CACHE=false``); Chorus
revalidation (``If-None-Match`` with each page's ``ETag`` → 304); Chorus full
profile hot (Redis heads and snapshots, Kafka from a Tansu broker this script
starts) and, on request (``--rows …,full-cold``), full profile cold; the
full-profile rows run ``--workers`` processes (the embedded profile refuses
``--workers``: its processes would not hear each other's commits). Every
server runs at once and the rows take turns, ``--rounds`` slices each (after
a 2 s warm-up each): load from anything else on the machine then falls on
every row alike. Prints req/s over all slices, the median slice's p50 and
p99, and the ratio of each row's req/s to PostGraphile's. A row whose server
does not support a mode (no ETag) is printed as such.

    python bench/peers.py [--seconds 20] [--rounds 4] [--connections 16]
        [--rows pg,hot,cold,304,full,full-cold] [--workers 1]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
        [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parents[1]
PEER_DIR = Path(__file__).resolve().parent / ".postgraphile"
PEER_PACKAGES = ("postgraphile@4", "@graphile-contrib/pg-simplify-inflector@6")
SECRET = "bench-secret-" + "x" * 40
OWNER = "bench"
PAGE = 50

CHORUS_QUERY = """query Page($id: ID!) { playlist(id: $id) { version entries(first: 50) {
  edges { cursor node { id positionKey media { title artists album durationMs } } } } } }"""
PEER_QUERY = """query Page($id: String!) { playlist(id: $id) { version playlistEntries(
  first: 50, orderBy: [POSITION_KEY_ASC, ENTRY_ID_ASC], condition: {removedAt: null}) {
  edges { cursor node { entryId positionKey media { title artists album durationMs } } } } } }"""

MEDIA_DDL = """
CREATE TABLE bench_media (
  id varchar(128) PRIMARY KEY, title text NOT NULL, artists text[] NOT NULL,
  album text, duration_ms integer);
COMMENT ON TABLE playlist_entry IS E'@foreignKey (media_id) references bench_media (id)';
"""


@dataclass(frozen=True)
class Row:
    name: str
    rps: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    note: str = ""


def servers_module() -> Any:
    """``tests/servers.py``: one way to start ``chorus serve`` and Tansu, shared with the tests."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tests.servers

    return tests.servers


# --- data ---------------------------------------------------------------------


def chorus_import(env: dict[str, str]) -> list[tuple[str, int]]:
    """``chorus import chinook``; the imported playlists' global ids and entry counts."""
    out = subprocess.run(
        [sys.executable, "-m", "chorus.cli", "import", "chinook", "--owner", OWNER],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = re.findall(r"^(\S+)\s+(\d+) entries", out, re.MULTILINE)
    return [(gid, int(n)) for gid, n in found]


async def add_peer_schema(dsn: str) -> None:
    """The media table PostGraphile joins, filled with the Chinook media Chorus serves."""
    from chorus.catalog.chinook import load_chinook

    media = load_chinook().media.values()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(MEDIA_DDL)
        await conn.copy_records_to_table(
            "bench_media",
            records=[(m.id, m.title, list(m.artists), m.album, m.duration_ms) for m in media],
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


# --- PostGraphile ---------------------------------------------------------------


def peer_binary() -> Path:
    """PostGraphile's CLI in the bench-local folder, installed from npm on first use."""
    binary = PEER_DIR / "node_modules" / ".bin" / "postgraphile"
    if not binary.exists():
        PEER_DIR.mkdir(exist_ok=True)
        subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(PEER_DIR),
                *PEER_PACKAGES,
            ],
            check=True,
        )
    return binary


@contextlib.contextmanager
def postgraphile(dsn: str, port: int, log: Path) -> Iterator[str]:
    """PostGraphile v4 on ``dsn`` at ``port``; yields its GraphQL URL."""
    argv = [
        str(peer_binary()),
        "--connection",
        dsn,
        "--schema",
        "public",
        "--append-plugins",
        "@graphile-contrib/pg-simplify-inflector",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--disable-query-log",
        "--disable-graphiql",
    ]
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, cwd=PEER_DIR, env={**os.environ}
        )
    url = f"http://127.0.0.1:{port}/graphql"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"postgraphile exited: {log.read_text()[-2000:]}")
            try:
                httpx.post(url, json={"query": "{__typename}"}, timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def peer_titles(url: str, playlist_id: str) -> list[str]:
    r = httpx.post(url, json={"query": PEER_QUERY, "variables": {"id": playlist_id}}, timeout=30)
    data = r.json()
    assert "errors" not in data, data
    edges = data["data"]["playlist"]["playlistEntries"]["edges"]
    return [e["node"]["media"]["title"] for e in edges]


# --- Chorus -------------------------------------------------------------------------


def chorus_answer(url: str, token: str, gid: str) -> httpx.Response:
    return httpx.post(
        url,
        json={"query": CHORUS_QUERY, "variables": {"id": gid}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def chorus_titles(response: httpx.Response) -> list[str]:
    data = response.json()
    assert "errors" not in data, data
    return [e["node"]["media"]["title"] for e in data["data"]["playlist"]["entries"]["edges"]]


# --- load -------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Sample:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    bad: int
    timeouts: int


def wrk(url: str, script: str, seconds: float, connections: int) -> Sample:
    """Drive ``url`` with ``script`` for ``seconds``: its request count, p50, p99, failures."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", f.name]
        out = subprocess.run(
            [*argv, "--latency", url], check=True, capture_output=True, text=True
        ).stdout
    finally:
        os.unlink(f.name)
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
    )


def summarize(name: str, samples: list[Sample]) -> Row:
    """One row from its rounds: req/s over all of them; p50 and p99 the median round's."""
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
    return Row(name, requests / seconds, p50, p99, note)


# --- the run -----------------------------------------------------------------------


@dataclass
class Target:
    """One row: a URL and the wrk script that asks it for the page."""

    name: str
    url: str
    script: str | None
    note: str = ""


def chorus_target(
    name: str,
    server: Any,
    gids: list[str],
    expected: dict[str, list[str]],
    *,
    revalidate: bool = False,
) -> Target:
    """The Chorus row of ``server``; checks its pages against PostGraphile's first."""
    from chorus.auth import mint_token

    token = mint_token(SECRET, "reader")
    headers: list[dict[str, str]] = []
    for gid in gids:
        r = chorus_answer(server.url, token, gid)
        assert chorus_titles(r) == expected[gid], f"{name}: Chorus and PostGraphile differ"
        h = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        if revalidate:
            etag = r.headers.get("etag")
            if etag is None:
                return Target(name, server.url, None, "no ETag: not supported by this build")
            h["If-None-Match"] = etag
        headers.append(h)
    bodies = [json.dumps({"query": CHORUS_QUERY, "variables": {"id": g}}) for g in gids]
    return Target(name, server.url, wrk_script(bodies, headers))


def _install_wrk() -> None:
    """``wrk`` from Debian's packages, when this user may install them (root in CI)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    print("installing wrk (apt-get install wrk)", file=sys.stderr)
    for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
        subprocess.run(step, check=True, stdout=subprocess.DEVNULL)
    if shutil.which("wrk") is None:
        sys.exit("wrk did not install")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per row, over all rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rows", default="pg,hot,cold,304,full")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes of the full-profile rows (chorus serve --workers N, which the embedded "
        "profile refuses: its processes would not hear each other's commits)",
    )
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    wanted = args.rows.split(",")
    if shutil.which("wrk") is None:
        _install_wrk()
    servers: Any = servers_module()

    name = f"chorus_peers_{uuid.uuid4().hex[:8]}"
    admin_db = args.admin_url.rsplit("/", 1)[0]
    asyncio.run(_admin(args.admin_url, f'CREATE DATABASE "{name}"'))
    dsn = f"{admin_db}/{name}"
    tmp = Path(tempfile.mkdtemp(prefix="chorus-peers-"))
    database_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    env = {"CHORUS_JWT_SECRET": SECRET}
    started: list[Any] = []
    tansu = None
    try:
        imported = chorus_import(
            {
                **{k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")},
                "CHORUS_DATABASE_URL": database_url,
                "CHORUS_DATA_DIR": str(tmp),
                **env,
            }
        )
        asyncio.run(add_peer_schema(dsn))
        from chorus.graphql.schema.common import ids

        gids = [gid for gid, n in imported if n >= PAGE]
        print(
            f"{len(imported)} Chinook playlists imported; {len(gids)} with >= {PAGE} entries "
            f"are read round-robin; wrk -t1 -c{args.connections}; {args.seconds:g} s per row "
            f"in {args.rounds} rounds, rows interleaved",
            flush=True,
        )

        def chorus(workers: int = 1, **extra: str) -> Any:
            command = ("serve",) if workers == 1 else ("serve", "--workers", str(workers))
            server = servers.ChorusServer(database_url, tmp, command, **env, **extra)
            server.start()
            started.append(server)
            return server

        with postgraphile(dsn, servers.free_port(), tmp / "postgraphile.log") as peer_url:
            expected = {gid: peer_titles(peer_url, ids.playlist_id(gid)) for gid in gids}
            targets: list[Target] = []
            if "pg" in wanted:
                bodies = [
                    json.dumps({"query": PEER_QUERY, "variables": {"id": ids.playlist_id(g)}})
                    for g in gids
                ]
                headers = [{"Content-Type": "application/json"}] * len(gids)
                targets.append(Target("PostGraphile", peer_url, wrk_script(bodies, headers)))
            if {"hot", "304"} & set(wanted):
                default = chorus()
                if "hot" in wanted:
                    targets.append(
                        chorus_target("Chorus hot (cache warm)", default, gids, expected)
                    )
                if "304" in wanted:
                    title = "Chorus revalidation (304)"
                    targets.append(chorus_target(title, default, gids, expected, revalidate=True))
            if "cold" in wanted:
                cold = chorus(CHORUS_RESPONSE_CACHE="false")
                targets.append(chorus_target("Chorus cold (cache off)", cold, gids, expected))
            full_rows = [r for r in ("full", "full-cold") if r in wanted]
            if full_rows:
                tansu = servers.TansuServer(tmp / "tansu.log")
                tansu.start()
            for row in full_rows:
                full = chorus(
                    args.workers,
                    CHORUS_REDIS_URL=args.redis_url,
                    CHORUS_KAFKA_BOOTSTRAP_SERVERS=tansu.bootstrap_servers,
                    CHORUS_KAFKA_TOPIC=f"chorus-peers-{uuid.uuid4().hex[:8]}",
                    CHORUS_KAFKA_IDEMPOTENT_PRODUCER="false",
                    **({"CHORUS_RESPONSE_CACHE": "false"} if row == "full-cold" else {}),
                )
                title = "Chorus full profile " + (
                    "cold (cache off)" if row == "full-cold" else "hot"
                )
                if args.workers > 1:
                    title += f", --workers {args.workers}"
                targets.append(chorus_target(title, full, gids, expected))
            runnable = [t for t in targets if t.script is not None]
            for t in runnable:  # warm-up: connections, caches, JIT of the peer
                wrk(t.url, t.script or "", 2, args.connections)
            samples: dict[str, list[Sample]] = {t.name: [] for t in runnable}
            slice_s = args.seconds / args.rounds
            for round_ in range(args.rounds):
                for t in runnable:
                    samples[t.name].append(wrk(t.url, t.script or "", slice_s, args.connections))
                print(f"round {round_ + 1}/{args.rounds} done", flush=True)
        rows = [
            summarize(t.name, samples[t.name])
            if t.script is not None
            else Row(t.name, None, note=t.note)
            for t in targets
        ]
    finally:
        for server in reversed(started):
            server.stop()
        if tansu is not None:
            tansu.stop()
        asyncio.run(_admin(args.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(rows)


def print_table(rows: list[Row]) -> None:
    peer = next((r.rps for r in rows if r.name == "PostGraphile"), None)
    print()
    head = ("system", "req/s", "p50 ms", "p99 ms", "× PostGraphile")
    print("| {:<28} | {:>8} | {:>7} | {:>7} | {:>14} |".format(*head))
    print(f"|{'-' * 30}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 16}|")
    for r in rows:
        if r.rps is None:
            print(f"| {r.name:<28} | {'—':>8} | {'—':>7} | {'—':>7} | {'—':>14} | {r.note}")
            continue
        ratio = f"{r.rps / peer:.2f}" if peer else "—"
        note = f" {r.note}" if r.note else ""
        cells = f"| {r.name:<28} | {r.rps:8.1f} | {r.p50_ms:7.2f} | {r.p99_ms:7.2f} |"
        print(f"{cells} {ratio:>14} |{note}")


async def _admin(admin_url: str, sql: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
