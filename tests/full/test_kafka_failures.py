"""Failure-table rows about Kafka, through the whole chain on real servers.

PostgreSQL store → outbox relay → Kafka (a private Tansu broker) → fanout →
Redis pub/sub → RedisBus → Hub → a subscription stream, with the cache
projector beside fanout. The stream's idle check is set far beyond the test,
so only the version-jump and reconnect repairs can close a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import redis.asyncio as redis

from chorus.caches.snapshot_writer import SnapshotStore
from chorus.db import outbox
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.changes import PlaylistEvent
from chorus.domain.committed import CommittedVersion
from chorus.events.fanout import Fanout
from chorus.events.kafka import KafkaConfig, KafkaPublisher
from chorus.events.projector import CacheProjector
from chorus.events.relay import OutboxRelay
from chorus.resilience.tasks import cancel_and_wait
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.redis_bus import RedisBus
from chorus.subscriptions.stream import playlist_stream
from tests.full.helpers import ALICE, add, create_playlist, eventually, read_topic
from tests.servers import TansuServer

IDLE_CHECK_S = 3_600.0
"""Longer than any test: a gap must be repaired by detection, not by polling."""


@dataclass
class Follower:
    """Reads one playlist's stream into ``versions`` until cancelled."""

    versions: list[int] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def follow(self, stream: AsyncIterator[object]) -> None:
        async for item in stream:
            assert isinstance(item, CommittedVersion), item
            self.versions.append(item.version)


class Chain:
    """The full profile's moving parts in one event loop, each a task that can be stopped."""

    def __init__(self, db: Database, config: KafkaConfig, redis_url: str) -> None:
        self.db = db
        self.config = config
        self.redis_url = redis_url
        self.client = redis.Redis.from_url(redis_url)
        self.publisher = KafkaPublisher(config)
        self.relay = OutboxRelay(db, self.publisher, poll_interval_s=0.1, retry_max_s=0.5)
        self.store = PlaylistStore(db, on_commit=self.relay.notify)
        self.bus = RedisBus(redis_url)
        self.hub = Hub(self.bus)
        self.group = uuid.uuid4().hex[:8]
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, *names: str) -> None:
        for name in names:
            if name == "relay":
                work = self.relay.run()
            elif name == "fanout":
                work = Fanout(self.config, self.client, group_id=f"fanout-{self.group}").run()
            else:
                work = CacheProjector(
                    self.config, self.client, self.db, group_id=f"projector-{self.group}"
                ).run()
            self.tasks[name] = asyncio.create_task(work, name=name)

    async def stop(self, *names: str) -> None:
        for name in names or tuple(self.tasks):
            task = self.tasks.pop(name)
            await cancel_and_wait(task)

    def follow(self, playlist_id: str) -> Follower:
        follower = Follower()
        stream = playlist_stream(
            self.db, self.hub, ALICE, playlist_id, 0, idle_check_s=IDLE_CHECK_S
        )
        follower.task = asyncio.create_task(follower.follow(stream))
        return follower

    async def followed_playlist(self, versions: int) -> tuple[str, Follower]:
        """Start every part; a new playlist of ``versions`` adds, and a follower that
        heard them live."""
        self.start("relay", "fanout", "projector")
        pid = await create_playlist(self.store)
        follower = self.follow(pid)
        await add(self.store, pid, versions)
        await eventually(lambda: _has(follower, versions), what=f"versions 1..{versions} live")
        return pid, follower

    async def aclose(self) -> None:
        await self.stop()
        await self.publisher.aclose()
        await self.bus.aclose()
        await self.client.aclose()


@contextlib.asynccontextmanager
async def chain(db: Database, config: KafkaConfig, redis_url: str) -> AsyncIterator[Chain]:
    parts = Chain(db, config, redis_url)
    await parts.bus.start()
    try:
        yield parts
    finally:
        await parts.aclose()


def _config(tansu: TansuServer) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=tansu.bootstrap_servers,
        topic=f"chorus-test-{uuid.uuid4().hex[:8]}",
        partitions=3,
        idempotent=False,
        request_timeout_ms=3_000,
    )


async def _backlog(db: Database) -> int:
    from datetime import UTC, datetime

    async with db.read() as conn:
        count, _ = await outbox.backlog(conn, datetime.now(UTC))
    return count


async def _snapshot_version(client: redis.Redis, playlist_id: str) -> int | None:
    versions = await SnapshotStore(client).versions([playlist_id])
    return versions.get(playlist_id)


