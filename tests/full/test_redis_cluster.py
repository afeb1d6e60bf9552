"""The full profile on a 3-primary Redis Cluster (``CHORUS_REDIS_CLUSTER=true``).

Every event a subscriber receives went outbox → relay → Kafka → fanout →
``SPUBLISH`` on the primary owning the playlist's slot → the API process's
``SSUBSCRIBE`` there. Heads and snapshots spread over the primaries by their
hash tags; a slot moved during a stream is a gap, repaired from SQL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster

from chorus.auth import mint_token
from chorus.caches.keys import playlist_slot, slot_of
from chorus.domain.changes import PlaylistEvent
from chorus.graphql.schema.common.ids import from_global_id
from chorus.subscriptions.cluster_bus import ClusterBus
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track, version
from tests.e2e.test_subscriptions import close_socket, open_socket
from tests.full.helpers import (
    Deployment,
    event,
    eventually,
    full_deployment,
    subscribe_by_id,
    versions_by_playlist,
)
from tests.servers import TEST_SECRET, TansuServer

PLAYLISTS = 24
EDITS = 8


@pytest.fixture(scope="module")
def deployment(
    postgres_template: str,
    tansu: TansuServer,
    redis_cluster: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """One API server and the relay, fanout and cache projector, on the session's cluster."""
    data_dir = tmp_path_factory.mktemp("redis-cluster-deployment")
    workers = ("relay", "fanout", "project-cache")
    with full_deployment(tansu, data_dir, (None,), workers, redis_cluster) as running:
        yield running


@pytest.fixture
async def primaries(redis_cluster: dict[str, str]) -> AsyncIterator[dict[str, redis.Redis]]:
    """A plain client of each primary, by ``host:port``."""
    cluster = RedisCluster.from_url(redis_cluster["CHORUS_REDIS_URL"])
    await cluster.initialize()
    nodes = {n.name: redis.Redis(host=n.host, port=int(n.port)) for n in cluster.get_primaries()}
    await cluster.aclose()
    assert len(nodes) == 3
    yield nodes
    for node in nodes.values():
        await node.aclose()


def _raw_id(global_id: str) -> str:
    return from_global_id(global_id)[1][0]


async def _keys(node: redis.Redis, pattern: str) -> list[bytes]:
    return [key async for key in node.scan_iter(match=pattern, count=1000)]


def _tags(names: list[bytes]) -> set[str]:
    """The hash tags (raw playlist ids) of Redis names."""
    return {name.decode().partition("{")[2].partition("}")[0] for name in names}


async def test_writes_reach_subscribers_and_spread_over_every_primary(
    deployment: Deployment, primaries: dict[str, redis.Redis]
) -> None:
    api = Api(deployment.servers[0])
    token = mint_token(TEST_SECRET, "alice")
    sockets = [await open_socket(deployment.servers[0], token) for _ in range(2)]
    try:
        ids = [create_playlist(api, visibility="PUBLIC") for _ in range(PLAYLISTS)]
        for n, playlist_id in enumerate(ids):  # at most 20 operations per connection
            await subscribe_by_id(sockets[n % 2], playlist_id, 0)
        for n, playlist_id in enumerate(ids):
            add(api, playlist_id, [track(n + 1)], 0)
        seen = [await versions_by_playlist(ws, PLAYLISTS // 2) for ws in sockets]
        assert seen[0] | seen[1] == {p: [1] for p in ids}

        # Each playlist's head lives on the primary owning its slot, and
        # every primary holds some; so do the snapshots and the channels.
        raw = {_raw_id(p) for p in ids}
        heads: dict[str, set[str]] = {}

        async def placed() -> bool:
            for name, node in primaries.items():
                heads[name] = _tags(await _keys(node, "chorus:v2:playlist:*:head")) & raw
                if not _tags(await _keys(node, "chorus:v2:playlist:*:snapshot")) & raw:
                    return False
            return set().union(*heads.values()) == raw and all(heads.values())

        await eventually(placed, what="heads and snapshots on every primary")
        for name, node in primaries.items():
            channels = await node.execute_command("PUBSUB", "SHARDCHANNELS", "chorus:v2:playlist:*")
            assert _tags(channels) & raw == heads[name], name
    finally:
        for ws in sockets:
            await close_socket(ws)
        api.http.close()


async def _migrate(primaries: dict[str, redis.Redis], slot: int) -> str:
    """Move ``slot`` to another primary (SETSLOT IMPORTING/MIGRATING, MIGRATE,
    SETSLOT NODE on every primary); that primary's name."""
    ids = {
        n: (await node.execute_command("CLUSTER", "MYID")).decode() for n, node in primaries.items()
    }
    owners = [n for n, node in primaries.items() if await _owns(node, slot)]
    assert len(owners) == 1, owners
    source = owners[0]
    target = next(name for name in primaries if name != source)
    await primaries[target].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
    await primaries[source].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
    host, _, port = target.rpartition(":")
    while keys := await primaries[source].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
        await primaries[source].execute_command(
            "MIGRATE", host, int(port), "", 0, 5000, "KEYS", *keys
        )
    for node in primaries.values():
        await node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target])
    return target


