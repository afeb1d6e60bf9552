"""The cache projector on real Kafka (Tansu), Redis and PostgreSQL.

Commits go through the outbox relay to a fresh topic; the projector consumes
it in its own consumer group. Checked: a PUBLIC playlist gets a snapshot at
its latest version and loses it when made PRIVATE; a private playlist never
gets one; replayed, older and garbage records change nothing; and the
projector keeps working across a broker restart that empties the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import redis.asyncio as redis
from aiokafka import AIOKafkaProducer
from prometheus_client import REGISTRY
from sqlalchemy import select

from chorus.caches.snapshot import Snapshot
from chorus.caches.snapshot_writer import SnapshotStore
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox
from chorus.domain.changes import PlaylistEvent
from chorus.domain.commands import AddEntries, CreatePlaylist, UpdatePlaylist
from chorus.domain.model import Visibility
from chorus.events.kafka import KafkaConfig, KafkaPublisher
from chorus.events.projector import CacheProjector
from chorus.events.relay import OutboxRelay
from chorus.resilience.tasks import cancel_and_wait
from tests.deadlines import patience
from tests.servers import RedisServer, TansuServer


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


@dataclass
class Pipeline:
    """Store → outbox relay → Kafka → cache projector → Redis."""

    store: PlaylistStore
    projector: CacheProjector
    snapshots: SnapshotStore
    config: KafkaConfig

    async def snapshot_at(self, pid: str, version: int) -> bool:
        head, snapshot = await self.snapshots.read(pid)
        return head == version and snapshot is not None and snapshot.version == version

    async def read(self, pid: str) -> tuple[int | None, Snapshot | None]:
        return await self.snapshots.read(pid)


@contextlib.asynccontextmanager
async def running(
    config: KafkaConfig, db: Database, client: redis.Redis
) -> AsyncIterator[Pipeline]:
    publisher = KafkaPublisher(config)
    relay = OutboxRelay(db, publisher, poll_interval_s=0.05, retry_max_s=0.5)
    projector = CacheProjector(
        config, client, db, group_id=f"projector-{uuid.uuid4().hex[:8]}", retry_max_s=0.5
    )
    tasks = [asyncio.create_task(relay.run()), asyncio.create_task(projector.run())]
    store = PlaylistStore(db, on_commit=relay.notify)
    try:
        yield Pipeline(store, projector, SnapshotStore(client), config)
    finally:
        await asyncio.gather(*(cancel_and_wait(task) for task in tasks))
        await publisher.aclose()


@pytest.fixture
async def pipeline(
    kafka_config: KafkaConfig, pg_database: Database, redis_client: redis.Redis
) -> AsyncIterator[Pipeline]:
    async with running(kafka_config, pg_database, redis_client) as p:
        yield p


async def create(store: PlaylistStore, visibility: Visibility, media: int) -> tuple[str, int]:
    operation = uuid.uuid4().hex
    created = await store.create(CreatePlaylist(operation, "Mix", None, visibility), "alice")
    pid = created.outcome.playlist_id
    added = await store.execute(
        AddEntries(pid, operation + "-add", 0, tuple(f"m{i}" for i in range(media))), "alice"
    )
    return pid, added.outcome.version


def applied_total() -> float:
    return REGISTRY.get_sample_value("chorus_projector_snapshots_total") or 0.0


async def test_a_public_playlist_gets_a_snapshot_and_loses_it_when_made_private(
    pipeline: Pipeline,
) -> None:
    before = applied_total()
    pid, version = await create(pipeline.store, Visibility.PUBLIC, 60)
    await eventually(lambda: pipeline.snapshot_at(pid, version), "the snapshot is at version 1")
    _, snapshot = await pipeline.read(pid)
    assert snapshot is not None
    assert [e.media_id for e in snapshot.entries] == [f"m{i}" for i in range(50)]
    assert snapshot.has_more
    assert snapshot.playlist.entry_count == 60
    assert applied_total() > before

    private = await pipeline.store.execute(
        UpdatePlaylist(pid, "hide", version, visibility=Visibility.PRIVATE), "alice"
    )
    gone = private.outcome.version

    async def removed() -> bool:
        return await pipeline.read(pid) == (gone, None)

    await eventually(removed, "the snapshot is removed and the head is at version 2")

    public = await pipeline.store.execute(
        UpdatePlaylist(pid, "show", gone, visibility=Visibility.PUBLIC), "alice"
    )
    await eventually(
        lambda: pipeline.snapshot_at(pid, public.outcome.version), "public again: a snapshot"
    )


async def test_a_private_playlist_never_gets_a_snapshot(pipeline: Pipeline) -> None:
    secret, version = await create(pipeline.store, Visibility.PRIVATE, 3)
    marker, marker_version = await create(pipeline.store, Visibility.PUBLIC, 1)
    await eventually(
        lambda: pipeline.snapshot_at(marker, marker_version), "the marker is projected"
    )

    async def head_raised() -> bool:
        return await pipeline.read(secret) == (version, None)

    await eventually(head_raised, "the private playlist's head is raised, with no snapshot")


async def test_replayed_older_and_garbage_records_change_nothing(
    pipeline: Pipeline, pg_database: Database
) -> None:
    pid, _ = await create(pipeline.store, Visibility.PUBLIC, 5)
    done = await pipeline.store.execute(AddEntries(pid, "b", 1, ("late",)), "alice")
    latest = done.outcome.version
    await eventually(lambda: pipeline.snapshot_at(pid, latest), "the snapshot is at version 2")
    stored = await pipeline.read(pid)
    applied, records = pipeline.projector.applied, pipeline.projector.consumer.records

    async with pg_database.read() as conn:
        rows = await conn.execute(
            select(outbox.c.payload).where(outbox.c.playlist_id == pid).order_by(outbox.c.version)
        )
        events: list[PlaylistEvent] = [r.payload for r in rows]
    assert [e["version"] for e in events] == [0, 1, 2]
    # At-least-once delivery: every event again, oldest last, then garbage.
    publisher = KafkaPublisher(pipeline.config)
    try:
        await publisher.publish_batch([*events, events[1], events[0]])
    finally:
        await publisher.aclose()
    producer = AIOKafkaProducer(bootstrap_servers=pipeline.config.bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait(pipeline.config.topic, b"not json", key=pid.encode())
        await producer.send_and_wait(pipeline.config.topic, b'{"v": 99}', key=pid.encode())
    finally:
        await producer.stop()

    async def consumed() -> bool:
        return pipeline.projector.consumer.records >= records + 7

    await eventually(consumed, "the projector consumed the replays and the garbage")
    assert await pipeline.read(pid) == stored
    assert pipeline.projector.applied == applied, "nothing was written again"


async def test_the_projector_keeps_working_across_a_broker_restart(
    private_tansu: TansuServer, pg_database: Database, redis_client: redis.Redis
) -> None:
    config = KafkaConfig(
        bootstrap_servers=private_tansu.bootstrap_servers,
        topic=f"chorus-test-{uuid.uuid4().hex[:12]}",
        partitions=2,
        idempotent=False,
        request_timeout_ms=3_000,
    )
    async with running(config, pg_database, redis_client) as pipeline:
        pid, version = await create(pipeline.store, Visibility.PUBLIC, 2)
        for i in range(5):  # move the consumer's offsets past where a new log starts
            done = await pipeline.store.execute(AddEntries(pid, f"x{i}", version, ("x",)), "alice")
            version = done.outcome.version
        await eventually(lambda: pipeline.snapshot_at(pid, version), "projected before")

        private_tansu.restart()  # the log and the group's offsets are gone
        done = await pipeline.store.execute(AddEntries(pid, "after", version, ("y",)), "alice")
        version = done.outcome.version
        await eventually(
            lambda: pipeline.snapshot_at(pid, version), "projected after the restart", 60
        )


async def test_records_stuck_behind_a_redis_outage_count_as_lag_then_are_projected(
    kafka_config: KafkaConfig, pg_database: Database, private_redis: RedisServer
) -> None:
    client = redis.Redis.from_url(private_redis.url, socket_connect_timeout=0.5)
    try:
        async with running(kafka_config, pg_database, client) as pipeline:
            pid, version = await create(pipeline.store, Visibility.PUBLIC, 1)
            await eventually(lambda: pipeline.snapshot_at(pid, version), "projected before")

            private_redis.stop()
            done = await pipeline.store.execute(AddEntries(pid, "during", version, ("z",)), "alice")
            version = done.outcome.version

            async def lagging() -> bool:
                return _lag(pipeline.projector) >= 1

            await eventually(lagging, "the lag gauge counts the record Redis refused")

            private_redis.start()
            await eventually(lambda: pipeline.snapshot_at(pid, version), "projected after")

            async def caught_up() -> bool:
                return _lag(pipeline.projector) == 0

            await eventually(caught_up, "the lag gauge is back to 0")
    finally:
        await client.aclose()


def _lag(projector: CacheProjector) -> float:
    labels = {"group": projector.consumer.group_id}
    return REGISTRY.get_sample_value("chorus_consumer_lag_records", labels) or 0.0