async def test_kafka_down_mutations_commit_and_the_backlog_drains_in_order_after(
    pg_database: Database, private_tansu: TansuServer, redis_url: str
) -> None:
    async with chain(pg_database, _config(private_tansu), redis_url) as parts:
        pid, follower = await parts.followed_playlist(3)

        private_tansu.kill()
        head = await add(parts.store, pid, 5)  # mutations keep committing
        assert head == 8
        await eventually(lambda: _backlog_at_least(pg_database, 5), what="the backlog to grow")

        private_tansu.start()  # empty: Tansu kept its log in memory
        await eventually(lambda: _backlog_at_least(pg_database, 0, exactly=True), timeout_s=30)
        await eventually(lambda: _has(follower, 8), what="versions 4..8", timeout_s=30)
        await eventually(  # a consumer restarted by the broker's loss may rejoin slowly
            lambda: _snapshot_is(parts.client, pid, 8),
            what="the projector to catch up",
            timeout_s=60,
        )
        assert follower.versions == list(range(1, 9))
        # What the new broker holds of the drained backlog is in version order.
        # (Tansu may acknowledge records for a topic it lost and drop them; the
        # stream repaired any such loss from SQL above.)
        drained = (await read_topic(parts.config, 5, timeout_s=3, at_most=True)).get(pid, [])
        assert drained == sorted(set(drained))
        assert set(drained) <= {4, 5, 6, 7, 8}


async def test_events_lost_with_the_broker_are_repaired_from_sql_by_the_version_jump(
    pg_database: Database, private_tansu: TansuServer, redis_url: str
) -> None:
    async with chain(pg_database, _config(private_tansu), redis_url) as parts:
        pid, follower = await parts.followed_playlist(2)

        # Versions 3..5 are published and stamped, but no consumer reads
        # them before the broker dies with its in-memory log.
        await parts.stop("fanout", "projector")
        await add(parts.store, pid, 3)
        await eventually(lambda: _backlog_at_least(pg_database, 0, exactly=True))
        private_tansu.kill()
        private_tansu.start()
        parts.start("fanout", "projector")
        await add(parts.store, pid, 2)  # 6 and 7 reach Kafka; 3..5 never will

        await eventually(lambda: _has(follower, 7), what="versions 3..7", timeout_s=30)
        assert follower.versions == list(range(1, 8))
        await eventually(lambda: _snapshot_is(parts.client, pid, 7), what="the snapshot at 7")


class _KilledAfterProduce(Exception):
    pass


class _DiesOnceBeforeStamp:
    """Produces, then dies before the stamp — the first time only."""

    def __init__(self, publisher: KafkaPublisher) -> None:
        self.publisher = publisher
        self.died = False

    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        await self.publisher.publish_batch(events, traceparents=traceparents)
        if not self.died:
            self.died = True
            raise _KilledAfterProduce


async def test_a_relay_killed_between_produce_and_stamp_delivers_no_duplicate(
    pg_database: Database, kafka_config: KafkaConfig, redis_url: str
) -> None:
    async with chain(pg_database, kafka_config, redis_url) as parts:
        dying = _DiesOnceBeforeStamp(parts.publisher)
        parts.relay = OutboxRelay(pg_database, dying, poll_interval_s=0.1, retry_max_s=0.2)
        parts.store = PlaylistStore(pg_database, on_commit=parts.relay.notify)
        pid = await create_playlist(parts.store)
        follower = parts.follow(pid)
        await add(parts.store, pid, 4)
        parts.start("relay", "fanout", "projector")

        await eventually(lambda: _has(follower, 4), what="versions 1..4")
        await eventually(lambda: _snapshot_is(parts.client, pid, 4), what="the snapshot at 4")
        assert dying.died
        topic = await read_topic(parts.config, expected=10)
        assert topic[pid] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]  # Kafka holds the batch twice
        await asyncio.sleep(0.3)  # give a duplicate the chance to show up
        assert follower.versions == [1, 2, 3, 4]
        published = await parts.client.get(f"chorus:v2:playlist:{{{pid}}}:fanout-version")
        assert published == b"4"


async def _has(follower: Follower, last: int) -> bool:
    assert follower.task is not None
    if follower.task.done():
        follower.task.result()  # raise what ended the stream
    return bool(follower.versions) and follower.versions[-1] >= last


async def _backlog_at_least(db: Database, count: int, *, exactly: bool = False) -> bool:
    backlog = await _backlog(db)
    return backlog == count if exactly else backlog >= count


async def _snapshot_is(client: redis.Redis, playlist_id: str, version: int) -> bool:
    return await _snapshot_version(client, playlist_id) == version
