"""The read source's choice: snapshot, then the request's memo, then SQL.

Real SQLite and PostgreSQL (the ``database`` fixture), the machine's Redis for
snapshots (keys are per playlist id, so tests do not collide). Every SQL
statement the database runs is recorded, so "no SQL" is checked, not assumed.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest
import redis.asyncio as redis

from chorus.caches.reader import SnapshotCache
from chorus.catalog.protocol import Media, MediaPage
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Visibility
from chorus.events.kafka import KafkaConfig
from chorus.events.projector import CacheProjector
from chorus.resilience.breaker import CircuitBreaker
from chorus.resolvers.read_source import ReadSource
from chorus.resolvers.services import Services
from tests.sql_log import read_statements

REDIS_URL = os.environ.get("CHORUS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
NO_KAFKA = KafkaConfig(bootstrap_servers="127.0.0.1:9")  # apply() never connects
PAGE = {"from_end": False, "after": None, "before": None}


class Catalog:
    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        return {}

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        return MediaPage((), 0, offset)

    async def aclose(self) -> None:
        return None


@pytest.fixture
async def redis_client() -> AsyncIterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


@pytest.fixture
async def cache(redis_client: redis.Redis) -> AsyncIterator[SnapshotCache]:
    cache = SnapshotCache(redis_client, breaker=CircuitBreaker(), page_size=50)
    yield cache
    await cache.aclose()


@pytest.fixture
def statements(database: Database) -> Iterator[list[str]]:
    """Every SQL statement the database reads with during the test."""
    with read_statements(database) as seen:
        yield seen


async def playlist(database: Database, visibility: Visibility) -> tuple[str, int]:
    """A playlist of 5 entries; its id and version."""
    store = PlaylistStore(database)
    created = await store.create(CreatePlaylist("c", "Mix", "", visibility), "alice")
    pid = created.outcome.playlist_id
    added = await store.execute(AddEntries(pid, "a", 0, ("m1", "m2", "m3", "m4", "m5")), "alice")
    return pid, added.outcome.version


def source(database: Database, snapshots: SnapshotCache | None) -> ReadSource:
    store = PlaylistStore(database)
    return ReadSource(
        Services(database, store, Catalog(), DEFAULT_LIMITS, snapshots=snapshots), "bob"
    )


async def test_a_snapshot_hit_reads_no_sql(
    database: Database,
    cache: SnapshotCache,
    redis_client: redis.Redis,
    statements: list[str],
) -> None:
    pid, version = await playlist(database, Visibility.PUBLIC)
    await CacheProjector(NO_KAFKA, redis_client, database).apply({pid: version})
    reads = source(database, cache)
    statements.clear()

    header = await reads.playlist(pid)
    page = await reads.entries_page(header, size=3, **PAGE) if header else None

    assert header is not None
    assert header.version == version
    assert page is not None
    assert [e.media_id for e in page.items] == ["m1", "m2", "m3"]
    assert page.has_next
    assert page.version == version
    assert statements == []
    assert reads.record.versions == {pid: version}

    reads.forget(pid)  # the request committed a change: the snapshot predates it
    assert await reads.playlist(pid) == header
    assert statements != []


async def test_a_miss_reads_sql_once_then_the_memo(
    database: Database, cache: SnapshotCache, statements: list[str]
) -> None:
    pid, version = await playlist(database, Visibility.PRIVATE)  # never snapshotted
    reads = source(database, cache)
    statements.clear()

    header = await reads.playlist(pid, first_page=3)
    assert header is not None
    assert header.version == version
    after_first, redis_calls = len(statements), cache.redis_calls
    assert after_first > 0  # the snapshot missed: SQL answered
    assert redis_calls > 0  # ... after the snapshot was asked

    again = await reads.playlist(pid, version)  # a later field asks it with minVersion
    page = await reads.entries_page(header, size=3, **PAGE)

    assert again is header
    assert [e.media_id for e in page.items] == ["m1", "m2", "m3"]
    assert len(statements) == after_first  # header and page from the memo
    assert cache.redis_calls == redis_calls  # read in SQL: not asked of Redis again

    later = await reads.entries_page(header, size=3, from_end=True, after=None, before=None)
    assert [e.media_id for e in later.items] == ["m3", "m4", "m5"]
    assert len(statements) > after_first  # any other page is SQL


async def test_without_snapshots_every_read_is_sql(
    database: Database, redis_client: redis.Redis, statements: list[str]
) -> None:
    pid, version = await playlist(database, Visibility.PUBLIC)
    await CacheProjector(NO_KAFKA, redis_client, database).apply({pid: version})
    reads = source(database, None)  # a snapshot is there, but the feature is off
    statements.clear()

    header = await reads.playlist(pid)
    assert header is not None
    assert header.version == version
    headers_read = len(statements)
    assert headers_read > 0
    page = await reads.entries_page(header, size=3, **PAGE)

    assert [e.media_id for e in page.items] == ["m1", "m2", "m3"]
    assert len(statements) > headers_read  # the first page too: no snapshot served it
