"""The outbox relay against real PostgreSQL and Kafka (Tansu).

The relay claims with ``FOR UPDATE SKIP LOCKED`` plus one advisory lock per
playlist, produces with ``acks=all`` and stamps only after the broker
acknowledged: several relays share a backlog without splitting a playlist,
and a relay that dies between produce and stamp produces the batch again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import REGISTRY
from sqlalchemy import func, select

from chorus.db import outbox
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox as outbox_table
from chorus.domain.changes import PlaylistEvent
from chorus.events.kafka import KafkaConfig, KafkaPublisher
from chorus.events.relay import OutboxRelay
from tests.full.helpers import add, create_playlist, eventually, read_topic


async def _unpublished(db: Database) -> int:
    async with db.read() as conn:
        return int(
            (
                await conn.execute(
                    select(func.count()).where(outbox_table.c.published_at.is_(None))
                )
            ).scalar_one()
        )


def _batches() -> float:
    return REGISTRY.get_sample_value("chorus_relay_batches_total") or 0.0


async def test_relay_publishes_each_event_keyed_by_playlist_in_version_order(
    pg_database: Database, kafka_config: KafkaConfig
) -> None:
    store = PlaylistStore(pg_database)
    playlists = [await create_playlist(store) for _ in range(3)]
    for pid in playlists:
        await add(store, pid, 4)
    publisher = KafkaPublisher(kafka_config)
    relay = OutboxRelay(pg_database, publisher, batch_size=5)
    batches_before = _batches()
    try:
        while await relay.drain_once():
            pass
    finally:
        await publisher.aclose()

    assert await _unpublished(pg_database) == 0
    # Three claims of five; the last, empty drain is not a batch.
    assert _batches() - batches_before == 3
    seen = await read_topic(kafka_config, expected=15)
    assert seen == {pid: [0, 1, 2, 3, 4] for pid in playlists}
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_config.bootstrap_servers)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([kafka_config.topic])
    finally:
        await admin.close()
    assert len(described["partitions"]) == kafka_config.partitions


async def test_several_relays_share_a_backlog_without_reordering_a_playlist(
    pg_database: Database, kafka_config: KafkaConfig
) -> None:
    store = PlaylistStore(pg_database)
    playlists = [await create_playlist(store) for _ in range(12)]
    for _ in range(10):
        for pid in playlists:
            await add(store, pid)
    publishers = [KafkaPublisher(kafka_config) for _ in range(3)]
    relays = [OutboxRelay(pg_database, p, batch_size=7) for p in publishers]
    tasks = [asyncio.create_task(r.run()) for r in relays]
    try:
        await eventually(
            lambda: _none_unpublished(pg_database), what="the backlog to drain", timeout_s=30
        )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for publisher in publishers:
            await publisher.aclose()

    assert sum(1 for r in relays if r.published) >= 2, "the relays did not share the work"
    seen = await read_topic(kafka_config, expected=12 * 11)
    assert seen == {pid: list(range(11)) for pid in playlists}


async def _none_unpublished(db: Database) -> bool:
    return await _unpublished(db) == 0


class _KilledAfterProduce(Exception):
    """Stands for the relay process dying after the broker acknowledged, before the stamp."""


class _DiesBeforeStamp:
    def __init__(self, publisher: KafkaPublisher) -> None:
        self.publisher = publisher

    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        await self.publisher.publish_batch(events, traceparents=traceparents)
        raise _KilledAfterProduce


async def test_a_relay_killed_between_produce_and_stamp_produces_the_batch_again(
    pg_database: Database, kafka_config: KafkaConfig
) -> None:
    store = PlaylistStore(pg_database)
    pid = await create_playlist(store)
    await add(store, pid, 2)
    publisher = KafkaPublisher(kafka_config)
    try:
        with pytest.raises(_KilledAfterProduce):
            await OutboxRelay(pg_database, _DiesBeforeStamp(publisher)).drain_once()
        assert await _unpublished(pg_database) == 3  # nothing was stamped
        assert await OutboxRelay(pg_database, publisher).drain_once() == 3
    finally:
        await publisher.aclose()
    assert await _unpublished(pg_database) == 0
    assert await read_topic(kafka_config, expected=6) == {pid: [0, 1, 2, 0, 1, 2]}


async def test_backlog_reports_count_and_age_of_the_oldest_unpublished_event(
    pg_database: Database, kafka_config: KafkaConfig
) -> None:
    from datetime import UTC, datetime, timedelta

    store = PlaylistStore(pg_database)
    pid = await create_playlist(store)
    await add(store, pid, 2)
    later = datetime.now(UTC) + timedelta(seconds=30)
    async with pg_database.read() as conn:
        count, age = await outbox.backlog(conn, later)
    assert count == 3
    assert 29 < age < 60
    publisher = KafkaPublisher(kafka_config)
    try:
        await OutboxRelay(pg_database, publisher).drain_once()
    finally:
        await publisher.aclose()
    async with pg_database.read() as conn:
        assert await outbox.backlog(conn, later) == (0, 0.0)
