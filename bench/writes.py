"""Write throughput over HTTP against the same transaction as raw SQL, in one run.

Chorus is run as a user runs it: ``chorus serve`` processes (``--processes``,
each on its own port; with ``--routing playlist``, the default, a command goes
to the process that owns its playlist, ``crc32(playlist id) % processes``, as
a routing proxy would send it; with ``--routing any`` each client keeps to one
process, the clients spread evenly, as a round-robin balancer would), on a
temporary PostgreSQL database (migrated by ``serve``, dropped at the end),
embedded events (the in-process relay stamps the outbox). A load process
(its own interpreter, so the server's CPU is not shared with the client's
Python) runs ``--clients`` keep-alive HTTP/1.1 connections, each sending one
``addEntries`` after another: one Chinook media appended, a fresh
``operationId``, ``baseVersion: 0`` (so every edit is rebased), on a playlist
drawn at random from the workload's playlists.

The peer, same run, same server, same tables: a pgbench script of the
transaction an add is (lock the playlist row, insert the entry, bump the
version, insert the log row, insert the outbox row; the payloads are copied
from the log row and outbox row Chorus committed just before), 16 clients,
prepared statements, on its own playlists made the same way. Its outbox rows
are inserted already published (``published_at`` set): the Chorus servers
beside it would otherwise relay them during the peer's turn, spending the
machine's CPU on the peer's events (which lowered the peer's figure).

The bare peer, same run (``bench/bare_writes.py``; ``--no-bare`` leaves it
out): the same transaction behind a raw ASGI app on uvicorn and an asyncpg
pool, as many processes as Chorus's, driven by the same load process, on
playlists of its own. It has no GraphQL, authentication, validation,
idempotency or SQLAlchemy, so it is the most a Python HTTP server reaches on
this machine for this commit: ``/bare`` says how close Chorus comes to it,
and ``bare`` / raw SQL what bounds any Python server's ratio here (the load
process, the server and PostgreSQL share the cores).

Chorus runs twice, side by side on the same database: with the owner queue
and group commit (``group``) and with one transaction per command
(``plain``, ``CHORUS_GROUP_COMMIT=false``, the path it shortcuts). The
machine's load drifts, so each figure is taken in ``--rounds`` slices and the
contenders take turns (group, plain, pgbench; spread, then hot), each slice
after a 2 s warm-up that is not measured.

Workloads: ``spread`` (``--playlists`` playlists, 18 by default) and ``hot``
(one playlist). For each: requests (transactions) per second, p50 and p99
latency in ms, and the ratio Chorus / raw SQL. Every answer is checked: a
request error, a user error or a version that is not rebased counts as a
failure and fails the run.

Then, for every contender, the CPU milliseconds per request: the server's
processes (``chorus serve``, the bare peer; their user + system time from
``/proc``, ``bench/_cpu.py``) and PostgreSQL's (the whole server's, so other
users' queries count too; pgbench's transactions cost only this), over each
slice and its warm-up, divided by every request served in them.

``--sqlite`` adds the embedded profile's figures: Chorus on a SQLite file
(one per mode: the embedded profile serves a file from one process), against
the same transaction run by Python's ``sqlite3`` in a loop on one connection
(SQLite has one writer; WAL, ``synchronous=NORMAL`` as Chorus sets them) in
another process, on the first mode's file.

    python bench/writes.py [--seconds 12] [--rounds 3] [--clients 16] [--processes 1] [--sqlite]
        [--routing playlist|any] [--no-bare]
        [--postgres-url postgresql+asyncpg://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx
import jwt

from _bare import wait_for_port
from _cpu import CpuMeters, postmaster_pid
from _wrk import per_request_ms

if TYPE_CHECKING:
    from tests.servers import ChorusServer

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

USER = "bench"
MEDIA = "chinook:track:1"
WARMUP_S = 2.0
ADD = (
    "mutation Add($input: AddEntriesInput!) { addEntries(input: $input) "
    "{ version rebased replayed userErrors { code message } } }"
)
CREATE = (
    "mutation Create($input: CreatePlaylistInput!) { createPlaylist(input: $input) "
    "{ version playlist { id } userErrors { code message } } }"
)


def token(secret: str, user: str = USER) -> str:
    return jwt.encode({"sub": user, "exp": int(time.time()) + 7200}, secret, algorithm="HS256")


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


@dataclass(frozen=True)
class Figure:
    """One workload over all its slices: rate per second, latencies in milliseconds, CPU
    milliseconds per request of the server and of PostgreSQL (``None``: not measured)."""

    rate: float
    p50_ms: float
    p99_ms: float
    count: int
    cpu_ms: float | None = None
    db_cpu_ms: float | None = None

    @classmethod
    def of(cls, samples: list[Sample]) -> Figure:
        latencies = [x for s in samples for x in s.latencies]
        seconds = sum(s.seconds for s in samples)
        served = sum(s.served for s in samples)

        return cls(
            len(latencies) / seconds,
            statistics.median(latencies),
            percentile(latencies, 0.99),
            len(latencies),
            per_request_ms([s.cpu_s for s in samples], served),
            per_request_ms([s.db_cpu_s for s in samples], served),
        )


# --- the load process -------------------------------------------------------


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


# --- Chorus -----------------------------------------------------------------


def graphql(url: str, authorization: str, query: str, **variables: Any) -> dict[str, Any]:
    response = httpx.post(
        url,
        json={"query": query, "variables": variables},
        headers={"Authorization": authorization},
        timeout=30,
    )
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(body["errors"])
    data: dict[str, Any] = body["data"]
    return data


def create_playlists(server: ChorusServer, authorization: str, count: int) -> list[str]:
    """``count`` playlists made through the API, each with one first entry; their global ids."""
    ids = []
    for n in range(count):
        created = graphql(
            server.url,
            authorization,
            CREATE,
            input={"operationId": uuid.uuid4().hex, "title": f"Bench {n}"},
        )["createPlaylist"]
        assert not created["userErrors"], created
        playlist_id = created["playlist"]["id"]
        added = graphql(
            server.url,
            authorization,
            ADD,
            input={
                "playlistId": playlist_id,
                "operationId": uuid.uuid4().hex,
                "baseVersion": 0,
                "mediaIds": [MEDIA],
            },
        )["addEntries"]
        assert not added["userErrors"], added
        ids.append(playlist_id)
    return ids


class Servers:
    """``processes`` ``chorus serve`` on one database, routed by playlist id or not at all."""

    def __init__(self, database_url: str, data_dir: Path, processes: int, **env: str) -> None:
        from tests.servers import TEST_SECRET, ChorusServer

        self.secret = TEST_SECRET
        self.servers = [
            ChorusServer(database_url, data_dir, **env) for _ in range(max(1, processes))
        ]

    def __enter__(self) -> Servers:
        try:
            for server in self.servers:
                server.start(timeout_s=60)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for server in self.servers:
            server.stop()

    def routes(self, playlist_ids: list[str], routing: str) -> dict[str, tuple[int, ...]]:
        """Where each playlist's requests go: its owner process, ``crc32(id) % processes``
        (``routing`` ``playlist``), or any process (``any``)."""
        return routed(playlist_ids, [s.port for s in self.servers], routing)


def routed(playlist_ids: list[str], ports: list[int], routing: str) -> dict[str, tuple[int, ...]]:
    """Each playlist's ports: one, ``ports[crc32(id) % len(ports)]`` (``playlist``), or all."""
    if routing == "any":
        return dict.fromkeys(playlist_ids, tuple(ports))
    return {p: (ports[zlib.crc32(p.encode()) % len(ports)],) for p in playlist_ids}


