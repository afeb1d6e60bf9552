"""Fan-out: commit → delivery latency to 1, 100 and 1,000 subscribers, and catch-up time.

Everything runs in one process on a temporary SQLite database, wired as
``chorus serve`` wires it: a real :class:`PlaylistStore` commits, the
:class:`OutboxRelay` publishes the outbox to an :class:`InProcessBus`, the
:class:`Hub` fans out, and each subscriber is a
:func:`~chorus.subscriptions.stream.playlist_stream` consumed by an asyncio
task (no GraphQL, no sockets).

* **Latency** — for each subscriber count, commits run one at a time (each
  adds one media); a sample is the time from just before ``store.execute``
  starts to the moment one subscriber receives that version. Baseline, same
  run: the bare bus and hub — no SQL, no stream — publishing the same outbox
  events directly to the same number of hub members, timed from just before
  ``bus.publish`` to each member's queue read.
* **Catch-up** — a stream from version 0 over a 10,000-version log (each
  version one added entry) until it yields version 10,000. Baseline, same
  run: one ``repository.versions_since`` read of the same 10,000 rows. The
  log is written in bulk with the canonical payloads the store writes
  (``encode_change``), because 10,000 single commits would take minutes;
  the catch-up then checks it reads exactly versions 1…10,000.

Prints p50/p99 of each, and ratios Chorus / baseline; ``commit p50`` is how
long ``store.execute`` itself took (the SQLite transaction), which the bare
baseline does not pay.

    python bench/fanout.py [--sizes 1,100,1000] [--catch-up-versions 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import insert, select, update

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox, playlist, playlist_entry, playlist_mutation
from chorus.db.writer import entry_values
from chorus.domain.changes import WIRE_VERSION, EntriesAdded, PlaylistEvent, encode_change
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.committed import CommittedVersion
from chorus.domain.model import Entry
from chorus.domain.positions import allocate
from chorus.events.relay import OutboxRelay
from chorus.resilience.tasks import cancel_and_wait
from chorus.subscriptions.bus import BusPublisher, InProcessBus
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.stream import Resync, playlist_stream

VIEWER = "alice"
COMMITS = {1: 200, 100: 100, 1_000: 30}
"""Commits measured per subscriber count (fewer where each one fans out to more)."""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


@dataclass
class Arrivals:
    """When each of ``expected`` subscribers received each version."""

    expected: int
    times: dict[int, list[float]] = field(default_factory=dict)
    complete: dict[int, asyncio.Event] = field(default_factory=dict)

    def event(self, version: int) -> asyncio.Event:
        return self.complete.setdefault(version, asyncio.Event())

    def record(self, version: int) -> None:
        now = time.perf_counter()
        got = self.times.setdefault(version, [])
        got.append(now)
        if len(got) == self.expected:
            self.event(version).set()


async def measure(
    arrivals: Arrivals,
    versions: Iterable[int],
    send: Callable[[int], Awaitable[None]],
    *,
    timeout_s: float = 120.0,
) -> list[float]:
    """Send each version in turn and wait for every subscriber; latencies in ms."""
    samples: list[float] = []
    for version in versions:
        start = time.perf_counter()
        await send(version)
        await asyncio.wait_for(arrivals.event(version).wait(), timeout_s)
        samples += [(t - start) * 1000 for t in arrivals.times[version]]
    return samples


async def chorus_latency(
    db: Database, subscribers: int, commits: int
) -> tuple[list[float], list[float], str]:
    """Real store, relay, bus, hub and streams: latencies, commit times (ms), playlist id."""
    bus = InProcessBus()
    hub = Hub(bus)
    relay = OutboxRelay(db, BusPublisher(bus))
    store = PlaylistStore(db, on_commit=relay.notify)
    relay_task = asyncio.create_task(relay.run())
    created = await store.create(CreatePlaylist(uuid.uuid4().hex, "Fanout"), VIEWER)
    pid = created.outcome.playlist_id
    arrivals = Arrivals(subscribers)

    async def subscriber() -> None:
        async for item in playlist_stream(db, hub, VIEWER, pid, 0, idle_check_s=3_600):
            assert not isinstance(item, Resync), item
            arrivals.record(item.version)

    tasks = [asyncio.create_task(subscriber()) for _ in range(subscribers)]

    commit_ms: list[float] = []

    async def commit(version: int) -> None:
        start = time.perf_counter()
        done = await store.execute(AddEntries(pid, uuid.uuid4().hex, 0, (f"m{version}",)), VIEWER)
        commit_ms.append((time.perf_counter() - start) * 1000)
        assert done.outcome.version == version

    try:
        # Version 1 warms up: once every stream has it, all are past catch-up and live.
        await measure(arrivals, [1], commit)
        samples = await measure(arrivals, list(range(2, commits + 2)), commit)
    finally:
        await asyncio.gather(*(cancel_and_wait(t) for t in (*tasks, relay_task)))
        await bus.aclose()
    return samples, commit_ms[1:], pid


async def bare_latency(events: list[PlaylistEvent], subscribers: int) -> list[float]:
    """The same events published straight to the bus, read from hub members' queues."""
    bus = InProcessBus()
    hub = Hub(bus)
    arrivals = Arrivals(subscribers)
    members = [await hub.join(events[0]["playlist_id"]) for _ in range(subscribers)]

    async def member_reader(queue: asyncio.Queue[CommittedVersion]) -> None:
        while True:
            version = await queue.get()
            arrivals.record(version.version)

    tasks = [asyncio.create_task(member_reader(m.queue)) for m in members]
    by_version = {e["version"]: e for e in events}

    async def publish(version: int) -> None:
        await bus.publish(by_version[version])

    try:
        return await measure(arrivals, sorted(by_version), publish)
    finally:
        await asyncio.gather(*(cancel_and_wait(task) for task in tasks))
        for member in members:
            await hub.leave(member)


