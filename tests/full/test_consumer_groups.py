"""Several members per consumer group on a 12-partition topic; one killed mid-stream.

Real processes on the session's Tansu broker: one ``chorus serve``, one
``chorus relay``, three ``chorus fanout``, two ``chorus project-cache`` and two
``chorus feed``, every group splitting the topic's 12 partitions. Writers
commit versions of playlists spread over every partition straight to
PostgreSQL (the relay hears them by ``NOTIFY``); a graphql-transport-ws
subscriber follows one playlist per partition. While the writes stream, a
member is killed (SIGKILL: it neither commits nor leaves its group); once the
broker has evicted it, the survivors share all 12 partitions (their
``chorus_consumer_partitions`` gauges) and the end state is checked:

* the subscriber saw every version of each playlist once, in order;
* fanout published each version to Redis at most once, in increasing order,
  and its dedupe key of every playlist reached the newest version (no
  partition left behind: the subscriber alone would not show it, its stream
  reads SQL on its own when it hears nothing for 15 s);
* the projector's snapshots and heads ended at the newest version;
* the feed holds one row per follower and version, none missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from sqlalchemy import select
from websockets.asyncio.client import ClientConnection

from chorus.auth import mint_token
from chorus.caches.snapshot_writer import SnapshotStore
from chorus.db.engine import Database
from chorus.db.follows import FollowStore
from chorus.db.store import PlaylistStore
from chorus.db.tables import feed_item
from chorus.domain.follows import FeedLimits, Target, TargetKind
from chorus.events.wire import events_channel, fanout_version_key
from chorus.graphql.schema.common.ids import to_global_id
from chorus.resilience.tasks import cancel_and_wait
from tests.deadlines import patience
from tests.e2e.test_subscriptions import SUBSCRIPTION, close_socket, open_socket
from tests.full.conftest import REDIS_URL
from tests.full.helpers import Deployment, add, create_playlist, eventually, full_deployment
from tests.full.test_fanout import Listener, listening, partition_of
from tests.servers import TEST_SECRET, ChorusServer, TansuServer

PARTITIONS = 12
MEMBERS = {"fanout": 3, "project-cache": 2, "feed": 2}
FOLLOWERS = ("bob", "carol")
REBALANCE_S = 40.0
"""The broker evicts a killed member after its session timeout (10 s), then the group rejoins."""


@pytest.fixture(scope="module")
def groups(
    postgres_template: str, tansu: TansuServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    workers = ["relay", *(name for name, count in MEMBERS.items() for _ in range(count))]
    env = {"CHORUS_KAFKA_TOPIC_PARTITIONS": str(PARTITIONS)}
    data_dir = tmp_path_factory.mktemp("groups")
    with full_deployment(tansu, data_dir, (None,), workers, env) as running:
        yield running


def members(deployment: Deployment, name: str) -> list[ChorusServer]:
    """The running processes of one worker kind."""
    return [w for w in deployment.workers if w.command[0] == name and w.process is not None]


def group_of(member: ChorusServer) -> str:
    setting = {
        "fanout": "CHORUS_KAFKA_FANOUT_GROUP",
        "project-cache": "CHORUS_KAFKA_PROJECTOR_GROUP",
        "feed": "CHORUS_KAFKA_FEED_GROUP",
    }[member.command[0]]
    return member.env[setting]


async def partitions_of(member: ChorusServer) -> int:
    """The member's ``chorus_consumer_partitions`` gauge for its group."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{member.base_url}/metrics", timeout=5)).text
    wanted = f'chorus_consumer_partitions{{group="{group_of(member)}"}} '
    for line in text.splitlines():
        if line.startswith(wanted):
            return int(float(line.split()[1]))
    return 0


async def shared(processes: Sequence[ChorusServer]) -> bool:
    """Whether these members, and no one else, consume all partitions, each some."""
    counts = [await partitions_of(p) for p in processes]
    return sum(counts) == PARTITIONS and all(counts)


