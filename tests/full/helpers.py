"""Helpers of the full-profile tests: deployments of processes, writers that commit
versions, a topic reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from websockets.asyncio.client import ClientConnection

from chorus.db.store import PlaylistStore
from chorus.domain.changes import WIRE_VERSION, PlaylistEvent
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.model import Visibility
from chorus.events.kafka import KafkaConfig
from chorus.events.wire import decode_event
from tests.deadlines import patience
from tests.e2e.conftest import Api, serving
from tests.e2e.test_subscriptions import SUBSCRIPTION
from tests.full.conftest import REDIS_URL
from tests.servers import ChorusServer, TansuServer, create_database, drop_database, postgres_url

ALICE = "alice"


def new_op() -> str:
    return f"op-{uuid.uuid4().hex}"


def event(playlist_id: str, version: int) -> PlaylistEvent:
    """A well-formed event with no changes, as the relay would produce it."""
    return {
        "v": WIRE_VERSION,
        "type": "PlaylistChanged",
        "playlist_id": playlist_id,
        "version": version,
        "operation_id": f"op-{version}",
        "actor_id": ALICE,
        "committed_at": "2024-01-01T00:00:00+00:00",
        "changes": [],
    }


def full_profile_env(bootstrap_servers: str, redis_url: str) -> dict[str, str]:
    """``CHORUS_*`` settings of one full-profile deployment: its own topic and groups."""
    suffix = uuid.uuid4().hex[:8]
    return {
        "CHORUS_KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
        "CHORUS_KAFKA_TOPIC": f"chorus-e2e-{suffix}",
        "CHORUS_KAFKA_TOPIC_PARTITIONS": "4",
        "CHORUS_KAFKA_IDEMPOTENT_PRODUCER": "false",  # Tansu refuses InitProducerId
        "CHORUS_KAFKA_FANOUT_GROUP": f"fanout-{suffix}",
        "CHORUS_KAFKA_PROJECTOR_GROUP": f"projector-{suffix}",
        "CHORUS_KAFKA_FEED_GROUP": f"feed-{suffix}",
        "CHORUS_REDIS_URL": redis_url,
    }


@contextlib.contextmanager
def full_api(tansu: TansuServer, folder: Path) -> Iterator[Api]:
    """A client of a full-profile API server on a database of its own (the
    machine's Redis, ``tansu``'s Kafka), stopped and dropped afterwards."""
    name = create_database()
    env = full_profile_env(tansu.bootstrap_servers, REDIS_URL)
    try:
        with serving(postgres_url(name), folder, **env) as client:
            yield client
    finally:
        drop_database(name)


class Deployment:
    """The processes of one full-profile deployment over one database, topic and Redis.

    ``servers`` run ``chorus serve``, one per entry of ``roles`` (a
    ``CHORUS_SERVE_ROLE``, or ``None`` for a server of both roles); ``workers``
    run ``chorus <name>``, one per name. The first server migrates the database.
    ``env`` adds or overrides settings of every process.
    """

    def __init__(
        self,
        database_url: str,
        data_dir: Path,
        bootstrap_servers: str,
        roles: Sequence[str | None],
        workers: Sequence[str],
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = {**full_profile_env(bootstrap_servers, REDIS_URL), **(env or {})}
        self.servers = [
            ChorusServer(database_url, data_dir, **env, **({"CHORUS_SERVE_ROLE": r} if r else {}))
            for r in roles
        ]
        self.workers = [
            ChorusServer(database_url, data_dir, command=(name,), **env) for name in workers
        ]

    def start(self) -> None:
        for process in [*self.servers, *self.workers]:
            process.start()  # the first server first: it migrates the database

    def stop(self) -> None:
        for process in [*reversed(self.workers), *reversed(self.servers)]:
            process.stop()


@contextlib.contextmanager
def full_deployment(
    tansu: TansuServer,
    data_dir: Path,
    roles: Sequence[str | None],
    workers: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> Iterator[Deployment]:
    """A started :class:`Deployment` on a database of its own and ``tansu``'s Kafka,
    stopped and its database dropped afterwards (also when a process fails to start).

    Args:
        env: more ``CHORUS_*`` settings of every process, e.g. a Redis Cluster's.
    """
    name = create_database()
    running = Deployment(postgres_url(name), data_dir, tansu.bootstrap_servers, roles, workers, env)
    try:
        running.start()
        yield running
    finally:
        running.stop()
        drop_database(name)


async def create_playlist(
    store: PlaylistStore, visibility: Visibility = Visibility.PUBLIC, title: str = "Mix"
) -> str:
    created = await store.create(CreatePlaylist(new_op(), title, visibility=visibility), ALICE)
    return created.outcome.playlist_id


async def add(store: PlaylistStore, playlist_id: str, count: int = 1) -> int:
    """``count`` versions, each appending one media; the last version committed."""
    version = 0
    for _ in range(count):
        outcome = await store.execute(
            AddEntries(playlist_id, new_op(), 0, (f"m-{uuid.uuid4().hex[:8]}",)), ALICE
        )
        version = outcome.outcome.version
    return version


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout_s: float = 20.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it holds; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + patience(timeout_s)
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@contextlib.asynccontextmanager
async def topic_reader(config: KafkaConfig) -> AsyncIterator[AIOKafkaConsumer]:
    """A started consumer of every partition of ``config``'s topic from its start, in no group."""
    consumer = AIOKafkaConsumer(
        config.topic,
        bootstrap_servers=config.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def read_topic(
    config: KafkaConfig, expected: int, *, timeout_s: float = 20.0, at_most: bool = False
) -> dict[str, list[int]]:
    """Versions per playlist in topic order, once at least ``expected`` records were read.

    Reads every partition from the start with no group, so it sees duplicates
    too. With ``at_most``, whatever arrived within ``timeout_s`` (up to
    ``expected``) is enough.
    """
    seen: dict[str, list[int]] = defaultdict(list)
    count = 0
    async with topic_reader(config) as consumer:
        deadline = time.monotonic() + patience(timeout_s)
        while count < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    assert record.value is not None
                    assert record.key is not None
                    event = decode_event(record.value)
                    assert record.key.decode() == event["playlist_id"]
                    seen[event["playlist_id"]].append(event["version"])
                    count += 1
    assert at_most or count >= expected, f"read {count} of {expected} records"
    return dict(seen)


async def subscribe_by_id(ws: ClientConnection, playlist_id: str, since: int) -> None:
    """Subscribe ``ws`` to ``playlistEvents`` of ``playlist_id`` after ``since``; the
    operation id is the playlist id (so :func:`versions_by_playlist` can tell them apart)."""
    variables = {"playlistId": playlist_id, "sinceVersion": since}
    payload = {"query": SUBSCRIPTION, "variables": variables}
    await ws.send(json.dumps({"id": playlist_id, "type": "subscribe", "payload": payload}))


async def versions_by_playlist(
    ws: ClientConnection, count: int, timeout_s: float = patience(20.0)
) -> dict[str, list[int]]:
    """The versions of the next ``count`` events on ``ws`` by playlist, as they came."""
    seen: dict[str, list[int]] = {}
    for _ in range(count):
        while True:
            message = json.loads(await asyncio.wait_for(ws.recv(), timeout_s))
            if message["type"] != "ping":
                break
        assert message["type"] == "next", message
        event: dict[str, Any] = message["payload"]["data"]["playlistEvents"]
        assert event["__typename"] == "PlaylistChanged", event
        seen.setdefault(message["id"], []).append(event["version"])
    return seen
