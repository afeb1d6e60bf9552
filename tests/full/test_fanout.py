"""Fanout on real servers: Tansu (Kafka) in, Redis pub/sub out, nothing mocked.

Each test listens on Redis like an API process would, and checks what
subscribers see: every version of a playlist once, in increasing order.
A listener is sure it has read everything published so far once its own
marker, published after, came through (Redis keeps one channel's messages
in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import replace

import redis
import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from prometheus_client import REGISTRY

from chorus.events.fanout import Fanout
from chorus.events.kafka import KafkaConfig, ensure_topic
from chorus.events.wire import (
    channel_playlist,
    encode_event,
    events_channel,
    fanout_version_key,
)
from chorus.resilience.tasks import cancel_and_wait
from tests.deadlines import patience
from tests.full.helpers import event
from tests.servers import RedisServer, TansuServer

MARKER = b"test-marker"


def partition_of(playlist_id: str, partitions: int) -> int:
    """The partition the producer's default partitioner picks for a playlist."""
    return int(DefaultPartitioner()(playlist_id.encode(), list(range(partitions)), []))


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def fanout(config: KafkaConfig, client: aioredis.Redis, group_id: str, name: str = "a") -> Fanout:
    return Fanout(config, client, group_id=group_id, client_id=f"fanout-{name}", dedupe_ttl_s=600)


async def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(*fanouts: Fanout) -> AsyncIterator[None]:
    """Run the fanouts as tasks; cancel them at the end (and raise what they raised)."""
    tasks = [asyncio.create_task(f.run()) for f in fanouts]
    try:
        yield
    finally:
        await asyncio.gather(*(cancel_and_wait(task) for task in tasks))


class Producer:
    """What the relay does: records keyed by playlist id, ``acks=all``."""

    def __init__(self, config: KafkaConfig) -> None:
        self.topic = config.topic
        self.kafka = AIOKafkaProducer(
            bootstrap_servers=config.bootstrap_servers,
            acks="all",
            enable_idempotence=False,  # Tansu refuses InitProducerId
            request_timeout_ms=5_000,
        )

    async def send(self, playlist_id: str, value: bytes) -> None:
        await self.kafka.send_and_wait(self.topic, key=playlist_id.encode(), value=value)

    async def send_events(self, playlist_id: str, versions: Iterable[int]) -> None:
        for version in versions:
            await self.send(playlist_id, encode_event(event(playlist_id, version)))

    async def send_round(self, playlist_ids: Iterable[str], version: int) -> None:
        """One version of each playlist, sent together."""
        sent = [
            await self.kafka.send(
                self.topic, key=pid.encode(), value=encode_event(event(pid, version))
            )
            for pid in playlist_ids
        ]
        await asyncio.gather(*sent)


@contextlib.asynccontextmanager
async def producing(config: KafkaConfig) -> AsyncIterator[Producer]:
    producer = Producer(config)
    await producer.kafka.start()
    try:
        yield producer
    finally:
        await producer.kafka.stop()