async def spread_playlists(store: PlaylistStore) -> tuple[list[str], list[str]]:
    """PUBLIC playlists until each partition has two; and one playlist per partition."""
    by_partition: dict[int, list[str]] = defaultdict(list)
    while min((len(by_partition[p]) for p in range(PARTITIONS)), default=0) < 2:
        playlist_id = await create_playlist(store)
        by_partition[partition_of(playlist_id, PARTITIONS)].append(playlist_id)
    everyone = [pid for pids in by_partition.values() for pid in pids]
    return everyone, [by_partition[p][0] for p in range(PARTITIONS)]


@dataclass
class Writer:
    """Adds one entry to each playlist per round, until cancelled."""

    store: PlaylistStore
    playlists: Sequence[str]
    rounds: int = 0
    latest: dict[str, int] = field(default_factory=dict)

    async def run(self) -> None:
        while True:
            for playlist_id in self.playlists:
                self.latest[playlist_id] = await add(self.store, playlist_id)
            self.rounds += 1
            await asyncio.sleep(0.05)

    async def until(self, rounds: int) -> None:
        deadline = time.monotonic() + patience(30)
        while self.rounds < rounds:
            assert time.monotonic() < deadline, f"{self.rounds} of {rounds} rounds written"
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def writing(store: PlaylistStore, playlists: Sequence[str]) -> AsyncIterator[Writer]:
    writer = Writer(store, playlists)
    task = asyncio.create_task(writer.run())
    try:
        yield writer
    finally:
        await cancel_and_wait(task)


