"""History reads: ``atVersion`` 10,000 versions behind the head, against ``entries`` at the head.

Builds one playlist of 1,000 Chinook tracks, then commits 10,500 more
versions of single edits (moves, adds, removes, title changes) through the
store, on a fresh SQLite file and a fresh PostgreSQL database. Then, in the
same run and the same way (``schema.execute``: GraphQL, resolvers, SQL; no
HTTP), it times:

* ``entries`` at the head: ``playlist(id) { version entries(first: 50) { … } }``;
* ``atVersion(version: head - 10000) { title entries(first: 50) { … } }``,
  rewound from the next checkpoint;
* the same at the worst version for checkpoints (one past a checkpoint:
  ``CHECKPOINT_EVERY - 1`` versions to undo);
* the same again with every checkpoint deleted: the plain path, undoing
  all 10,000 versions from the head (what a read would cost without them).

Prints the median and p95 of each in milliseconds and the ratios to
``entries`` at the head.

    python bench/history.py [--reads 60] [--backend both|sqlite|postgres]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import delete, func, select

from chorus.catalog.embedded import EmbeddedCatalog
from chorus.db import pages
from chorus.db.engine import Database
from chorus.db.history_reads import AtVersion
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.db.tables import playlist_checkpoint, playlist_checkpoint_entry
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    MoveEntries,
    Placement,
    RemoveEntries,
    UpdatePlaylist,
)
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.version_history import CHECKPOINT_EVERY
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services

ENTRIES = 1_000
BEHIND = 10_000
EDITS = BEHIND + 500
EDGES = "edges { cursor node { id positionKey mediaId addedAt } }"
HEAD = f"query($id: ID!) {{ playlist(id: $id) {{ version entries(first: 50) {{ {EDGES} }} }} }}"
AT = (
    "query($id: ID!, $v: Int!) { playlist(id: $id) { atVersion(version: $v) { "
    f"version title entryCount entries(first: 50) {{ totalCount {EDGES} }} }} }} }}"
)


async def build(db: Database) -> tuple[str, int, float]:
    """The playlist id, its head version, and seconds the edits took."""
    store = PlaylistStore(db)
    created = await store.create(CreatePlaylist("bench-create", "Bench"), "alice")
    pid = created.outcome.playlist_id
    version = 0
    live: list[str] = []
    for start in range(1, ENTRIES + 1, 100):
        media = tuple(f"chinook:track:{i}" for i in range(start, start + 100))
        done = await store.execute(AddEntries(pid, f"seed-{start}", version, media), "alice")
        version = done.outcome.version
        live += [e.entry_id for e in done.outcome.entries]
    rng = random.Random(15)
    started = time.monotonic()
    for n in range(EDITS):
        kind = n % 8
        op = f"edit-{n}"
        if kind in (0, 1, 2, 3):
            target, anchor = rng.sample(live, 2)
            command: Any = MoveEntries(pid, op, version, (target,), Placement(after=anchor))
        elif kind in (4, 5):
            media = (f"chinook:track:{rng.randint(1, 3503)}",)
            command = AddEntries(pid, op, version, media, Placement(after=rng.choice(live)))
        elif kind == 6:
            command = RemoveEntries(pid, op, version, (live.pop(rng.randrange(len(live))),))
        else:
            command = UpdatePlaylist(pid, op, version, title=f"Bench {n}")
        done = await store.execute(command, "alice")
        version = done.outcome.version
        if kind in (4, 5):
            live += [e.entry_id for e in done.outcome.entries]
    return pid, version, time.monotonic() - started


async def timed(reads: int, one: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """Median and p95 of ``reads`` calls, in milliseconds (after 5 warm-up calls)."""
    for _ in range(5):
        await one()
    took = []
    for _ in range(reads):
        started = time.perf_counter()
        await one()
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.95) - 1]


async def measure(url: str, reads: int) -> dict[str, Any]:
    await upgrade_async(url)
    db = Database(url)
    try:
        pid, head, build_s = await build(db)
        gid = ids.playlist_global_id(pid)
        schema = build_schema()
        services = Services(db, PlaylistStore(db), EmbeddedCatalog(), DEFAULT_LIMITS)

        async def run(query: str, **variables: Any) -> None:
            result = await schema.execute(
                query,
                variable_values={"id": gid, **variables},
                context_value=RequestContext(services, "alice"),
            )
            assert result.errors is None, result.errors

        target = head - BEHIND
        worst = target + (1 - target) % CHECKPOINT_EVERY  # one past a checkpoint
        replayed = {}
        for v in (target, worst):
            found = await pages.playlist_at(db, pid, v)
            assert isinstance(found, AtVersion)
            replayed[v] = found.replayed
        async with db.read() as conn:
            kept = await conn.scalar(
                select(func.count()).where(playlist_checkpoint_entry.c.playlist_id == pid)
            )
        out: dict[str, Any] = {"head": head, "build_s": build_s, "checkpoint_rows": kept}
        out["entries"] = await timed(reads, lambda: run(HEAD))
        out["at"] = await timed(reads, lambda: run(AT, v=target))
        out["worst"] = await timed(reads, lambda: run(AT, v=worst))
        out["replayed"] = (replayed[target], replayed[worst])
        async with db.write() as conn:
            await conn.execute(delete(playlist_checkpoint_entry))
            await conn.execute(delete(playlist_checkpoint))
        found = await pages.playlist_at(db, pid, target)
        assert isinstance(found, AtVersion)
        out["plain_replayed"] = found.replayed
        out["plain"] = await timed(max(reads // 4, 5), lambda: run(AT, v=target))
        return out
    finally:
        await db.dispose()


def report(backend: str, r: dict[str, Any]) -> None:
    base = r["entries"][0]
    print(
        f"{backend}: head version {r['head']}, {ENTRIES}-entry list, {EDITS} edits in "
        f"{r['build_s']:.0f} s, {r['checkpoint_rows']} checkpoint rows "
        f"(every {CHECKPOINT_EVERY} versions)"
    )
    print(f"  {'read (50 entries)':44} {'median ms':>9} {'p95 ms':>8} {'ratio':>7}")
    rows = [
        ("entries at the head", r["entries"]),
        (f"atVersion head-{BEHIND} (undoes {r['replayed'][0]})", r["at"]),
        (f"atVersion worst case (undoes {r['replayed'][1]})", r["worst"]),
        (f"atVersion, no checkpoints (undoes {r['plain_replayed']})", r["plain"]),
    ]
    for name, (median, p95) in rows:
        print(f"  {name:44} {median:9.2f} {p95:8.2f} {median / base:7.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=60)
    parser.add_argument("--backend", choices=["both", "sqlite", "postgres"], default="both")
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    if args.backend in ("both", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            report("sqlite", await measure(url, args.reads))
    if args.backend in ("both", "postgres"):
        name = f"chorus_bench_{uuid.uuid4().hex[:8]}"
        admin = await asyncpg.connect(args.admin_url)
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            dsn = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
            url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
            report("postgres", await measure(url, args.reads))
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
