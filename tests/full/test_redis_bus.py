"""The API processes' Redis pub/sub bus, on real Redis and PostgreSQL (issue 5).

Two rows of the failure table are proved here with the server really
failing: the pub/sub connection killed (``CLIENT KILL TYPE pubsub``) and
Redis down. The pieces are the real ones of ``chorus serve`` in the full
profile: :class:`PlaylistStore` commits, the :class:`OutboxRelay` publishes
to Redis, a :class:`RedisBus` of its own (another "process") feeds the
:class:`Hub`, and :func:`playlist_stream` is consumed directly. Streams use
a large ``idle_check_s``, so only live delivery, the skip-ahead read and the
bus's gap report can bring a version; never the idle poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as redis

from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.changes import PlaylistEvent
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.events.relay import OutboxRelay
from chorus.events.wire import events_channel
from chorus.resilience.tasks import cancel_and_wait
from chorus.subscriptions.bus import BusPublisher
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.redis_bus import RedisBus
from chorus.subscriptions.stream import Resync, StreamItem, playlist_stream
from tests.deadlines import patience
from tests.full.helpers import event
from tests.servers import RedisServer

ALICE = "alice"
TIMEOUT_S = patience(20.0)
QUIET_S = 0.4
"""How long nothing must arrive to count as nothing more arriving."""
NO_IDLE_CHECK_S = 600.0


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` until it holds; fail after :data:`TIMEOUT_S`."""
    deadline = asyncio.get_running_loop().time() + patience(TIMEOUT_S)
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def bus_at(url: str) -> AsyncIterator[RedisBus]:
    bus = RedisBus(url, reconnect_max_s=0.5)
    try:
        yield bus
    finally:
        await bus.aclose()


class GapCounter:
    def __init__(self, bus: RedisBus) -> None:
        self.calls = 0
        bus.on_gap(self)

    def __call__(self) -> None:
        self.calls += 1


# --- the bus on its own -----------------------------------------------------------------


async def test_an_event_published_by_one_process_reaches_the_subscribers_of_another(
    redis_url: str,
) -> None:
    pid, control = f"p-{uuid.uuid4().hex}", f"p-{uuid.uuid4().hex}"
    async with bus_at(redis_url) as publisher, bus_at(redis_url) as consumer:
        first: list[PlaylistEvent] = []
        second: list[PlaylistEvent] = []
        controls: list[PlaylistEvent] = []
        await consumer.subscribe(pid, first.append)
        await consumer.subscribe(pid, second.append)
        await consumer.subscribe(control, controls.append)
        await eventually(lambda: consumer.connected, "the bus connected")
        assert consumer.subscription_count == 2

        await publisher.publish(event(pid, 1))
        await eventually(lambda: len(first) == len(second) == 1, "both subscribers got it")
        assert first == second == [event(pid, 1)]

        await consumer.unsubscribe(pid, first.append)
        await publisher.publish(event(pid, 2))
        await eventually(lambda: len(second) == 2, "the remaining subscriber got it")
        assert [e["version"] for e in first] == [1]

        await consumer.unsubscribe(pid, second.append)
        assert consumer.subscription_count == 1
        await publisher.publish(event(pid, 3))
        # Redis keeps the order of one publisher's messages on one subscriber
        # connection: once the control arrives, version 3 would have too.
        await publisher.publish(event(control, 1))
        await eventually(lambda: len(controls) == 1, "the control event arrived")
        assert [e["version"] for e in second] == [1, 2]


async def test_an_undecodable_message_is_reported_as_a_gap_not_delivered(
    redis_url: str, redis_client: redis.Redis
) -> None:
    pid = f"p-{uuid.uuid4().hex}"
    async with bus_at(redis_url) as consumer:
        gaps = GapCounter(consumer)
        got: list[PlaylistEvent] = []
        await consumer.subscribe(pid, got.append)
        await eventually(lambda: gaps.calls == 1, "the connection reported its start")
        await redis_client.publish(events_channel(pid), b"not json")
        await redis_client.publish(events_channel(pid), b'{"v": 99, "playlist_id": "x"}')
        await eventually(lambda: gaps.calls == 3, "both messages were reported")
        await consumer.publish(event(pid, 1))
        await eventually(lambda: len(got) == 1, "a good event still arrives")
        assert got == [event(pid, 1)]