@dataclass
class Chorus:
    """One way of running Chorus (a ``CHORUS_GROUP_COMMIT`` mode): servers and playlists."""

    servers: Servers
    authorization: str
    routes: dict[str, dict[str, tuple[int, ...]]]
    """Workload → its playlists' routes."""


def started(
    database_url: str, data_dir: Path, args: argparse.Namespace, mode: str, **env: str
) -> Servers:
    return Servers(
        database_url, data_dir / mode, args.processes, CHORUS_GROUP_COMMIT=MODES[mode], **env
    )


def prepared(servers: Servers, args: argparse.Namespace) -> Chorus:
    authorization = f"Bearer {token(servers.secret)}"
    first = servers.servers[0]
    spread = create_playlists(first, authorization, args.playlists)
    hot = create_playlists(first, authorization, 1)
    return Chorus(
        servers,
        authorization,
        {"spread": servers.routes(spread, args.routing), "hot": servers.routes(hot, args.routing)},
    )


def interleaved(
    chorus: dict[str, Chorus],
    peers: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    db_pids: Sequence[int] = (),
) -> tuple[dict[str, dict[str, Figure]], dict[str, dict[str, Figure]]]:
    """``--rounds`` rounds of short slices: each mode and each peer in turn, per workload.

    ``peers`` maps a peer's name to its workloads' runners (``seconds → Sample``).
    The machine's load drifts (other processes); taking turns gives every
    contender the same share of it, so the ratios hold even when the rates move.
    """
    seconds = args.seconds / args.rounds
    samples: dict[str, dict[str, list[Sample]]] = {
        m: {"spread": [], "hot": []} for m in [*chorus, *peers]
    }
    for _ in range(args.rounds):
        for workload in ("spread", "hot"):
            for mode, c in chorus.items():
                pids = [s.process.pid for s in c.servers.servers if s.process is not None]
                sample = load(
                    c.routes[workload], c.authorization, args.clients, seconds, pids, db_pids
                )
                samples[mode][workload].append(sample)
            for name, runners in peers.items():
                samples[name][workload].append(runners[workload](seconds))
    figures = {m: {w: Figure.of(x) for w, x in by.items()} for m, by in samples.items()}
    return {m: figures[m] for m in chorus}, {p: figures[p] for p in peers}