class Listener:
    """A Redis pub/sub subscriber recording ``(playlist_id, version)`` as they arrive.

    It uses the synchronous client, so subscribing blocks the event loop
    and no fanout task runs in between; the Redis test relies on that.
    """

    def __init__(self, url: str, *, channel: str | None = None, pattern: str | None = None):
        self.client = redis.Redis.from_url(url)
        self.pubsub = self.client.pubsub()
        if pattern is not None:
            self.pubsub.psubscribe(pattern)
            self.marker_channel = pattern.replace("*", new_id("marker"))
        else:
            assert channel is not None
            self.pubsub.subscribe(channel)
            self.marker_channel = channel
        self.received: list[tuple[str, int]] = []
        self._marker_seen = False
        deadline = time.monotonic() + patience(5)
        while True:  # the subscription is active once Redis confirmed it
            message = self.pubsub.get_message(timeout=0.1)
            if message is not None and message["type"] in ("subscribe", "psubscribe"):
                break
            assert time.monotonic() < deadline, "Redis did not confirm the subscription"

    def versions(self, playlist_id: str) -> list[int]:
        return [v for pid, v in self.received if pid == playlist_id]

    def _read(self) -> None:
        message = self.pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        while message is not None:
            if message["data"] == MARKER:
                self._marker_seen = True
            else:
                try:
                    payload = json.loads(message["data"])
                except ValueError:
                    payload = None  # not an event: another test's message on a shared Redis
                if isinstance(payload, dict):
                    assert channel_playlist(message["channel"]) == payload["playlist_id"]
                    self.received.append((payload["playlist_id"], payload["version"]))
            message = self.pubsub.get_message(ignore_subscribe_messages=True, timeout=0)

    async def receive_until(
        self, condition: Callable[[], bool], what: str, timeout_s: float = 20.0
    ) -> None:
        deadline = time.monotonic() + patience(timeout_s)
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; received {self.received}")
            await asyncio.to_thread(self._read)

    async def drain(self) -> None:
        """Read everything published until now (up to a marker published after it)."""
        self._marker_seen = False
        self.client.publish(self.marker_channel, MARKER)
        await self.receive_until(lambda: self._marker_seen, "the marker")

    def close(self) -> None:
        self.pubsub.close()
        self.client.close()


@contextlib.contextmanager
def listening(
    url: str, *, channel: str | None = None, pattern: str | None = None
) -> Iterator[Listener]:
    listener = Listener(url, channel=channel, pattern=pattern)
    try:
        yield listener
    finally:
        listener.close()


async def test_publishes_each_version_once_in_order(
    kafka_config: KafkaConfig, redis_client: aioredis.Redis, redis_url: str
) -> None:
    playlist = new_id("pl")
    worker = fanout(kafka_config, redis_client, new_id("fanout-test"))
    with listening(redis_url, channel=events_channel(playlist)) as listener:
        async with running(worker), producing(kafka_config) as producer:
            await producer.send_events(playlist, [0, 1, 1, 0, 2])
            await producer.send(playlist, b"\x00 not an event")
            await listener.receive_until(lambda: len(listener.received) >= 3, "3 versions")
            await wait_until(lambda: worker.consumer.skipped == 1, "the garbage record")
            await listener.drain()

    assert listener.versions(playlist) == [0, 1, 2]
    assert (worker.published, worker.duplicates, worker.consumer.skipped) == (3, 2, 1)
    assert await redis_client.get(fanout_version_key(playlist)) == b"2"


async def test_a_third_consumer_joining_mid_stream_loses_and_repeats_nothing(
    kafka_config: KafkaConfig, redis_client: aioredis.Redis, redis_url: str
) -> None:
    config = replace(kafka_config, partitions=6)
    await ensure_topic(config)
    group = new_id("fanout-test")
    first, second, third = (fanout(config, redis_client, group, name) for name in "abc")
    playlists = [new_id("pl") for _ in range(20)]
    rounds = 0
    deadline = time.monotonic() + patience(60)

    async def produce_while(producer: Producer, condition: Callable[[], bool]) -> None:
        nonlocal rounds
        while condition():
            assert time.monotonic() < deadline, "the third consumer never got partitions"
            await producer.send_round(playlists, rounds)
            rounds += 1
            await asyncio.sleep(0.05)

    with listening(redis_url, pattern=events_channel("*")) as listener:
        async with running(first, second), producing(config) as producer:
            await wait_until(lambda: first.started.is_set() and second.started.is_set(), "a group")
            await produce_while(producer, lambda: rounds < 20)
            async with running(third):
                await produce_while(producer, lambda: not third.consumer.assignment)
                joined_at = rounds
                await produce_while(producer, lambda: rounds < joined_at + 20)
                ours = set(playlists)
                await listener.receive_until(
                    lambda: (
                        sum(pid in ours for pid, _ in listener.received) >= rounds * len(playlists)
                    ),
                    f"{rounds} versions of each playlist",
                )
                await listener.drain()

    for playlist in playlists:
        assert listener.versions(playlist) == list(range(rounds)), playlist
    assert third.consumer.assignment
    assert first.published + second.published + third.published == rounds * len(playlists)


