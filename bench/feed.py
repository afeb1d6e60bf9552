"""The feed's hybrid fan-out: what a commit costs on each side, and what a feed read costs.

Builds, in one database (rows made in bulk):

* three playlists: one nobody follows (the peer), one with 1,000 followers
  (pushed: below ``CHORUS_FEED_PUSH_MAX_FOLLOWERS``, 10,000) and one with
  100,000 (pulled);
* a reader following 200 targets: 100 pulled (their follower count is set to
  100,000 in ``follow_count``, which is all the push-or-pull decision reads)
  and 100 pushed, each with a few versions since the follow; and, as the
  peer, a reader following 200 pushed targets.

Then, interleaved, it commits one add on each of the three playlists and runs
the feed sink on that version (what the feed consumer does), timing the
commit and the sink apart, and reads the readers' feeds (first page and the
pages after it, 20 items each). The goals: a commit on the pulled playlist
costs what it costs on the peer (ratio ≤ 1.5: nothing grows with followers),
the pushed one writes one row per follower, and a mixed feed read stays within
a small factor of the all-pushed one (one query per pulled target).

    python bench/feed.py                     # a temporary SQLite file
    python bench/feed.py --database-url postgresql+asyncpg://postgres@127.0.0.1:5432/bench

The database is migrated to head first; what the bench made is left in it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, select

from chorus.db import feed
from chorus.db.engine import Database
from chorus.db.follows import FollowStore, set_follower_count
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.db.tables import follow, outbox
from chorus.domain.changes import PlaylistEvent
from chorus.domain.commands import AddEntries, CreatePlaylist, UpdatePlaylist
from chorus.domain.follows import FeedKey, FeedLimits, Target, TargetKind
from chorus.domain.model import Visibility
from chorus.events.feed import FeedSink

OWNER = "bench-owner"
LIMITS = FeedLimits()  # the defaults: push below 10,000 followers
CHUNK = 5_000
PAGE = 20


def op() -> str:
    return uuid.uuid4().hex


async def new_playlist(store: PlaylistStore, title: str) -> str:
    made = await store.create(CreatePlaylist(op(), title, visibility=Visibility.PUBLIC), OWNER)
    return made.outcome.playlist_id


async def bulk_follow(db: Database, playlist_id: str, count: int, since: datetime) -> None:
    """``count`` followers of the playlist, inserted in chunks, and their count."""
    target = Target(TargetKind.PLAYLIST, playlist_id)
    for start in range(0, count, CHUNK):
        rows = [
            {
                "follower_id": f"fan-{i}",
                "target_kind": target.kind.value,
                "target_id": playlist_id,
                "created_at": since,
            }
            for i in range(start, min(count, start + CHUNK))
        ]
        async with db.write() as conn:
            await conn.execute(insert(follow), rows)
    async with db.write() as conn:
        await set_follower_count(conn, target, count)


async def event_of(db: Database, playlist_id: str, version: int) -> PlaylistEvent:
    async with db.read() as conn:
        payload = await conn.scalar(
            select(outbox.c.payload).where(
                outbox.c.playlist_id == playlist_id, outbox.c.version == version
            )
        )
    assert payload is not None
    event: PlaylistEvent = payload
    return event


class Side:
    """One playlist and what one commit on it cost: commit and sink apart (seconds)."""

    def __init__(self, name: str, playlist_id: str) -> None:
        self.name = name
        self.playlist_id = playlist_id
        self.commits: list[float] = []
        self.sinks: list[float] = []
        self.rows: list[int] = []

    async def commit_once(self, store: PlaylistStore, sink: FeedSink) -> None:
        start = time.perf_counter()
        done = await store.execute(AddEntries(self.playlist_id, op(), 0, ("bench-media",)), OWNER)
        self.commits.append(time.perf_counter() - start)
        event = await event_of(store.db, self.playlist_id, done.outcome.version)
        start = time.perf_counter()
        self.rows.append(await sink.write([event]))
        self.sinks.append(time.perf_counter() - start)


def ms(values: list[float], q: float = 0.5) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def reader(db: Database, store: PlaylistStore, name: str, pulled: int, pushed: int) -> None:
    """``name`` follows ``pulled`` large and ``pushed`` small targets, each with 3 versions."""
    follows = FollowStore(db, LIMITS)  # followed after creation: version 0 is not theirs
    sink = FeedSink(db, LIMITS)
    for i in range(pulled + pushed):
        pid = await new_playlist(store, f"{name} target {i}")
        target = Target(TargetKind.PLAYLIST, pid)
        await follows.follow(name, target)
        if i < pulled:
            async with db.write() as conn:
                await set_follower_count(conn, target, 100_000)
        for version in range(1, 4):
            await store.execute(UpdatePlaylist(pid, op(), version - 1, title=f"v{version}"), OWNER)
            await sink.write([await event_of(db, pid, version)])


async def read_pages(db: Database, user: str, times: list[float]) -> int:
    """Read the whole feed a page at a time, timing each page; the items read."""
    before: FeedKey | None = None
    count = 0
    while True:
        start = time.perf_counter()
        page = await feed.read_feed(
            db, user, LIMITS, now=datetime.now(UTC), before=before, size=PAGE
        )
        times.append(time.perf_counter() - start)
        count += len(page.items)
        if not page.has_next:
            return count
        before = page.items[-1].sort_key


async def measure(url: str, repetitions: int) -> None:
    await upgrade_async(url)
    db = Database(url)
    try:
        store = PlaylistStore(db)
        sink = FeedSink(db, LIMITS)
        since = datetime.now(UTC) - timedelta(minutes=1)
        built = time.perf_counter()
        sides = [Side("0 followers (peer)", await new_playlist(store, "nobody's"))]
        for count in (1_000, 100_000):
            side = Side(f"{count:,} followers", await new_playlist(store, f"{count}"))
            await bulk_follow(db, side.playlist_id, count, since)
            sides.append(side)
        await reader(db, store, "mixed-reader", 100, 100)
        await reader(db, store, "pushed-reader", 0, 200)
        print(f"built in {time.perf_counter() - built:.1f} s")
        for side in sides:  # warm up
            await side.commit_once(store, sink)
            side.commits.clear()
            side.sinks.clear()
            side.rows.clear()
        reads: dict[str, list[float]] = {"mixed-reader": [], "pushed-reader": []}
        items: dict[str, int] = {}
        for _ in range(repetitions):
            for side in sides:
                await side.commit_once(store, sink)
            for user, times in reads.items():
                items[user] = await read_pages(db, user, times)
    finally:
        await db.dispose()
    peer = sides[0]
    peer_total = ms(peer.commits) + ms(peer.sinks)
    print(f"{db.dialect}, {repetitions} repetitions; one commit, then the feed sink on it:")
    print(f"{'playlist':22}{'side':>6}{'commit p50':>12}{'sink p50':>10}{'rows':>8}{'/peer':>7}")
    for side in sides:
        followers = int(side.name.split()[0].replace(",", ""))
        kind = "-" if followers == 0 else ("push" if LIMITS.pushed(followers) else "pull")
        total = ms(side.commits) + ms(side.sinks)
        rows = statistics.mean(side.rows)
        print(
            f"{side.name:22}{kind:>6}{ms(side.commits):>9.2f} ms{ms(side.sinks):>7.2f} ms"
            f"{rows:>8.0f}{total / peer_total:>7.2f}"
        )
    pulled = sides[2]
    ratio = (ms(pulled.commits) + ms(pulled.sinks)) / peer_total
    verdict = "ok" if ratio <= 1.5 else "ABOVE GOAL 1.5"
    print(f"pulled commit / peer commit: {ratio:.2f}  {verdict}")
    print(f"feed read, {PAGE} a page, every page of the feed ({repetitions} passes):")
    print(f"{'reader (200 targets)':28}{'items':>7}{'p50':>10}{'p99':>10}")
    for user, times in reads.items():
        print(f"{user:28}{items[user]:>7}{ms(times):>7.2f} ms{ms(times, 0.99):>7.2f} ms")
    mixed = ms(reads["mixed-reader"]) / ms(reads["pushed-reader"])
    print(f"mixed / all-pushed read p50: {mixed:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    parser.add_argument("--repetitions", type=int, default=30)
    args = parser.parse_args()
    if args.database_url:
        asyncio.run(measure(args.database_url, args.repetitions))
        return
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        asyncio.run(measure(url, args.repetitions))


if __name__ == "__main__":
    main()