# --- the raw SQL peers --------------------------------------------------------


async def committed_rows(dsn: str) -> tuple[str, str, str]:
    """A log row's ``payload`` and ``result`` and an outbox ``payload`` Chorus wrote for an add."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT m.payload, m.result, o.payload AS event FROM playlist_mutation m "
            "JOIN outbox o USING (playlist_id, version) WHERE m.version > 0 "
            "ORDER BY o.event_id DESC LIMIT 1"
        )
    finally:
        await conn.close()
    assert row is not None, "Chorus committed no add"
    return row["payload"], row["result"], row["event"]


PGBENCH_SCRIPT = """\
\\set p random(0, {last})
BEGIN;
SELECT version FROM playlist WHERE id = '{prefix}' || :p FOR UPDATE;
INSERT INTO playlist_entry (playlist_id, entry_id, position_key, media_id, added_by, added_at)
  VALUES ('{prefix}' || :p, md5(random()::text), substr(md5(random()::text), 1, 8),
          {media}, '{user}', now());
UPDATE playlist SET version = version + 1, entry_count = entry_count + 1, updated_at = now()
  WHERE id = '{prefix}' || :p RETURNING version AS v \\gset
INSERT INTO playlist_mutation (playlist_id, version, operation_id, actor_id, payload,
                               request_hash, result, committed_at)
  VALUES ('{prefix}' || :p, :v, md5(random()::text), '{user}', '{payload}'::jsonb,
          md5(random()::text), '{result}'::jsonb, now());
INSERT INTO outbox (playlist_id, version, payload, created_at, published_at)
  VALUES ('{prefix}' || :p, :v, '{event}'::jsonb, now(), now());