async def test_subscribe_while_redis_is_down_returns_and_delivers_once_it_is_up(
    private_redis: RedisServer,
) -> None:
    pid = f"p-{uuid.uuid4().hex}"
    await asyncio.to_thread(private_redis.stop)
    async with bus_at(private_redis.url) as consumer, bus_at(private_redis.url) as publisher:
        gaps = GapCounter(consumer)
        got: list[PlaylistEvent] = []
        # Nothing to wait for while Redis is away: a generous bound only
        # guards against blocking on connect timeouts and retries.
        await asyncio.wait_for(consumer.subscribe(pid, got.append), timeout=1.0)
        assert consumer.subscription_count == 1
        assert not consumer.connected
        with pytest.raises(redis.ConnectionError):
            await publisher.publish(event(pid, 1))

        await asyncio.to_thread(private_redis.start)
        await eventually(lambda: consumer.connected, "the bus connected")
        assert gaps.calls == 1  # subscribed first, then reported
        await publisher.publish(event(pid, 1))
        await eventually(lambda: len(got) == 1, "the event arrived")
        assert got == [event(pid, 1)]


def _freeze(server: RedisServer) -> None:
    """SIGSTOP: the socket stays open and nothing answers (a half-open connection)."""
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)


def _thaw(server: RedisServer) -> None:
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGCONT)


@pytest.mark.parametrize("way", ["killed", "frozen"])
async def test_a_dead_connection_is_noticed_and_reestablished(
    private_redis: RedisServer, way: str
) -> None:
    pid = f"p-{uuid.uuid4().hex}"
    consumer = RedisBus(private_redis.url, reconnect_max_s=0.2, health_check_s=0.2, timeout_s=0.5)
    try:
        gaps = GapCounter(consumer)
        got: list[PlaylistEvent] = []
        await consumer.subscribe(pid, got.append)
        await eventually(lambda: consumer.connected, "the bus connected")
        if way == "killed":
            await asyncio.to_thread(private_redis.kill)
            await eventually(lambda: not consumer.connected, "the bus noticed the kill")
            await asyncio.to_thread(private_redis.start)
        else:
            _freeze(private_redis)
            try:
                await eventually(lambda: not consumer.connected, "the health check failed")
            finally:
                _thaw(private_redis)
        await eventually(lambda: consumer.reconnects == 1, "the bus reconnected")
        assert gaps.calls == 2
        async with bus_at(private_redis.url) as publisher:
            await publisher.publish(event(pid, 1))
            await eventually(lambda: len(got) == 1, "the event arrived")
    finally:
        await consumer.aclose()


# --- the failure table: the whole path from commit to stream ----------------------------


class Rig:
    """Store and relay publishing to Redis; a second bus feeding a hub, like two processes."""

    def __init__(self, db: Database, url: str) -> None:
        self.db = db
        self.publisher_bus = RedisBus(url, reconnect_max_s=0.5)
        self.bus = RedisBus(url, reconnect_max_s=0.5)
        self.gaps = GapCounter(self.bus)
        self.hub = Hub(self.bus)
        self.relay = OutboxRelay(
            db, BusPublisher(self.publisher_bus), poll_interval_s=0.05, retry_max_s=0.2
        )
        self.store = PlaylistStore(db, on_commit=self.relay.notify)
        self.relay_task: asyncio.Task[None] | None = None
        self._ops = 0

    def start_relay(self) -> None:
        self.relay_task = asyncio.create_task(self.relay.run())

    async def stop_relay(self) -> None:
        if self.relay_task is not None:
            await cancel_and_wait(self.relay_task)
            self.relay_task = None

    def op(self) -> str:
        self._ops += 1
        return f"op-{self._ops}"

    async def create(self) -> str:
        created = await self.store.create(CreatePlaylist(self.op(), "Mix"), ALICE)
        return created.outcome.playlist_id

    async def add(self, playlist_id: str, count: int, pause_s: float = 0.0) -> int:
        """``count`` versions adding one media each; the last version committed."""
        version = -1
        for _ in range(count):
            committed = await self.store.execute(
                AddEntries(playlist_id, self.op(), 0, (f"m{self._ops}",)), ALICE
            )
            version = committed.outcome.version
            await asyncio.sleep(pause_s)
        return version

    async def aclose(self) -> None:
        await self.stop_relay()
        await self.bus.aclose()
        await self.publisher_bus.aclose()


