"""The raw SQL peers of ``bench/writes.py``: the add transaction as a pgbench script, behind
a bare ASGI app (``bench/bare_writes.py``), and in a ``sqlite3`` loop; each a function
``seconds → Sample``."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from _bare import wait_for_port
from _cpu import CpuMeters
from _writes_load import MEDIA, USER, WARMUP_S, Sample, load, result_of, routed

ROOT = Path(__file__).resolve().parents[1]


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
    *,
    rows_dsn: str | None = None,
) -> Any:
    """A function ``seconds → Sample`` running the transaction as a pgbench script on
    ``playlists`` playlists of its own (made now) in ``database`` (at ``dsn``), after a
    2 s warm-up; the CPU time is PostgreSQL's (``db_pids``) alone, pgbench being the
    client. The rows it copies are the last add Chorus committed at ``rows_dsn``
    (default ``dsn``)."""
    binary = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    payload, result, event = asyncio.run(committed_rows(rows_dsn or dsn))
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
        *,
        rows_dsn: str | None = None,
    ) -> None:
        from tests.servers import free_port

        self.clients = clients
        self.db_pids = db_pids
        rows = tmp / "bare-rows.json"
        rows.write_text(json.dumps(list(asyncio.run(committed_rows(rows_dsn or dsn)))))
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