async def _owns(node: redis.Redis, slot: int) -> bool:
    """Whether ``node`` serves ``slot`` (``CLUSTER SLOTS`` as it sees itself)."""
    me = (await node.execute_command("CLUSTER", "MYID")).decode()
    for first, last, primary, *_ in await node.execute_command("CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return bool(primary[2].decode() == me)
    return False


async def test_a_slot_migrated_during_a_stream_is_repaired_from_sql(
    deployment: Deployment, primaries: dict[str, redis.Redis]
) -> None:
    api = Api(deployment.servers[0])
    ws = await open_socket(deployment.servers[0], mint_token(TEST_SECRET, "alice"))
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        since = version(api, playlist_id)
        await subscribe_by_id(ws, playlist_id, since)
        base = since
        for n in range(EDITS):
            base = add(api, playlist_id, [track(n + 1)], base)["version"]
        assert await versions_by_playlist(ws, EDITS) == {
            playlist_id: list(range(since + 1, base + 1))
        }

        async def edit() -> int:
            last = base
            for n in range(EDITS):
                payload = await asyncio.to_thread(add, api, playlist_id, [track(n + 50)], last)
                last = payload["version"]
            return last

        editing = asyncio.create_task(edit())
        moved_to = await _migrate(primaries, playlist_slot(_raw_id(playlist_id)))
        last = await editing
        for n in range(EDITS):  # and after the move
            last = add(api, playlist_id, [track(n + 100)], last)["version"]
        got = await versions_by_playlist(ws, last - base)
        assert got == {playlist_id: list(range(base + 1, last + 1))}
        assert await primaries[moved_to].execute_command(
            "CLUSTER", "COUNTKEYSINSLOT", playlist_slot(_raw_id(playlist_id))
        )
    finally:
        await close_socket(ws)
        api.http.close()


async def test_the_bus_follows_a_moved_slot_to_its_new_primary(
    redis_cluster: dict[str, str], primaries: dict[str, redis.Redis]
) -> None:
    bus = ClusterBus(redis_cluster["CHORUS_REDIS_URL"])
    events: list[PlaylistEvent] = []
    notices: list[None] = []
    gaps: list[None] = []
    bus.on_gap(lambda: gaps.append(None))
    playlist_id, user_id = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        await bus.subscribe(playlist_id, events.append)
        await bus.watch_follows(user_id, lambda: notices.append(None))
        await bus.publish(event(playlist_id, 1))
        await bus.announce_follows(user_id)
        await eventually(_counts(events, notices, 1), what="the first event and notice")
        gaps.clear()
        await _migrate(primaries, playlist_slot(playlist_id))
        await _migrate(primaries, slot_of(user_id))

        async def moved() -> bool:
            return bus.moves == 2 and bool(gaps) and bus.connected

        await eventually(moved, what="both subscriptions moved, then a gap")
        await bus.publish(event(playlist_id, 2))
        await bus.announce_follows(user_id)
        await eventually(_counts(events, notices, 2), what="the event and notice after the move")
        assert [e["version"] for e in events] == [1, 2]
    finally:
        await bus.aclose()


def _counts(
    events: list[PlaylistEvent], notices: list[None], n: int
) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(events) == n and len(notices) == n

    return check