async def test_keeps_publishing_after_the_broker_restarts_with_an_empty_log(
    private_tansu: TansuServer, redis_client: aioredis.Redis, redis_url: str
) -> None:
    config = KafkaConfig(
        bootstrap_servers=private_tansu.bootstrap_servers,
        topic=new_id("chorus-test"),
        partitions=2,
        idempotent=False,
    )
    # This playlist's key moves to a partition the fanout's metadata does not
    # have when the topic comes back with Tansu's default of 4 partitions.
    playlist = next(pid for pid in (new_id("pl") for _ in range(1000)) if partition_of(pid, 4) >= 2)
    worker = fanout(config, redis_client, new_id("fanout-test"))
    with listening(redis_url, channel=events_channel(playlist)) as listener:
        async with running(worker):
            await wait_until(worker.started.is_set, "the fanout to join")  # topic: 2 partitions
            async with producing(config) as producer:
                await producer.send_events(playlist, [0, 1, 2])
                await listener.receive_until(lambda: len(listener.received) == 3, "versions 0-2")

            await asyncio.to_thread(private_tansu.restart)  # the log and the group are gone
            # A relay makes sure the topic exists before producing to it again
            # (Tansu acknowledges records for a missing topic, then loses
            # them); here another client re-creates it with 4 partitions,
            # unless the fanout was first (then it has 2 again).
            again = replace(config, partitions=4)
            await ensure_topic(again)
            async with producing(again) as producer:
                await producer.send_events(playlist, [3, 4, 5])
                await listener.receive_until(
                    lambda: len(listener.received) >= 6, "versions 3-5", timeout_s=45
                )
                await producer.send_events(playlist, [6, 7])
                await listener.receive_until(lambda: len(listener.received) >= 8, "versions 6-7")
            await listener.drain()

    assert listener.versions(playlist) == list(range(8))


def _lag(group: str) -> float:
    return REGISTRY.get_sample_value("chorus_consumer_lag_records", {"group": group}) or 0.0


async def test_events_produced_while_redis_is_down_are_published_when_it_returns(
    kafka_config: KafkaConfig, private_redis: RedisServer
) -> None:
    playlist = new_id("pl")
    client = aioredis.Redis.from_url(private_redis.url, socket_connect_timeout=1)
    group = new_id("fanout-test")
    worker = fanout(kafka_config, client, group)
    before = Listener(private_redis.url, channel=events_channel(playlist))
    try:
        async with running(worker), producing(kafka_config) as producer:
            await producer.send_events(playlist, [0, 1, 2])
            await before.receive_until(lambda: len(before.received) == 3, "versions 0-2")

            private_redis.stop()
            await producer.send_events(playlist, [3, 4, 5, 6, 7])
            await wait_until(lambda: worker.consumer.handler_failures >= 1, "the fanout to fail")
            # The stuck events are lag, not "caught up" (the gauge read 0 here).
            await wait_until(lambda: _lag(group) >= 1, "the lag gauge to count them")
            # Pub/sub keeps nothing for late subscribers: start Redis and
            # subscribe without yielding to the event loop, so the fanout
            # cannot publish before this listener is there.
            private_redis.start()
            after = Listener(private_redis.url, channel=events_channel(playlist))
            try:
                await producer.send_events(playlist, [8])
                await after.receive_until(lambda: len(after.received) >= 6, "versions 3-8")
                await after.drain()
            finally:
                after.close()
    finally:
        before.close()
        await client.aclose()

    assert before.versions(playlist) == [0, 1, 2]
    assert after.versions(playlist) == [3, 4, 5, 6, 7, 8]
    assert worker.published == 9
