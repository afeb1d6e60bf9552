"""The composition root's event path: what a commit sets in motion, in each profile.

Part of the composition root (:mod:`chorus.bootstrap`, which enters these):

* :class:`CommitHooks` — the store's ``on_commit``: raise the heads, wake the relay;
* :func:`embedded_events` — the embedded profile: an in-process bus fed by an
  in-process relay (and the watch over commits of other processes);
* :func:`full_events` — the full profile: Redis pub/sub, snapshots in Redis,
  and the workers elsewhere or here;
* :func:`running_workers` — the full profile's relay, fanout, cache projector
  and feed consumer (``chorus relay`` / ``fanout`` / ``project-cache`` /
  ``feed``, or inside ``serve --with-workers``), and the Kafka and Redis
  clients they run on (:func:`kafka_config`, :func:`redis_client`).

docs/architecture.md draws how these parts connect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import cast

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster

from chorus import health
from chorus.caches.cluster_store import SlotGenerations
from chorus.caches.generation import Generation
from chorus.caches.heads import Heads
from chorus.caches.reader import SnapshotCache
from chorus.db.engine import Database
from chorus.db.replicas import KnownHeads, Replicas
from chorus.db.watch import listen_commits, watch_commits
from chorus.domain.changes import PlaylistEvent
from chorus.events.fanout import Fanout
from chorus.events.feed import FeedConsumer, FeedingPublisher, FeedSink, FeedSwitcher
from chorus.events.kafka import KafkaConfig, KafkaPublisher
from chorus.events.projector import CacheProjector
from chorus.events.relay import OutboxRelay
from chorus.resilience.breaker import CircuitBreaker
from chorus.resilience.tasks import cancel_and_wait
from chorus.settings import Settings
from chorus.subscriptions.bus import Bus, BusPublisher, InProcessBus
from chorus.subscriptions.cluster_bus import ClusterBus
from chorus.subscriptions.local_presence import LocalPresenceStore
from chorus.subscriptions.presence import Presence
from chorus.subscriptions.redis_bus import RedisBus
from chorus.subscriptions.redis_presence import RedisPresenceStore

WORKERS = ("relay", "fanout", "project-cache", "feed")
"""The full profile's worker names, as the CLI spells them."""

REDIS_SOCKET_TIMEOUT_S = 5.0
"""A Redis command's backstop (seconds); the snapshot reader's own timeout is shorter."""
REDIS_CONNECT_TIMEOUT_S = 2.0
"""How long connecting to Redis may take (seconds)."""
REDIS_POOL_WAIT_S = 5.0
"""How long a command waits for a free pooled connection (seconds): a burst
(thousands of subscribes at once) queues instead of failing with "Too many
connections"; past this, ``ConnectionError("No connection available.")``."""


def kafka_config(settings: Settings) -> KafkaConfig:
    """The Kafka settings of the full profile.

    Raises:
        ValueError: the embedded profile (Kafka is not set).
    """
    servers, _ = settings.require_full_profile("the workers")
    return KafkaConfig(
        bootstrap_servers=servers,
        topic=settings.kafka_topic,
        partitions=settings.kafka_topic_partitions,
        idempotent=settings.kafka_idempotent_producer,
    )


def new_generation(settings: Settings) -> Generation:
    """This process's belief of Redis's generation.

    On a cluster, one per slot (:mod:`chorus.caches.cluster_store`).
    """
    return SlotGenerations() if settings.redis_cluster else Generation()


def redis_client(settings: Settings, generation: Generation) -> redis.Redis:
    """A pooled Redis client for snapshots, heads and fanout (full profile).

    Every new connection checks Redis's generation before its first command
    (:meth:`Generation.on_connect`): a restarted Redis or a promoted replica
    is never read unchecked. On a cluster (``redis_cluster``) a
    ``RedisCluster``, whose scripts check their slot's generation instead.

    At most ``redis_max_connections`` connections (per node on a cluster).
    On a single Redis a command waits up to :data:`REDIS_POOL_WAIT_S` for a
    free one; a cluster client cannot wait, and fails at once.

    Raises:
        ValueError: the embedded profile (Redis is not set).
    """
    _, url = settings.require_full_profile("Redis")
    if settings.redis_cluster:
        return cast(
            redis.Redis,
            RedisCluster.from_url(
                url,
                max_connections=settings.redis_max_connections,
                socket_timeout=REDIS_SOCKET_TIMEOUT_S,
                socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            ),
        )
    # A blocking pool: redis-py's default pool raises "Too many connections"
    # at once when its bound is reached; this one waits for a free connection.
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=settings.redis_max_connections,
        timeout=REDIS_POOL_WAIT_S,
        socket_timeout=REDIS_SOCKET_TIMEOUT_S,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        redis_connect_func=generation.on_connect,
    )
    return redis.Redis.from_pool(pool)