async def outbox_events(db: Database, pid: str) -> list[PlaylistEvent]:
    async with db.read() as conn:
        rows = await conn.scalars(
            select(outbox.c.payload)
            .where(outbox.c.playlist_id == pid, outbox.c.version > 1)
            .order_by(outbox.c.version)
        )
        return list(rows)


async def build_log(db: Database, versions: int) -> str:
    """A playlist whose log holds ``versions`` single adds, written in bulk."""
    store = PlaylistStore(db)
    created = await store.create(CreatePlaylist(uuid.uuid4().hex, "Replay"), VIEWER)
    pid = created.outcome.playlist_id
    keys = allocate(None, None, versions)
    assert keys is not None
    now = datetime.now(UTC)
    entries = [Entry(uuid.uuid4().hex, key, f"m{n}", VIEWER, now) for n, key in enumerate(keys, 1)]
    log_rows = []
    for version, entry in enumerate(entries, 1):
        wire = encode_change(EntriesAdded((entry,)))
        log_rows.append(
            {
                "playlist_id": pid,
                "version": version,
                "operation_id": uuid.uuid4().hex,
                "actor_id": VIEWER,
                "payload": {"v": WIRE_VERSION, "changes": [wire]},
                "request_hash": "0" * 64,
                "result": {},
                "committed_at": now,
            }
        )
    async with db.write() as conn:
        await conn.execute(insert(playlist_entry), [entry_values(pid, e) for e in entries])
        await conn.execute(insert(playlist_mutation), log_rows)
        await conn.execute(
            update(playlist)
            .where(playlist.c.id == pid)
            .values(version=versions, entry_count=versions, updated_at=now)
        )
    return pid


async def catch_up_times(db: Database, pid: str, versions: int, rounds: int) -> tuple[float, float]:
    """Best-of-``rounds`` seconds: a stream from 0 to the head, and the bare log read."""
    stream_s, bare_s = [], []
    for _ in range(rounds):
        hub = Hub(InProcessBus())
        start = time.perf_counter()
        seen = 0
        stream = playlist_stream(db, hub, VIEWER, pid, 0, idle_check_s=3_600)
        async for item in stream:
            assert not isinstance(item, Resync)
            seen += 1
            assert item.version == seen
            if seen == versions:
                break
        stream_s.append(time.perf_counter() - start)
        await stream.aclose()  # type: ignore[attr-defined]

        start = time.perf_counter()
        async with db.read() as conn:
            log = await repository.versions_since(conn, pid, 0)
        bare_s.append(time.perf_counter() - start)
        assert log is not None
        assert len(log) == versions
    return min(stream_s), min(bare_s)


async def main(sizes: list[int], catch_up_versions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="chorus-fanout-") as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'fanout.db'}"
        await upgrade_async(url)
        db = Database(url)
        try:
            print("commit → delivery latency, ms (SQLite, in-process bus)")
            print(
                f"{'subscribers':>11} {'commits':>7} | {'chorus p50':>10} {'p99':>8} "
                f"{'(commit p50)':>12} | {'bare p50':>8} {'p99':>8} | {'ratio p50':>9} {'p99':>7}"
            )
            for n in sizes:
                commits = COMMITS.get(n, 50)
                chorus, commit_ms, pid = await chorus_latency(db, n, commits)
                bare = await bare_latency(await outbox_events(db, pid), n)
                c50, c99 = percentile(chorus, 50), percentile(chorus, 99)
                b50, b99 = percentile(bare, 50), percentile(bare, 99)
                print(
                    f"{n:>11,} {commits:>7} | {c50:>10.2f} {c99:>8.2f} "
                    f"{percentile(commit_ms, 50):>12.2f} | "
                    f"{b50:>8.3f} {b99:>8.3f} | {c50 / b50:>9.0f} {c99 / b99:>7.0f}"
                )
            pid = await build_log(db, catch_up_versions)
            stream_s, bare_s = await catch_up_times(db, pid, catch_up_versions, rounds=3)
            print(
                f"\ncatch-up of {catch_up_versions:,} missed versions (best of 3): "
                f"stream {stream_s:.3f} s ({stream_s / catch_up_versions * 1e6:.0f} µs/version), "
                f"bare versions_since {bare_s:.3f} s, ratio {stream_s / bare_s:.2f}"
            )
        finally:
            await db.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,100,1000", help="subscriber counts, comma-separated")
    parser.add_argument("--catch-up-versions", type=int, default=10_000)
    args = parser.parse_args()
    asyncio.run(main([int(s) for s in args.sizes.split(",")], args.catch_up_versions))
