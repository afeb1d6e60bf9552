"""Fanout: Kafka events → Redis ``PUBLISH`` (``SPUBLISH`` on a cluster) on each playlist's channel.

``chorus fanout`` consumes the events topic in its own consumer group
(docs/architecture.md) and publishes every record's value, byte for byte, on
:func:`~chorus.events.wire.events_channel` of its playlist, where the
API processes listen (docs/api.md, Subscriptions).

**Delivery rule: at least once from Kafka, at most once to Redis.** The relay
may produce an event twice and a rebalance re-delivers what was not committed
yet, so each event goes through one Lua script, atomic in Redis: publish it
only when its ``version`` is above the playlist's
:func:`~chorus.events.wire.fanout_version_key` (missing: -1), and
raise the key to it. A duplicate or an older version is dropped. The key is
shared, so the rule holds across every fanout consumer of the deployment,
rebalances included: subscribers see each version at most once, in
increasing order, and repair any gap from SQL (docs/api.md, docs/full-profile.md).

Consuming (joining, commits, rebalances, lag, a broker that lost its log) is
the :class:`~chorus.events.consumer.ConsumerRunner`'s; fanout only publishes.
Redis errors fail the batch, which the runner hands again, in order, with
backoff (0.05 s doubling to 2 s), committing nothing until Redis answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, cast

from opentelemetry.trace import SpanKind
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from chorus.events.consumer import ConsumerRunner, Record
from chorus.events.kafka import KafkaConfig
from chorus.events.wire import FANOUT_GROUP, events_channel, fanout_version_key
from chorus.metrics import FANOUT_DUPLICATES, FANOUT_PUBLISHED
from chorus.tracing import links_to, tracer

PUBLISH_IF_NEWER = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1') or -1
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[4])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
"""
"""KEYS: the fanout version key. ARGV: version, channel, payload, TTL (seconds).

Returns 1 when published, 0 when dropped (a duplicate or an older version).
"""

SPUBLISH_IF_NEWER = PUBLISH_IF_NEWER.replace("'PUBLISH'", "'SPUBLISH'")
""":data:`PUBLISH_IF_NEWER` on a Redis Cluster: sharded pub/sub, on the node
owning the playlist's slot (its channel and dedupe key share it)."""


class Fanout:
    """Publishes the events topic on per-playlist Redis channels, once per version.

    Args:
        config: the events topic and its broker.
        redis: where to publish (the dedupe keys live there too).
        group_id: the consumer group; one per deployment, shared by every
            fanout process so they split the partitions.
        client_id: the Kafka client id (shows in broker logs).
        dedupe_ttl_s: seconds a playlist's last published version is kept
            after its last event; a version re-delivered later than that
            would be published again.

    Raises:
        ValueError: ``dedupe_ttl_s`` below 1.

    Attributes:
        consumer: the runner consuming for this fanout (``assignment``,
            ``skipped``, ``handler_failures`` — Redis failures retried —,
            ``lost_logs``, ``restarts``).
        published: events this instance published.
        duplicates: events dropped as already published (same or older version).
    """

    def __init__(
        self,
        config: KafkaConfig,
        redis: Redis,
        *,
        group_id: str = FANOUT_GROUP,
        client_id: str = "chorus-fanout",
        dedupe_ttl_s: int = 7 * 24 * 3600,
    ) -> None:
        if dedupe_ttl_s < 1:
            raise ValueError("dedupe_ttl_s must be at least 1 second")
        self._redis = redis
        self._cluster = isinstance(redis, RedisCluster)
        self._script = redis.register_script(
            SPUBLISH_IF_NEWER if self._cluster else PUBLISH_IF_NEWER
        )
        self._dedupe_ttl_s = dedupe_ttl_s
        self.consumer = ConsumerRunner(
            config, self, group_id=group_id, client_id=client_id, expected=(RedisError,)
        )
        self.published = 0
        self.duplicates = 0

    @property
    def started(self) -> asyncio.Event:
        """Set when the consumer first joined the group and got its partitions."""
        return self.consumer.started

    async def run(self) -> None:
        """Consume and publish until cancelled (:meth:`ConsumerRunner.run`)."""
        await self.consumer.run()

    async def handle(self, records: Sequence[Record]) -> None:
        """Run the dedupe script for ``records``, in order, in one round trip.

        Raises:
            redis.RedisError: some, all or none of them ran; running them
                again is safe (the script drops what already went out).
        """
        with tracer.start_as_current_span(
            "fanout publish",
            kind=SpanKind.CONSUMER,
            links=links_to(r.traceparent for r in records),
            attributes={"messaging.batch.message_count": len(records)},
        ):
            await self._publish(records)

    def _call(self, r: Record, pipe: Any = None) -> Awaitable[int]:
        playlist_id = r.event["playlist_id"]
        keys = [fanout_version_key(playlist_id)]
        args: list[str | bytes | int] = [
            r.event["version"],
            events_channel(playlist_id),
            r.value,
            self._dedupe_ttl_s,
        ]
        return cast(Awaitable[int], self._script(keys=keys, args=args, client=pipe))

    async def _in_order(self, records: Sequence[Record]) -> list[int]:
        return [await self._call(r) for r in records]

    async def _publish(self, records: Sequence[Record]) -> None:
        results: list[int]
        if self._cluster:
            # Playlists live on several nodes: each playlist's records in
            # order, the playlists at once (no cluster pipeline of scripts).
            playlists: dict[str, list[Record]] = {}
            for r in records:
                playlists.setdefault(r.event["playlist_id"], []).append(r)
            done = await asyncio.gather(*(self._in_order(rs) for rs in playlists.values()))
            results = [result for batch in done for result in batch]
        else:
            async with self._redis.pipeline(transaction=False) as pipe:
                for r in records:
                    await self._call(r, pipe)
                results = await pipe.execute()
        published = sum(1 for result in results if result == 1)
        self.published += published
        self.duplicates += len(results) - published
        FANOUT_PUBLISHED.inc(published)
        FANOUT_DUPLICATES.inc(len(results) - published)
