"""Edit cost against playlist length: an add or a move must not grow with the list.

Builds a 10-entry and a 10,000-entry playlist (the big one from AddEntries of
100 media each), then times, on both and interleaved, ~200 of each:

* add: one media right after a random live entry;
* move: one random entry to right after another random entry.

Each is one full command through ``PlaylistStore.execute`` (one transaction:
lock, idempotency check, placement, entry rows, header, log and outbox). Before
each timed add, a random entry is removed (untimed), so both playlists keep
their size; the big one stays at the 10,000-entry limit. Prints the median
time of each and the ratio big/small; the goal (DESIGN §4: an edit writes only
the rows it adds or moves) is a ratio ≤ 1.5 for both.

    python bench/edit_cost.py                     # a temporary SQLite file
    python bench/edit_cost.py --database-url postgresql+asyncpg://postgres@127.0.0.1:5432/bench

The database is migrated to head first; the playlists are left in it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from chorus.db.engine import Database
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    MoveEntries,
    Placement,
    PlaylistCommand,
    RemoveEntries,
)
from chorus.domain.decisions import Outcome

ACTOR = "bench"
BATCH = 100


def op() -> str:
    return uuid.uuid4().hex


@dataclass
class Bench:
    """One playlist, its live entry ids, and the times measured on it (seconds)."""

    store: PlaylistStore
    playlist_id: str
    entry_ids: list[str]
    version: int
    adds: list[float] = field(default_factory=list)
    moves: list[float] = field(default_factory=list)

    @classmethod
    async def build(cls, store: PlaylistStore, size: int) -> Bench:
        created = await store.create(CreatePlaylist(op(), f"Bench {size}"), ACTOR)
        bench = cls(store, created.outcome.playlist_id, [], 0)
        for start in range(0, size, BATCH):
            media = tuple(f"media-{i}" for i in range(start, min(size, start + BATCH)))
            outcome = await bench.run(AddEntries(bench.playlist_id, op(), bench.version, media))
            bench.entry_ids += [e.entry_id for e in outcome.entries]
        return bench

    async def run(self, command: PlaylistCommand) -> Outcome:
        committed = await self.store.execute(command, ACTOR)
        self.version = committed.outcome.version
        return committed.outcome

    async def add(self, rng: random.Random) -> None:
        # Make room first (untimed): a full playlist refuses the add.
        gone = self.entry_ids.pop(rng.randrange(len(self.entry_ids)))
        await self.run(RemoveEntries(self.playlist_id, op(), self.version, (gone,)))
        anchor = rng.choice(self.entry_ids)
        command = AddEntries(
            self.playlist_id, op(), self.version, ("media-new",), Placement(after=anchor)
        )
        start = time.perf_counter()
        outcome = await self.run(command)
        self.adds.append(time.perf_counter() - start)
        self.entry_ids.append(outcome.entries[0].entry_id)

    async def move(self, rng: random.Random) -> None:
        entry, anchor = rng.sample(self.entry_ids, 2)
        command = MoveEntries(
            self.playlist_id, op(), self.version, (entry,), Placement(after=anchor)
        )
        start = time.perf_counter()
        await self.run(command)
        self.moves.append(time.perf_counter() - start)


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


async def measure(url: str, repetitions: int, seed: int) -> None:
    await upgrade_async(url)
    db = Database(url)
    try:
        store = PlaylistStore(db)
        build_start = time.perf_counter()
        small = await Bench.build(store, 10)
        big = await Bench.build(store, 10_000)
        print(f"built 10 + 10,000 entries in {time.perf_counter() - build_start:.1f} s")
        rng = random.Random(seed)
        for bench in (small, big):  # warm up connections and statement caches
            for _ in range(10):
                await bench.add(rng)
                await bench.move(rng)
            bench.adds.clear()
            bench.moves.clear()
        for _ in range(repetitions):
            for bench in (small, big):
                await bench.add(rng)
                await bench.move(rng)
    finally:
        await db.dispose()
    print(f"{db.dialect}, {repetitions} repetitions, median per command:")
    print(f"{'':6}{'10 entries':>12}{'10,000 entries':>16}{'big/small':>11}")
    for name, s, b in (("add", small.adds, big.adds), ("move", small.moves, big.moves)):
        ratio = median_ms(b) / median_ms(s)
        verdict = "ok" if ratio <= 1.5 else "ABOVE GOAL 1.5"
        print(f"{name:6}{median_ms(s):>9.2f} ms{median_ms(b):>13.2f} ms{ratio:>10.2f}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.database_url:
        asyncio.run(measure(args.database_url, args.repetitions, args.seed))
        return
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        asyncio.run(measure(url, args.repetitions, args.seed))


if __name__ == "__main__":
    main()
