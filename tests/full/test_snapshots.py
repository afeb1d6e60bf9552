"""Redis snapshots and the read path (DESIGN §8) on real Redis and PostgreSQL.

Snapshots are built with :meth:`CacheProjector.apply` (the projector's step
without Kafka; ``test_projector.py`` runs it on Kafka). Checked: writes are
idempotent by version; a read serves a snapshot only at the head version and
``>= minVersion``; GraphQL answers are identical from a snapshot and from SQL,
and a hit reads no SQL at all; concurrent reads share one Redis call; with
Redis stopped reads answer from SQL behind an open breaker that makes no
Redis call, and use snapshots again once Redis is back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
import redis.asyncio as redis
from prometheus_client import REGISTRY

from chorus.caches.reader import SnapshotCache
from chorus.caches.snapshot import Snapshot
from chorus.caches.snapshot_writer import SnapshotStore
from chorus.catalog.protocol import Media, MediaPage
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist, RemoveEntries
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Visibility
from chorus.events.kafka import KafkaConfig
from chorus.events.projector import CacheProjector
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resilience.breaker import BreakerState, CircuitBreaker
from chorus.resolvers.context import RequestContext, Services
from tests.deadlines import patience
from tests.servers import RedisServer
from tests.sql_log import read_statements

schema = build_schema()
NO_KAFKA = KafkaConfig(bootstrap_servers="127.0.0.1:9")  # apply() never connects

CONNECTION = """totalCount version
  pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  edges { cursor node { id positionKey mediaId addedBy { id } addedAt media { title } } }"""
HEADER = """id title description visibility collaborative owner { id } version entryCount
  createdAt updatedAt"""
FULL = f"""query($id: ID!) {{ playlist(id: $id) {{ {HEADER} viewerRole
  entries {{ {CONNECTION} }}
  small: entries(first: 3) {{ {CONNECTION} }}
  none: entries(first: 0) {{ {CONNECTION} }}
  big: entries(first: 100) {{ {CONNECTION} }}
  tail: entries(last: 4) {{ {CONNECTION} }}
  members {{ totalCount edges {{ node {{ user {{ id }} role }} }} }} }} }}"""
FIRST_PAGE = f"""query($id: ID!, $min: Int) {{ playlist(id: $id, minVersion: $min) {{ {HEADER}
  entries {{ {CONNECTION} }} }} }}"""


class Catalog:
    """Knows every media id."""

    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        return {i: Media(i, f"Title {i}", ("Artist",), None, 1000) for i in media_ids}

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        return MediaPage((), 0, offset)

    async def aclose(self) -> None:
        return None


@pytest.fixture
def store(pg_database: Database) -> PlaylistStore:
    return PlaylistStore(pg_database)


@pytest.fixture
async def cache(redis_client: redis.Redis) -> AsyncIterator[SnapshotCache]:
    cache = SnapshotCache(redis_client, breaker=CircuitBreaker(), page_size=50)
    yield cache
    await cache.aclose()


async def public_playlist(store: PlaylistStore, entries: int) -> str:
    created = await store.create(
        CreatePlaylist("c", "Mix", "for everyone", Visibility.PUBLIC), "alice"
    )
    pid = created.outcome.playlist_id
    version = 0
    for start in range(0, entries, 100):
        media = tuple(f"m{i}" for i in range(start, min(start + 100, entries)))
        version = await store.execute(AddEntries(pid, f"a{start}", version, media), "alice")
        version = version.outcome.version
    return pid


async def current_version(db: Database, pid: str) -> int:
    from chorus.db import repository

    async with db.read() as conn:
        header = await repository.get_playlist(conn, pid)
    assert header is not None
    return header.version


async def project(db: Database, client: redis.Redis, pid: str) -> None:
    await CacheProjector(NO_KAFKA, client, db).apply({pid: await current_version(db, pid)})


async def execute(
    db: Database, snapshots: SnapshotCache | None, query: str, viewer: str, **variables: Any
) -> Any:
    services = Services(db, PlaylistStore(db), Catalog(), DEFAULT_LIMITS, snapshots=snapshots)
    result = await schema.execute(
        query, variable_values=variables, context_value=RequestContext(services, viewer)
    )
    assert result.errors is None, result.errors
    return result.data


def reads(result: str) -> float:
    return REGISTRY.get_sample_value("chorus_snapshot_reads_total", {"result": result}) or 0.0


@pytest.fixture
def sql_statements(pg_database: Database) -> Iterator[list[str]]:
    """Every SQL statement the database runs during the test."""
    with read_statements(pg_database) as seen:
        yield seen


async def test_writes_are_idempotent_by_version(
    pg_database: Database, store: PlaylistStore, redis_client: redis.Redis
) -> None:
    pid = await public_playlist(store, 3)
    from chorus.db import listing, repository

    async def snapshot_now() -> Snapshot:
        async with pg_database.read() as conn:
            header = (await listing.get_playlists(conn, [pid]))[pid]
            return Snapshot.read(header, await repository.entries_page(conn, pid, limit=51), 50)

    v1 = await snapshot_now()
    for i in range(2):
        await store.execute(RemoveEntries(pid, f"r{i}", 1 + i, (v1.entries[i].entry_id,)), "alice")
    v2 = await snapshot_now()
    assert (v1.version, v2.version) == (1, 3)
    writer = SnapshotStore(redis_client)
    ticket = await writer.ticket()

    assert await writer.put(v2, ticket)
    assert not await writer.put(v1, ticket), "an older snapshot never replaces a newer one"
    assert not await writer.put(v2, ticket), "a duplicate is a no-op"
    assert await writer.read(pid) == (3, v2)

    await writer.bump_head(pid, 1)
    assert (await writer.read(pid))[0] == 3, "the head never goes back"
    assert not await writer.remove(pid, 2, ticket), "a removal older than the snapshot keeps it"
    assert await writer.read(pid) == (3, v2)

    assert await writer.remove(pid, 4, ticket)
    assert await writer.read(pid) == (4, None)
    assert not await writer.put(v2, ticket), "a late write does not resurrect a removed snapshot"
    assert await writer.read(pid) == (4, None)
    assert await writer.versions([pid, "nope"]) == {}


async def test_a_read_serves_only_the_head_version_and_at_least_min_version(
    pg_database: Database, store: PlaylistStore, redis_client: redis.Redis, cache: SnapshotCache
) -> None:
    pid = await public_playlist(store, 5)
    assert await cache.get(pid) is None, "no snapshot yet"
    await project(pg_database, redis_client, pid)

    found = await cache.get(pid)
    assert found is not None
    assert found.version == 1
    assert [e.media_id for e in found.entries] == [f"m{i}" for i in range(5)]
    assert (await cache.get(pid, 1)) == found
    assert await cache.get(pid, 2) is None

    committed = await store.execute(
        RemoveEntries(pid, "r", 1, (found.entries[0].entry_id,)), "alice"
    )
    await cache.bump_head(pid, committed.outcome.version)
    assert await cache.get(pid) is None, "the snapshot is older than the last commit"

    await project(pg_database, redis_client, pid)
    found = await cache.get(pid, 2)
    assert found is not None
    assert found.version == 2


async def test_a_commit_of_this_process_misses_before_its_head_is_written(
    pg_database: Database, store: PlaylistStore, redis_client: redis.Redis
) -> None:
    pid = await public_playlist(store, 2)
    await project(pg_database, redis_client, pid)
    # A breaker that is open refuses the head bump, so only the local mark remains.
    breaker = CircuitBreaker(failures=1, reset_s=0.2)
    cache = SnapshotCache(redis_client, breaker=breaker)
    assert await cache.get(pid) is not None
    breaker.record_failure()
    await cache.bump_head(pid, 2)
    await asyncio.sleep(0.25)
    assert await cache.get(pid) is None
    assert breaker.state is BreakerState.CLOSED, "the read was the successful trial"
    await cache.bump_head(pid, 2)  # now written, with nothing pending
    assert (await SnapshotStore(redis_client).read(pid))[0] == 2

    # The store's on_commit hook: the head is raised in the background.
    cache.committed(pid, 3)
    assert await cache.get(pid) is None
    await cache.aclose()
    assert (await SnapshotStore(redis_client).read(pid))[0] == 3


async def test_graphql_answers_the_same_from_a_snapshot_and_from_sql(
    pg_database: Database,
    store: PlaylistStore,
    redis_client: redis.Redis,
    cache: SnapshotCache,
    sql_statements: list[str],
) -> None:
    pid = await public_playlist(store, 120)
    await project(pg_database, redis_client, pid)
    gid = ids.to_global_id("Playlist", pid)

    for viewer in ("alice", "bob"):  # the owner (viewerRole OWNER) and a stranger (null)
        from_sql = await execute(pg_database, None, FULL, viewer, id=gid)
        hits = reads("hit")
        from_snapshot = await execute(pg_database, cache, FULL, viewer, id=gid)
        assert reads("hit") == hits + 1
        assert from_snapshot == from_sql
    assert from_sql["playlist"]["viewerRole"] is None
    assert from_sql["playlist"]["entries"]["pageInfo"]["hasNextPage"] is True

    sql_statements.clear()
    first_page = await execute(pg_database, cache, FIRST_PAGE, "bob", id=gid, min=2)
    assert sql_statements == [], "header and first page come from the snapshot alone"
    assert first_page == await execute(pg_database, None, FIRST_PAGE, "bob", id=gid, min=2)
    edges = first_page["playlist"]["entries"]["edges"]
    assert [e["node"]["mediaId"] for e in edges] == [f"m{i}" for i in range(50)]
    assert first_page["playlist"]["entries"]["totalCount"] == 120


async def test_min_version_ahead_of_the_snapshot_reads_sql(
    pg_database: Database, store: PlaylistStore, redis_client: redis.Redis, cache: SnapshotCache
) -> None:
    pid = await public_playlist(store, 3)
    await project(pg_database, redis_client, pid)
    gid = ids.to_global_id("Playlist", pid)
    # A commit whose head bump was lost (another process, Redis hiccup).
    await store.execute(AddEntries(pid, "late", 1, ("late",)), "alice")
    hits, misses = reads("hit"), reads("miss")
    data = await execute(pg_database, cache, FIRST_PAGE, "bob", id=gid, min=2)
    assert data["playlist"]["version"] == 2
    assert data["playlist"]["entries"]["totalCount"] == 4
    assert (reads("hit"), reads("miss")) == (hits, misses + 1)
    # Without minVersion the snapshot is current by its head: served.
    data = await execute(pg_database, cache, FIRST_PAGE, "bob", id=gid)
    assert data["playlist"]["version"] == 1
    assert reads("hit") == hits + 1


async def test_a_mutation_payload_reads_its_playlist_from_sql(
    pg_database: Database, store: PlaylistStore, redis_client: redis.Redis, cache: SnapshotCache
) -> None:
    pid = await public_playlist(store, 2)
    await project(pg_database, redis_client, pid)
    gid = ids.to_global_id("Playlist", pid)
    before = await execute(pg_database, cache, FIRST_PAGE, "alice", id=gid)
    assert before["playlist"]["version"] == 1
    # Nothing raises the head here: the request itself knows its commit is newer.
    mutation = """mutation($id: ID!) { addEntries(input: {playlistId: $id, operationId: "m",
      baseVersion: 1, mediaIds: ["new"]}) { version playlist { version entryCount
      entries { totalCount version edges { node { mediaId } } } } } }"""
    data = await execute(pg_database, cache, mutation, "alice", id=gid)
    playlist = data["addEntries"]["playlist"]
    assert (data["addEntries"]["version"], playlist["version"], playlist["entryCount"]) == (2, 2, 3)
    assert playlist["entries"]["version"] == 2
    assert [e["node"]["mediaId"] for e in playlist["entries"]["edges"]] == ["m0", "m1", "new"]


async def test_concurrent_reads_of_one_playlist_share_one_redis_call(
    pg_database: Database, store: PlaylistStore, redis_client: redis.Redis, cache: SnapshotCache
) -> None:
    pid = await public_playlist(store, 3)
    await project(pg_database, redis_client, pid)
    before = cache.redis_calls
    found = await asyncio.gather(*(cache.get(pid) for _ in range(50)))
    assert cache.redis_calls == before + 1
    assert all(s is found[0] and s is not None for s in found)

    gid = ids.to_global_id("Playlist", pid)
    before = cache.redis_calls
    answers = await asyncio.gather(
        *(execute(pg_database, cache, FIRST_PAGE, f"user{i}", id=gid) for i in range(20))
    )
    assert cache.redis_calls == before + 1, "20 concurrent requests, one Redis round trip"
    assert all(a == answers[0] for a in answers)


async def test_with_redis_down_reads_use_sql_behind_an_open_breaker_then_snapshots_again(
    pg_database: Database, store: PlaylistStore, private_redis: RedisServer
) -> None:
    client = redis.Redis.from_url(private_redis.url, socket_connect_timeout=0.5)
    breaker = CircuitBreaker(failures=3, reset_s=3.0)  # longer than the 10 reads below
    cache = SnapshotCache(client, breaker=breaker, timeout_s=0.5)
    try:
        pid = await public_playlist(store, 60)
        gid = ids.to_global_id("Playlist", pid)
        await project(pg_database, client, pid)
        hits = reads("hit")
        assert await execute(pg_database, cache, FULL, "bob", id=gid) == await execute(
            pg_database, None, FULL, "bob", id=gid
        )
        assert reads("hit") == hits + 1

        private_redis.stop()
        from_sql = await execute(pg_database, None, FULL, "bob", id=gid)
        for _ in range(3):  # each read tries Redis, fails, and answers from SQL
            assert await execute(pg_database, cache, FULL, "bob", id=gid) == from_sql
        assert breaker.state is BreakerState.OPEN
        assert REGISTRY.get_sample_value("chorus_redis_breaker_open") == 1
        calls, bypassed = cache.redis_calls, reads("bypass")
        for _ in range(10):
            assert await execute(pg_database, cache, FULL, "bob", id=gid) == from_sql
        assert cache.redis_calls == calls, "no Redis call while the breaker is open"
        assert reads("bypass") == bypassed + 10

        # Mutations commit meanwhile; the head bump is best effort and never raises.
        committed = await store.execute(AddEntries(pid, "down", 1, ("m-down",)), "alice")
        await cache.bump_head(pid, committed.outcome.version)

        private_redis.start()  # empty: it kept nothing
        await project(pg_database, client, pid)
        from_sql = await execute(pg_database, None, FULL, "bob", id=gid)
        assert from_sql["playlist"]["version"] == 2
        deadline = time.monotonic() + patience(10)
        while True:
            hits = reads("hit")
            assert await execute(pg_database, cache, FULL, "bob", id=gid) == from_sql
            if reads("hit") == hits + 1:
                break
            assert time.monotonic() < deadline, "reads never used the snapshot again"
            await asyncio.sleep(0.1)
        assert breaker.state is BreakerState.CLOSED
        assert REGISTRY.get_sample_value("chorus_redis_breaker_open") == 0
    finally:
        await cache.aclose()
        await client.aclose()


async def test_a_head_raise_refused_by_redis_is_retried_without_another_commit(
    pg_database: Database, store: PlaylistStore, private_redis: RedisServer
) -> None:
    """Otherwise another process would keep serving the old snapshot (say, of a
    playlist just made PRIVATE) until this one happened to commit again."""
    import os
    import signal

    client = redis.Redis.from_url(private_redis.url, socket_timeout=0.5)
    try:
        pid = await public_playlist(store, 2)
        await project(pg_database, client, pid)
        committing = SnapshotCache(client, breaker=CircuitBreaker(failures=1, reset_s=0.2))
        other = SnapshotCache(client, breaker=CircuitBreaker(failures=1, reset_s=0.2))
        assert await other.get(pid) is not None

        assert private_redis.process is not None
        os.kill(private_redis.process.pid, signal.SIGSTOP)  # Redis hangs: the raise fails
        try:
            committing.committed(pid, 3)
            await asyncio.sleep(1.0)
            assert committing.pending_heads == 1
        finally:
            os.kill(private_redis.process.pid, signal.SIGCONT)

        deadline = time.monotonic() + patience(10)
        while committing.pending_heads:
            assert time.monotonic() < deadline, "the refused head raise was never sent"
            await asyncio.sleep(0.05)
        assert await other.get(pid) is None  # the other process no longer serves version 2
        await committing.aclose()
    finally:
        await client.aclose()