COMMIT;
"""


def _sql_literal(document: str) -> str:
    """``document`` (JSON) as a SQL string literal pgbench leaves alone.

    pgbench reads ``:name`` anywhere in a script as a variable, so every colon
    inside a JSON string is written as the escape ``\\u003a`` (the same value).
    """

    def hide(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(":", "\x00")
        if isinstance(value, list):
            return [hide(v) for v in value]
        if isinstance(value, dict):
            return {hide(k): hide(v) for k, v in value.items()}
        return value

    text = json.dumps(hide(json.loads(document))).replace("\\u0000", "\\u003a")
    return text.replace("'", "''")


async def _pgbench_playlists(dsn: str, prefix: str, count: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.executemany(
            "INSERT INTO playlist (id, owner_id, title, visibility, collaborative, version, "
            "membership_epoch, entry_count, created_at, updated_at) "
            "VALUES ($1, $2, $1, 'PRIVATE', false, 0, 0, 0, now(), now())",
            [(f"{prefix}{n}", USER) for n in range(count)],
        )
    finally:
        await conn.close()


def pgbench_runner(
    dsn: str,
    database: str,
    playlists: int,
    clients: int,
    tmp: Path,
    db_pids: Sequence[int] = (),
) -> Any:
    """A function ``seconds → Sample`` running the transaction as a pgbench script on
    ``playlists`` playlists of its own (made now), after a 2 s warm-up; the CPU time is
    PostgreSQL's (``db_pids``) alone, pgbench being the client."""
    binary = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    payload, result, event = asyncio.run(committed_rows(dsn))
    prefix = f"pgbench-{uuid.uuid4().hex[:8]}-"  # its own, whatever the other workload's count
    asyncio.run(_pgbench_playlists(dsn, prefix, playlists))
    script = PGBENCH_SCRIPT.format(
        prefix=prefix,
        last=playlists - 1,
        media=" || chr(58) || ".join(f"'{part}'" for part in MEDIA.split(":")),
        user=USER,
        payload=_sql_literal(payload),
        result=_sql_literal(result),
        event=_sql_literal(event),
    )
    path = tmp / f"add-{prefix}.sql"
    path.write_text(script)
    base = [binary, "-n", "-M", "prepared", "-f", str(path), "-c", str(clients), "-j", "2"]
    target = [*asyncpg_dsn_parts(dsn), database]

    def run(seconds: float) -> Sample:
        meters = CpuMeters((), db_pids)
        warm = subprocess.run(
            [*base, "-T", "2", *target], check=False, capture_output=True, text=True
        )
        if warm.returncode != 0:
            raise RuntimeError(f"pgbench failed: {warm.stdout!r}{warm.stderr!r}")
        logs = tmp / f"log-{uuid.uuid4().hex}"
        logs.mkdir()
        done = subprocess.run(
            [*base, "-T", str(max(1, round(seconds))), "-l", f"--log-prefix={logs}/tx", *target],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not re.search(r"failed transactions: 0 ", done.stdout):
            raise RuntimeError(f"pgbench failed: {done.stdout}{done.stderr}")
        _, db_cpu_s = meters.spent()
        latencies = [
            int(line.split()[2]) / 1000
            for log in logs.glob("tx*")
            for line in log.read_text().splitlines()
        ]
        served = sum(
            int(n)
            for out in (warm.stdout, done.stdout)
            for n in re.findall(r"number of transactions actually processed: (\d+)", out)
        )
        return Sample(latencies, max(1, round(seconds)), served, None, db_cpu_s)

    return run


class BarePeer:
    """``bench/bare_writes.py`` servers (as many as Chorus's, routed the same way) on
    playlists of their own; a function ``seconds → Sample`` driving them with :func:`load`."""

    def __init__(
        self,
        dsn: str,
        playlists: int,
        processes: int,
        routing: str,
        clients: int,
        tmp: Path,
        db_pids: Sequence[int] = (),
    ) -> None:
        from tests.servers import free_port

        self.clients = clients
        self.db_pids = db_pids
        rows = tmp / "bare-rows.json"
        rows.write_text(json.dumps(list(asyncio.run(committed_rows(dsn)))))
        prefix = f"bare-{uuid.uuid4().hex[:8]}-"
        ids = [f"{prefix}{n}" for n in range(playlists)]
        asyncio.run(_pgbench_playlists(dsn, prefix, playlists))
        ports = [free_port() for _ in range(max(1, processes))]
        self.routes = routed(ids, ports, routing)
        script = str(ROOT / "bench" / "bare_writes.py")
        self.processes = [
            subprocess.Popen([sys.executable, script, str(port), dsn, str(rows)]) for port in ports
        ]
        try:
            for port in ports:
                wait_for_port(port, lambda: False, f"the bare peer on port {port}")
        except RuntimeError:
            self.close()
            raise

    def __call__(self, seconds: float) -> Sample:
        pids = [p.pid for p in self.processes]
        return load(self.routes, "Bearer -", self.clients, seconds, pids, self.db_pids)

    def close(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(timeout=15)


def asyncpg_dsn_parts(dsn: str) -> list[str]:
    from sqlalchemy.engine import make_url

    url = make_url(dsn)
    parts = ["-h", url.host or "127.0.0.1", "-p", str(url.port or 5432)]
    if url.username:
        parts += ["-U", url.username]
    return parts


SQLITE_TRANSACTION = [
    ("SELECT version FROM playlist WHERE id = ?", ("p",)),
    (
        "INSERT INTO playlist_entry (playlist_id, entry_id, position_key, media_id, added_by, "
        "added_at) VALUES (?, ?, ?, ?, ?, ?)",
        ("p", "id", "key", "media", "user", "now"),
    ),
    (
        "UPDATE playlist SET version = version + 1, entry_count = entry_count + 1, "
        "updated_at = ? WHERE id = ? RETURNING version",
        ("now", "p"),
    ),
    (
        "INSERT INTO playlist_mutation (playlist_id, version, operation_id, actor_id, payload, "
        "request_hash, result, committed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ("p", "v", "id", "user", "payload", "id", "result", "now"),
    ),
    (
        "INSERT INTO outbox (playlist_id, version, payload, created_at) VALUES (?, ?, ?, ?)",
        ("p", "v", "event", "now"),
    ),
]


def _sqlite_peer(
    path: str, playlists: int, seconds: float, out: multiprocessing.Queue[Any]
) -> None:
    """The transaction in a loop on one ``sqlite3`` connection; ``(count, latencies)``."""
    import random

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA synchronous=NORMAL")
    payload, result, event = conn.execute(
        "SELECT m.payload, m.result, o.payload FROM playlist_mutation m JOIN outbox o "
        "ON o.playlist_id = m.playlist_id AND o.version = m.version WHERE m.version > 0 "
        "ORDER BY o.event_id DESC LIMIT 1"
    ).fetchone()
    now = "2026-01-01 00:00:00.000000"
    for n in range(playlists):
        conn.execute(
            "INSERT OR IGNORE INTO playlist (id, owner_id, title, visibility, collaborative, "
            "version, membership_epoch, entry_count, created_at, updated_at) "
            "VALUES (?, ?, ?, 'PRIVATE', 0, 0, 0, 0, ?, ?)",
            (f"sqlite-{playlists}-{n}", USER, "peer", now, now),
        )
    rng = random.Random()
    latencies: list[float] = []
    start = time.monotonic()
    window_start = start + WARMUP_S
    stop_at = window_start + seconds
    while (started := time.monotonic()) < stop_at:
        p = f"sqlite-{playlists}-{rng.randrange(playlists)}"
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("SELECT version FROM playlist WHERE id = ?", (p,)).fetchone()
        conn.execute(
            "INSERT INTO playlist_entry (playlist_id, entry_id, position_key, media_id, "
            "added_by, added_at) VALUES (?, ?, ?, ?, ?, ?)",
            (p, uuid.uuid4().hex, uuid.uuid4().hex[:8], MEDIA, USER, now),
        )
        (v,) = conn.execute(
            "UPDATE playlist SET version = version + 1, entry_count = entry_count + 1, "
            "updated_at = ? WHERE id = ? RETURNING version",
            (now, p),
        ).fetchone()
        conn.execute(
            "INSERT INTO playlist_mutation (playlist_id, version, operation_id, actor_id, "
            "payload, request_hash, result, committed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (p, v, uuid.uuid4().hex, USER, payload, uuid.uuid4().hex, result, now),
        )
        conn.execute(
            "INSERT INTO outbox (playlist_id, version, payload, created_at) VALUES (?, ?, ?, ?)",
            (p, v, event, now),
        )
        conn.execute("COMMIT")
        if started >= window_start:
            latencies.append((time.monotonic() - started) * 1000)
    conn.close()
    out.put(latencies)


def sqlite_peer(path: Path, playlists: int, seconds: float) -> Sample:
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[Any] = ctx.Queue()
    process = ctx.Process(target=_sqlite_peer, args=(str(path), playlists, seconds, queue))
    process.start()
    latencies = result_of(process, queue, seconds + 120)
    return Sample(latencies, seconds)


# --- the run ------------------------------------------------------------------


MODES = {"group": "true", "plain": "false"}
"""``CHORUS_GROUP_COMMIT`` of each way Chorus is measured: owner queue and group commit,
or the one-transaction-per-command path it shortcuts."""


def table(
    title: str,
    chorus: dict[str, dict[str, Figure]],
    peers: dict[str, dict[str, Figure]],
    targets: bool,
) -> None:
    """One line per workload and mode; ``ratio`` is against ``raw`` (the SQL peer), ``/bare``
    against the bare HTTP peer when it ran, ``/plain`` against one transaction per command."""
    peer, bare = peers["raw"], peers.get("bare")
    print(f"\n{title}")
    print(
        f"{'workload':16}{'Chorus req/s':>13}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'raw tx/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'ratio':>7}"
        + (f"{'bare req/s':>11}{'/bare':>7}" if bare else "")
        + f"{'/plain':>8}"
    )
    goals = {"spread": 0.35, "hot": 0.75}
    for name, p in peer.items():
        for mode, figures in chorus.items():
            c = figures[name]
            ratio = c.rate / p.rate
            plain = chorus.get("plain", {}).get(name)
            versus = f"{c.rate / plain.rate:>8.2f}" if plain and mode != "plain" else " " * 8
            ceiling = f"{bare[name].rate:>11.0f}{c.rate / bare[name].rate:>7.2f}" if bare else ""
            verdict = ""
            if targets and mode == "group":
                # The target is of ``ratio`` (against raw SQL), not of /bare or /plain.
                met = ratio >= goals[name]
                verdict = f"  target ratio >= {goals[name]}: {'pass' if met else 'FAIL'}"
            print(
                f"{name + ' ' + mode:16}{c.rate:>13.0f}{c.p50_ms:>8.1f}{c.p99_ms:>8.1f}"
                f"{p.rate:>10.0f}{p.p50_ms:>8.1f}{p.p99_ms:>8.1f}{ratio:>7.3f}"
                f"{ceiling}{versus}{verdict}"
            )
    if bare:
        for name, b in bare.items():
            print(
                f"{name + ' bare':16}{b.rate:>13.0f}{b.p50_ms:>8.1f}{b.p99_ms:>8.1f}"
                f"{peer[name].rate:>10.0f}{'':>16}{b.rate / peer[name].rate:>7.3f}"
                "  (the bare HTTP peer against raw SQL)"
            )


def cpu_table(chorus: dict[str, dict[str, Figure]], peers: dict[str, dict[str, Figure]]) -> None:
    """CPU milliseconds per request (transaction) of each contender: its server's processes
    (``chorus serve``, the bare peer's uvicorn; pgbench has none but PostgreSQL) and
    PostgreSQL's (the whole server's: other users' queries count too)."""

    def ms(value: float | None) -> str:
        return f"{value:>10.2f}" if value is not None else f"{'—':>10}"

    print("\nCPU per request, ms (server: its processes; PostgreSQL: the whole server)")
    print(f"{'workload':16}{'server':>10}{'PostgreSQL':>11}{'sum':>10}")
    names = {**{m: m for m in chorus}, "raw": "pgbench", "bare": "bare"}
    contenders = {**chorus, **peers}
    for workload in ("spread", "hot"):
        for name, figures in contenders.items():
            f = figures[workload]
            both = [x for x in (f.cpu_ms, f.db_cpu_ms) if x is not None]
            total = sum(both) if both else None
            label = f"{workload} {names.get(name, name)}"
            print(f"{label:16}{ms(f.cpu_ms)} {ms(f.db_cpu_ms)}{ms(total)}")


def positive(kind: type[int] | type[float]) -> Any:
    """An argparse type: a finite number of ``kind`` above zero."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be above 0 and finite, not {text}")
        return value

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=positive(float), default=12.0, help="measured seconds per figure"
    )
    parser.add_argument(
        "--rounds", type=positive(int), default=3, help="slices each figure is taken in"
    )
    parser.add_argument("--clients", type=positive(int), default=16)
    parser.add_argument("--processes", type=positive(int), default=1, help="chorus serve processes")
    parser.add_argument(
        "--routing",
        choices=["playlist", "any"],
        default="playlist",
        help="playlist: each to its owner process, crc32(id) %% processes; any: round robin",
    )
    parser.add_argument("--playlists", type=positive(int), default=18, help="playlists of 'spread'")
    parser.add_argument("--sqlite", action="store_true", help="also the embedded profile")
    parser.add_argument(
        "--postgres-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument(
        "--no-bare", action="store_true", help="leave out the bare HTTP peer (bare_writes.py)"
    )
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for serve")
    parser.add_argument(
        "--modes", default="group,plain", help="comma-separated: group (owner queue), plain"
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: a comma-separated list of {', '.join(MODES)}, not {args.modes!r}")
    if any("=" not in item or not item.split("=", 1)[0] for item in args.env):
        parser.error("--env: NAME=VALUE")
    env = dict(item.split("=", 1) for item in args.env)
    os.environ["CHORUS_TEST_POSTGRES_URL"] = args.postgres_url
    from tests.servers import create_database, drop_database, postgres_url

    try:
        name = create_database()
    except (OSError, asyncpg.PostgresError) as error:
        raise SystemExit(f"PostgreSQL at {args.postgres_url}: {error}") from None
    print(
        f"{args.clients} clients, {args.seconds:.0f} s measured per figure in {args.rounds} "
        f"slices taken in turn (each after a {WARMUP_S:.0f} s warm-up), "
        f"{args.processes} chorus serve process(es) per mode routed by {args.routing}, "
        f"{os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        try:
            url = postgres_url(name)
            chorus = {
                m: prepared(stack.enter_context(started(url, Path(tmp), args, m, **env)), args)
                for m in modes
            }
            dsn = postgres_url(name, "postgresql")
            postmaster = asyncio.run(postmaster_pid(dsn))
            db = [postmaster] if postmaster else []
            peers: dict[str, dict[str, Any]] = {
                "raw": {
                    w: pgbench_runner(dsn, name, count, args.clients, Path(tmp), db)
                    for w, count in (("spread", args.playlists), ("hot", 1))
                }
            }
            if not args.no_bare:
                peers["bare"] = {
                    w: stack.enter_context(
                        contextlib.closing(
                            BarePeer(
                                dsn,
                                count,
                                args.processes,
                                args.routing,
                                args.clients,
                                Path(tmp),
                                db,
                            )
                        )
                    )
                    for w, count in (("spread", args.playlists), ("hot", 1))
                }
            figures, measured = interleaved(chorus, peers, args, db)
        finally:
            try:
                stack.close()
            finally:
                drop_database(name)
        table("PostgreSQL: Chorus over HTTP against pgbench", figures, measured, targets=True)
        cpu_table(figures, measured)
        if args.sqlite:
            # One file per mode: the embedded profile serves a file from one process.
            files = {m: Path(tmp) / "sqlite" / m / "chorus.db" for m in modes}
            path = files[modes[0]]  # the peer's tables are made by Chorus's migrations
            with contextlib.ExitStack() as lite:
                chorus = {
                    m: prepared(
                        lite.enter_context(
                            started(
                                f"sqlite+aiosqlite:///{files[m]}", files[m].parent, args, m, **env
                            )
                        ),
                        args,
                    )
                    for m in modes
                }
                sqlite_peers = {
                    "spread": lambda seconds: sqlite_peer(path, args.playlists, seconds),
                    "hot": lambda seconds: sqlite_peer(path, 1, seconds),
                }
                figures, measured = interleaved(chorus, {"raw": sqlite_peers}, args)
            table("SQLite: Chorus over HTTP against sqlite3 in a loop", figures, measured, False)
            cpu_table(figures, {})


if __name__ == "__main__":
    main()