@contextlib.asynccontextmanager
async def rig(db: Database, url: str) -> AsyncIterator[Rig]:
    parts = Rig(db, url)
    parts.start_relay()
    try:
        yield parts
    finally:
        await parts.aclose()


class Subscriber:
    """Consumes a stream in a task; everything it yields is kept in order."""

    def __init__(self, stream: AsyncIterator[StreamItem]) -> None:
        self.items: list[StreamItem] = []
        self.task = asyncio.create_task(self._consume(stream))

    async def _consume(self, stream: AsyncIterator[StreamItem]) -> None:
        async for item in stream:
            self.items.append(item)

    def versions(self) -> list[Any]:
        return [
            ("resync", i.current_version) if isinstance(i, Resync) else i.version
            for i in self.items
        ]

    async def wait_for(self, count: int) -> None:
        def enough() -> bool:
            if self.task.done():
                self.task.result()  # raises what ended the stream
                raise AssertionError(f"the stream ended after {self.versions()}")
            return len(self.items) >= count

        await eventually(enough, f"{count} items arrived (got {self.versions()})")

    async def quiet(self) -> None:
        count = len(self.items)
        await asyncio.sleep(QUIET_S)
        assert self.versions()[count:] == []

    async def close(self) -> None:
        await cancel_and_wait(self.task)


async def test_a_killed_pubsub_connection_reconnects_and_no_version_is_missed(
    pg_database: Database, private_redis: RedisServer
) -> None:
    total = 120
    async with (
        rig(pg_database, private_redis.url) as parts,
        redis.Redis.from_url(private_redis.url) as admin,
    ):
        pid = await parts.create()
        sub = Subscriber(
            playlist_stream(pg_database, parts.hub, ALICE, pid, 0, idle_check_s=NO_IDLE_CHECK_S)
        )
        await eventually(lambda: parts.bus.subscription_count == 1, "the stream subscribed")
        await eventually(lambda: parts.bus.connected, "the bus connected")
        gaps_before = parts.gaps.calls

        writer = asyncio.create_task(parts.add(pid, total, pause_s=0.005))
        await sub.wait_for(20)
        killed = await admin.client_kill_filter(_type="pubsub")  # CLIENT KILL TYPE pubsub
        assert killed == 1  # the consumer's one connection; the publisher does not subscribe
        await eventually(lambda: parts.bus.reconnects == 1, "the bus reconnected")
        assert await writer == total

        await sub.wait_for(total)
        assert sub.versions() == list(range(1, total + 1))
        await sub.quiet()
        assert parts.gaps.calls > gaps_before  # reported after re-subscribing
        assert parts.bus.connected
        await sub.close()
        assert parts.bus.subscription_count == 0


async def test_redis_down_mutations_commit_and_streams_repair_from_sql_when_it_returns(
    pg_database: Database, private_redis: RedisServer
) -> None:
    async with rig(pg_database, private_redis.url) as parts:
        pid = await parts.create()
        sub = Subscriber(
            playlist_stream(pg_database, parts.hub, ALICE, pid, 0, idle_check_s=NO_IDLE_CHECK_S)
        )
        await eventually(lambda: parts.bus.connected, "the bus connected")
        await parts.add(pid, 10, pause_s=0.005)
        await sub.wait_for(10)
        assert sub.versions() == list(range(1, 11))

        await asyncio.to_thread(private_redis.stop)
        await eventually(lambda: not parts.bus.connected, "the bus noticed Redis is gone")
        # Mutations commit while Redis is away; the relay fails and retries.
        assert await parts.add(pid, 15, pause_s=0.005) == 25
        # Nothing committed while Redis was away reaches Redis afterwards: the
        # stream can get versions 11..25 only through the bus's gap report.
        await parts.stop_relay()
        await sub.quiet()
        assert sub.versions() == list(range(1, 11))

        await asyncio.to_thread(private_redis.start)
        await eventually(lambda: parts.bus.reconnects == 1, "the bus reconnected")
        await sub.wait_for(25)
        assert sub.versions() == list(range(1, 26))

        # The relay drains the backlog late (duplicates, dropped); new versions arrive live.
        parts.start_relay()
        assert await parts.add(pid, 5, pause_s=0.005) == 30
        await sub.wait_for(30)
        assert sub.versions() == list(range(1, 31))
        await sub.quiet()
        await sub.close()