def snapshot_cache(
    settings: Settings, client: redis.Redis, generation: Generation
) -> SnapshotCache:
    """The API's snapshot reader on ``client``, behind the configured circuit breaker."""
    breaker = CircuitBreaker(
        failures=settings.redis_breaker_failures, reset_s=settings.redis_breaker_reset_s
    )
    return SnapshotCache(
        client, breaker=breaker, page_size=settings.snapshot_page_size, generation=generation
    )


@dataclass
class Workers:
    """Running workers.

    Attributes:
        relay: the outbox relay, when it is one of them.
        tasks: one task per worker; each retries every failure, so one that
            ends has crashed.
        checks: what readiness means for these workers: the database (relay,
            projector), Kafka (all), Redis (fanout, projector).
    """

    relay: OutboxRelay | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    checks: list[health.Check] = field(default_factory=list)


@asynccontextmanager
async def running_workers(
    settings: Settings, names: Sequence[str], db: Database
) -> AsyncIterator[Workers]:
    """Run the named workers (of :data:`WORKERS`) as tasks until the block ends.

    Raises:
        ValueError: an unknown name, or the settings are not the full profile.
    """
    unknown = set(names) - set(WORKERS)
    if unknown:
        raise ValueError(f"unknown workers: {', '.join(sorted(unknown))}")
    config = kafka_config(settings)
    generation = new_generation(settings)
    client = redis_client(settings, generation)
    workers = Workers()
    closers: list[Callable[[], Awaitable[None]]] = [client.aclose]
    if {"relay", "project-cache", "feed"} & set(names):
        workers.checks.append(health.database_check(db))
    if {"fanout", "project-cache"} & set(names):
        workers.checks.append(health.redis_check(client))
    kafka = health.kafka_check(config.bootstrap_servers)
    workers.checks.append(kafka)
    closers.append(kafka.close)
    if "relay" in names:
        publisher = KafkaPublisher(config)
        closers.append(publisher.aclose)
        workers.relay = OutboxRelay(db, publisher)
        workers.tasks.append(asyncio.create_task(workers.relay.run(), name="outbox-relay"))
        workers.tasks.append(_commit_watch(db, workers.relay))
    if "fanout" in names:
        fanout = Fanout(config, client, group_id=settings.kafka_fanout_group)
        workers.tasks.append(asyncio.create_task(fanout.run(), name="fanout"))
    if "project-cache" in names:
        projector = CacheProjector(
            config,
            client,
            db,
            group_id=settings.kafka_projector_group,
            page_size=settings.snapshot_page_size,
            generation=generation,
        )
        workers.tasks.append(asyncio.create_task(projector.run(), name="cache-projector"))
    if "feed" in names:
        consumer = FeedConsumer(
            config, db, settings.feed_limits, group_id=settings.kafka_feed_group
        )
        workers.tasks.append(asyncio.create_task(consumer.run(), name="feed-consumer"))
        switcher = FeedSwitcher(db, settings.feed_limits)
        workers.tasks.append(asyncio.create_task(switcher.run(), name="feed-switcher"))
    try:
        yield workers
    finally:
        for task in workers.tasks:
            task.cancel()
        for task in workers.tasks:
            await cancel_and_wait(task)
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()