@dataclass
class Subscriber:
    """One socket following ``playlists`` from version 0; what each stream delivered."""

    ws: ClientConnection
    playlists: Sequence[str]
    versions: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    other: list[Any] = field(default_factory=list)

    async def subscribe(self) -> None:
        for playlist_id in self.playlists:
            variables = {"playlistId": to_global_id("Playlist", playlist_id), "sinceVersion": 0}
            payload = {"query": SUBSCRIPTION, "variables": variables}
            message = {"id": playlist_id, "type": "subscribe", "payload": payload}
            await self.ws.send(json.dumps(message))

    async def read(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            if message["type"] == "ping":
                continue
            payload = message.get("payload")
            data = payload.get("data") if isinstance(payload, dict) else None
            item = (data or {}).get("playlistEvents") or {}
            if message["type"] == "next" and item.get("__typename") == "PlaylistChanged":
                assert item["playlistId"] == to_global_id("Playlist", message["id"])
                self.versions[message["id"]].append(item["version"])
            else:
                self.other.append(message)  # an error or a resync: the test fails on it

    async def wait_for(self, latest: dict[str, int]) -> None:
        """Until each stream delivered as many versions as were written (or something else)."""

        async def delivered() -> bool:
            assert not self.other, self.other
            return all(len(self.versions[p]) >= latest[p] for p in self.playlists)

        await eventually(delivered, timeout_s=60, what="every version at the subscriber")


@contextlib.asynccontextmanager
async def subscribed(server: ChorusServer, playlists: Sequence[str]) -> AsyncIterator[Subscriber]:
    ws = await open_socket(server, mint_token(TEST_SECRET, "alice"))
    subscriber = Subscriber(ws, playlists)
    reading = asyncio.create_task(subscriber.read())
    try:
        await subscriber.subscribe()
        yield subscriber
    finally:
        await cancel_and_wait(reading)
        await close_socket(ws)


@contextlib.asynccontextmanager
async def redis_listening() -> AsyncIterator[Listener]:
    """Every event fanout publishes, read as it comes (so Redis never buffers it)."""
    with listening(REDIS_URL, pattern=events_channel("*")) as listener:
        stop = asyncio.Event()
        reading = asyncio.create_task(listener.receive_until(stop.is_set, "the end", 3_600))
        try:
            yield listener
        finally:
            stop.set()
            await reading
        await listener.drain()


@pytest.fixture
async def db(groups: Deployment) -> AsyncIterator[Database]:
    opened = Database(groups.servers[0].database_url)
    yield opened
    await opened.dispose()


@pytest.fixture
async def redis_client() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


async def settled(groups: Deployment, kind: str) -> None:
    """Until the running members of ``kind`` share all partitions, each some."""
    await eventually(
        lambda: shared(members(groups, kind)),
        timeout_s=REBALANCE_S,
        what=f"the {kind} members sharing the partitions",
    )


async def kill_one_mid_stream(
    groups: Deployment, store: PlaylistStore, playlists: Sequence[str], kinds: Sequence[str]
) -> dict[str, int]:
    """Write while one member of each kind is killed; the versions written at the end."""
    for kind in kinds:
        await settled(groups, kind)
    async with writing(store, playlists) as writer:
        await writer.until(3)
        for kind in kinds:
            members(groups, kind)[0].kill()
        for kind in kinds:
            await settled(groups, kind)  # the survivors: the killed one has no /metrics
        await writer.until(writer.rounds + 3)
    return dict(writer.latest)


async def test_a_fanout_member_killed_mid_stream_hands_over_without_loss_or_repeat(
    groups: Deployment, db: Database, redis_client: aioredis.Redis
) -> None:
    store = PlaylistStore(db)
    playlists, watched = await spread_playlists(store)
    server = groups.servers[0]
    async with redis_listening() as published, subscribed(server, watched) as sub:
        latest = await kill_one_mid_stream(groups, store, playlists, ["fanout"])
        await sub.wait_for(latest)

        async def all_published() -> bool:
            keys = [fanout_version_key(p) for p in playlists]
            found = [int(v or -1) for v in await redis_client.mget(keys)]
            return found == [latest[p] for p in playlists]

        await eventually(all_published, what="fanout's newest version of every playlist")
    assert sub.other == []
    for playlist_id in watched:
        assert sub.versions[playlist_id] == list(range(1, latest[playlist_id] + 1)), playlist_id
    for playlist_id in playlists:
        on_redis = published.versions(playlist_id)
        assert on_redis == sorted(set(on_redis)), playlist_id  # at most once, in order
    # The killed member started again takes partitions back from the others.
    victim = next(w for w in groups.workers if w.command[0] == "fanout" and w.process is None)
    victim.start()
    await settled(groups, "fanout")
    assert len(members(groups, "fanout")) == MEMBERS["fanout"]


async def test_projector_and_feed_members_killed_mid_stream_lose_and_repeat_nothing(
    groups: Deployment, db: Database, redis_client: aioredis.Redis
) -> None:
    store = PlaylistStore(db)
    playlists, watched = await spread_playlists(store)
    follows = FollowStore(db, FeedLimits())
    for user in FOLLOWERS:
        for playlist_id in watched:
            await follows.follow(user, Target(TargetKind.PLAYLIST, playlist_id))
    async with subscribed(groups.servers[0], watched) as sub:
        latest = await kill_one_mid_stream(groups, store, playlists, ["project-cache", "feed"])
        await sub.wait_for(latest)
    assert sub.other == []
    for playlist_id in watched:
        assert sub.versions[playlist_id] == list(range(1, latest[playlist_id] + 1)), playlist_id

    snapshots = SnapshotStore(redis_client)

    async def projected() -> bool:
        return await snapshots.versions(playlists) == latest

    await eventually(projected, timeout_s=30, what="snapshots at the newest versions")
    _, heads = await snapshots.heads(playlists)
    assert heads == latest

    expected = sorted(
        (user, p, v) for user in FOLLOWERS for p in watched for v in range(1, latest[p] + 1)
    )

    async def feed_rows() -> list[tuple[str, str, int]]:
        columns = (feed_item.c.follower_id, feed_item.c.playlist_id, feed_item.c.version)
        async with db.read() as conn:
            return sorted(tuple(row) for row in await conn.execute(select(*columns)))

    async def fed() -> bool:
        return len(await feed_rows()) >= len(expected)

    await eventually(fed, timeout_s=30, what=f"{len(expected)} feed rows")
    assert await feed_rows() == expected