class CommitHooks:
    """What a commit of this process sets in motion: wake the relay, raise the heads.

    The in-process head registry moves at once (no cached answer of the old
    version is served after the commit returns); the Redis head is raised in
    the background (a mutation never waits for Redis).

    Args:
        relay: the relay running in this process, if any.
        snapshots: the snapshot cache (full profile), if any.
        heads: the response cache's head registry, if any.
        replicas: the read replicas' floors (:mod:`chorus.db.replicas`), if any:
            raised at once, so this process never reads its own write older.
    """

    def __init__(
        self,
        relay: OutboxRelay | None,
        snapshots: SnapshotCache | None,
        heads: Heads | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self._relay = relay
        self._snapshots = snapshots
        self._heads = heads
        self._replicas = replicas

    def __call__(self, playlist_id: str, version: int) -> None:
        if self._replicas is not None:
            self._replicas.committed(playlist_id, version)
        if self._heads is not None:
            self._heads.committed(playlist_id, version)
        if self._relay is not None:
            self._relay.notify(playlist_id, version)
        if self._snapshots is not None:
            self._snapshots.committed(playlist_id, version)


def shared_floors(snapshots: SnapshotCache) -> KnownHeads:
    """The read replicas' floors from Redis's head keys (:data:`~chorus.db.replicas.KnownHeads`)."""

    async def known(playlist_ids: Collection[str]) -> Mapping[str, int] | None:
        found = await snapshots.heads(playlist_ids)
        return None if found is None else found[1]

    return known


@dataclass(frozen=True, slots=True)
class Events:
    """The event path an API process runs on: its bus, relay (if here), snapshots, checks,
    and presence (:mod:`chorus.subscriptions.presence`)."""

    bus: Bus
    relay: OutboxRelay | None
    snapshots: SnapshotCache | None
    checks: list[health.Check]
    presence: Presence | None = None


class HeadRaisingPublisher(BusPublisher):
    """The embedded relay's publisher, which also raises what this process knows of heads.

    A commit of this process raised them already (``CommitHooks``); one of
    another process (``chorus import`` beside the server, or another ``chorus
    serve`` on the same PostgreSQL) is learned here, when the relay publishes
    it: the response cache's heads, so no cached answer outlives it by more
    than the commit watch's poll and the relay's turn, and the read replicas'
    floors, so no read here is older than a version this process delivered.
    """

    def __init__(self, bus: Bus, heads: Heads | None, replicas: Replicas | None = None) -> None:
        super().__init__(bus)
        self._heads = heads
        self._replicas = replicas

    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        for event in events:
            if self._replicas is not None:
                self._replicas.committed(event["playlist_id"], event["version"])
            if self._heads is not None:
                self._heads.committed(event["playlist_id"], event["version"])
        await super().publish_batch(events, traceparents=traceparents)


def _commit_watch(db: Database, relay: OutboxRelay) -> asyncio.Task[None]:
    """Wake ``relay`` on commits of other processes too (:mod:`chorus.db.watch`)."""
    if db.dialect == "sqlite":
        return asyncio.create_task(watch_commits(db, relay.notify), name="commit-watch")
    return asyncio.create_task(listen_commits(db, relay.notify), name="commit-listener")


@asynccontextmanager
async def embedded_events(
    settings: Settings, db: Database, heads: Heads | None
) -> AsyncIterator[Events]:
    """The embedded profile: an in-process bus fed by an in-process relay.

    The relay writes the feed's pushed rows before each batch reaches the bus;
    a :class:`~chorus.events.feed.FeedSwitcher` backfills targets going back to push.
    The relay is also woken by commits of other processes (a ``chorus import``
    beside the server: :func:`chorus.db.watch.watch_commits` on SQLite,
    :func:`~chorus.db.watch.listen_commits` on PostgreSQL),
    so their events reach this server's subscribers as promptly as its own,
    and ``heads`` (the response cache's, if on) hear of them.
    """
    bus = InProcessBus()
    presence = Presence(LocalPresenceStore(), ttl_s=settings.presence_ttl_s)
    await presence.start()
    learns = heads is not None or db.replicas is not None
    publisher = HeadRaisingPublisher(bus, heads, db.replicas) if learns else BusPublisher(bus)
    relay = OutboxRelay(db, FeedingPublisher(publisher, FeedSink(db, settings.feed_limits)))
    tasks = [
        asyncio.create_task(relay.run(), name="outbox-relay"),
        _commit_watch(db, relay),
        asyncio.create_task(FeedSwitcher(db, settings.feed_limits).run(), name="feed-switcher"),
    ]
    try:
        yield Events(bus, relay, None, [], presence)
    finally:
        await presence.aclose()
        for task in reversed(tasks):
            await cancel_and_wait(task)
        await bus.aclose()


@asynccontextmanager
async def full_events(
    settings: Settings, db: Database, with_workers: bool
) -> AsyncIterator[Events]:
    """The full profile: Redis pub/sub in, snapshots in Redis, workers elsewhere or here."""
    servers, url = settings.require_full_profile("the full profile")
    generation = new_generation(settings)
    client = redis_client(settings, generation)
    snapshots = snapshot_cache(settings, client, generation)
    bus: RedisBus | ClusterBus = ClusterBus(url) if settings.redis_cluster else RedisBus(url)
    await bus.start()
    # Presence lives in Redis beside the snapshots, never in SQL or Kafka.
    store = RedisPresenceStore(client, max_connections=settings.redis_max_connections)
    presence = Presence(store, ttl_s=settings.presence_ttl_s)
    await presence.start()
    checks = [health.redis_check(client), health.kafka_check(servers)]
    try:
        if with_workers:
            async with running_workers(settings, WORKERS, db) as running:
                yield Events(bus, running.relay, snapshots, checks, presence)
        else:
            yield Events(bus, None, snapshots, checks, presence)
    finally:
        await presence.aclose()
        await snapshots.aclose()
        await bus.aclose()
        await client.aclose()
