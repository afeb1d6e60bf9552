"""The composition root: every service and worker of every command is built here.

Nothing connects to a server at import time. Each builder takes the frozen
:class:`~chorus.settings.Settings` and returns one part; the context managers
start what runs in the background and stop it (for certain, with
:func:`~chorus.resilience.tasks.cancel_and_wait`) when their block ends:

* :func:`api_services` — what ``chorus serve`` hands every request: the
  database, the store, the catalog, the event bus and hub, the snapshot cache
  (full profile) and the in-process relay (embedded profile) or the workers
  (``--with-workers``), plus the readiness checks.
* :func:`running_workers` — the full profile's relay, fanout and cache
  projector (``chorus relay`` / ``fanout`` / ``project-cache``, or inside
  ``serve --with-workers``).
* :func:`opened_database` and :func:`store` — what the other CLI commands need.

docs/architecture.md draws how these parts connect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as redis

from chorus import health
from chorus.auth import load_or_create_secret
from chorus.caches.heads import Heads, LocalHeads, SharedHeads
from chorus.caches.reader import SnapshotCache
from chorus.caches.responses import ResponseCache
from chorus.catalog.embedded import EmbeddedCatalog
from chorus.catalog.http import HttpCatalog
from chorus.catalog.protocol import Catalog
from chorus.db.engine import Database
from chorus.db.follows import FollowStore
from chorus.db.store import PlaylistStore
from chorus.db.watch import watch_commits
from chorus.domain.changes import PlaylistEvent
from chorus.events.fanout import Fanout
from chorus.events.feed import FeedConsumer, FeedingPublisher, FeedSink
from chorus.events.kafka import KafkaConfig, KafkaPublisher
from chorus.events.projector import CacheProjector
from chorus.events.relay import OutboxRelay
from chorus.resilience.breaker import CircuitBreaker
from chorus.resilience.tasks import cancel_and_wait
from chorus.resolvers.context import Services
from chorus.resolvers.ratelimit import RateLimiter
from chorus.settings import Settings
from chorus.subscriptions.bus import Bus, BusPublisher, InProcessBus
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.redis_bus import RedisBus

WORKERS = ("relay", "fanout", "project-cache", "feed")
"""The full profile's worker names, as the CLI spells them."""

REDIS_SOCKET_TIMEOUT_S = 5.0
"""A Redis command's backstop (seconds); the snapshot reader's own timeout is shorter."""
REDIS_CONNECT_TIMEOUT_S = 2.0
"""How long connecting to Redis may take (seconds)."""


def jwt_secret(settings: Settings) -> str:
    """The configured secret, or the one generated and kept in ``CHORUS_DATA_DIR``.

    Raises:
        SecretUnusable: the kept secret is too short or unreadable, or the
            data directory is not a writable directory
            (:func:`~chorus.auth.load_or_create_secret`).
    """
    return settings.jwt_secret or load_or_create_secret(Path(settings.data_dir))


def library_secret(settings: Settings) -> bytes:
    """The key of Liked Songs ids: configured, or generated and kept in ``CHORUS_DATA_DIR``."""
    secret = settings.library_secret or load_or_create_secret(
        Path(settings.data_dir), "library-secret"
    )
    return secret.encode()


def database(settings: Settings) -> Database:
    """The engines for ``CHORUS_DATABASE_URL`` (connect lazily; the caller disposes)."""
    return Database(settings.database_url)


@asynccontextmanager
async def opened_database(settings: Settings) -> AsyncIterator[Database]:
    """:func:`database`, disposed when the block ends."""
    db = database(settings)
    try:
        yield db
    finally:
        await db.dispose()


def embedded_catalog(db: Database) -> EmbeddedCatalog:
    """The catalog kept in ``db`` (``catalog serve`` serves it, ``import mpd`` adds to it)."""
    return EmbeddedCatalog(db)


def catalog(settings: Settings, db: Database) -> Catalog:
    """The catalog service at ``CHORUS_CATALOG_URL``, else the embedded one in ``db``."""
    if settings.catalog_url:
        return HttpCatalog(settings.catalog_url, timeout_s=settings.catalog_timeout_ms / 1000)
    return embedded_catalog(db)


def store(
    settings: Settings, db: Database, on_commit: Callable[[str, int], None] | None = None
) -> PlaylistStore:
    """The unit of work over ``db`` with the configured limits and owner queues."""
    return PlaylistStore(
        db,
        limits=settings.limits,
        on_commit=on_commit,
        group_commit=settings.group_commit,
        queue_size=settings.owner_queue_size,
        queue_per_user=settings.owner_queue_per_user,
        library_secret=library_secret(settings),
    )


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


def redis_client(settings: Settings) -> redis.Redis:
    """A pooled Redis client for snapshots, heads and fanout (full profile).

    Raises:
        ValueError: the embedded profile (Redis is not set).
    """
    _, url = settings.require_full_profile("Redis")
    return redis.Redis.from_url(
        url, socket_timeout=REDIS_SOCKET_TIMEOUT_S, socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S
    )


def snapshot_cache(settings: Settings, client: redis.Redis) -> SnapshotCache:
    """The API's snapshot reader on ``client``, behind the configured circuit breaker."""
    breaker = CircuitBreaker(
        failures=settings.redis_breaker_failures, reset_s=settings.redis_breaker_reset_s
    )
    return SnapshotCache(client, breaker=breaker, page_size=settings.snapshot_page_size)


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
    client = redis_client(settings)
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
        )
        workers.tasks.append(asyncio.create_task(projector.run(), name="cache-projector"))
    if "feed" in names:
        consumer = FeedConsumer(
            config, db, settings.feed_limits, group_id=settings.kafka_feed_group
        )
        workers.tasks.append(asyncio.create_task(consumer.run(), name="feed-consumer"))
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
    """

    def __init__(
        self,
        relay: OutboxRelay | None,
        snapshots: SnapshotCache | None,
        heads: Heads | None = None,
    ) -> None:
        self._relay = relay
        self._snapshots = snapshots
        self._heads = heads

    def __call__(self, playlist_id: str, version: int) -> None:
        if self._heads is not None:
            self._heads.committed(playlist_id, version)
        if self._relay is not None:
            self._relay.notify(playlist_id, version)
        if self._snapshots is not None:
            self._snapshots.committed(playlist_id, version)


def response_cache(settings: Settings) -> ResponseCache | None:
    """The response cache of ``CHORUS_RESPONSE_CACHE*``, or ``None`` when it is off."""
    if not settings.response_cache:
        return None
    return ResponseCache(
        settings.response_cache_max_bytes, media_freshness_s=settings.media_freshness_s
    )


def heads(snapshots: SnapshotCache | None) -> Heads:
    """Redis's heads where there is a snapshot cache (full profile), else this process's."""
    return SharedHeads(snapshots) if snapshots is not None else LocalHeads()


@dataclass(frozen=True, slots=True)
class _Events:
    bus: Bus
    relay: OutboxRelay | None
    snapshots: SnapshotCache | None
    checks: list[health.Check]


class _HeadRaisingPublisher(BusPublisher):
    """The embedded relay's publisher, which also raises the response cache's heads.

    A commit of this process raised them already (``CommitHooks``); one of
    another process (``chorus import`` beside the server) is learned here,
    when the relay publishes it, so no cached answer outlives it by more
    than the commit watch's poll and the relay's turn.
    """

    def __init__(self, bus: Bus, heads: Heads) -> None:
        super().__init__(bus)
        self._heads = heads

    async def publish_batch(self, events: Sequence[PlaylistEvent]) -> None:
        for event in events:
            self._heads.committed(event["playlist_id"], event["version"])
        await super().publish_batch(events)


@asynccontextmanager
async def _embedded_events(
    settings: Settings, db: Database, heads: Heads | None
) -> AsyncIterator[_Events]:
    """The embedded profile: an in-process bus fed by an in-process relay.

    The relay writes the feed's pushed rows before each batch reaches the bus.
    On SQLite the relay is also woken by commits of other processes (a
    ``chorus import`` beside the server, :func:`chorus.db.watch.watch_commits`),
    so their events reach this server's subscribers as promptly as its own,
    and ``heads`` (the response cache's, if on) hear of them.
    """
    bus = InProcessBus()
    publisher = BusPublisher(bus) if heads is None else _HeadRaisingPublisher(bus, heads)
    relay = OutboxRelay(db, FeedingPublisher(publisher, FeedSink(db, settings.feed_limits)))
    tasks = [asyncio.create_task(relay.run(), name="outbox-relay")]
    if db.dialect == "sqlite":
        tasks.append(asyncio.create_task(watch_commits(db, relay.notify), name="commit-watch"))
    try:
        yield _Events(bus, relay, None, [])
    finally:
        for task in reversed(tasks):
            await cancel_and_wait(task)
        await bus.aclose()


@asynccontextmanager
async def _full_events(
    settings: Settings, db: Database, with_workers: bool
) -> AsyncIterator[_Events]:
    """The full profile: Redis pub/sub in, snapshots in Redis, workers elsewhere or here."""
    servers, url = settings.require_full_profile("the full profile")
    client = redis_client(settings)
    snapshots = snapshot_cache(settings, client)
    bus = RedisBus(url)
    await bus.start()
    checks = [health.redis_check(client), health.kafka_check(servers)]
    try:
        if with_workers:
            async with running_workers(settings, WORKERS, db) as running:
                yield _Events(bus, running.relay, snapshots, checks)
        else:
            yield _Events(bus, None, snapshots, checks)
    finally:
        await snapshots.aclose()
        await bus.aclose()
        await client.aclose()


@dataclass(frozen=True, slots=True)
class Api:
    """What an API process runs on.

    Attributes:
        services: handed to every request (:class:`~chorus.resolvers.context.Services`).
        checks: what ``/readyz`` asks: the database, and Redis and Kafka in the full profile.
    """

    services: Services
    checks: list[health.Check]


@asynccontextmanager
async def api_services(settings: Settings, *, with_workers: bool = False) -> AsyncIterator[Api]:
    """Build and start everything an API process needs; stop it all when the block ends.

    Args:
        with_workers: run the full profile's workers in this process too.

    Raises:
        ValueError: ``with_workers`` without the full profile's settings.
    """
    if with_workers:
        settings.require_full_profile("--with-workers")
    db = database(settings)
    media = catalog(settings, db)
    limiter = (
        RateLimiter(settings.rate_limit_per_minute) if settings.rate_limit_per_minute else None
    )
    budget = RateLimiter(settings.query_cost_per_minute) if settings.query_cost_per_minute else None
    checks = [health.database_check(db)]
    try:
        async with contextlib.AsyncExitStack() as stack:
            answers = response_cache(settings)
            versions: Heads | None
            if settings.full_profile:
                events = await stack.enter_async_context(_full_events(settings, db, with_workers))
                versions = heads(events.snapshots) if answers is not None else None
            else:
                versions = LocalHeads() if answers is not None else None
                events = await stack.enter_async_context(_embedded_events(settings, db, versions))
            checks += events.checks
            services = Services(
                db=db,
                store=store(settings, db, CommitHooks(events.relay, events.snapshots, versions)),
                follows=FollowStore(db, settings.feed_limits),
                feed_limits=settings.feed_limits,
                catalog=media,
                limits=settings.limits,
                hub=Hub(events.bus, queue_size=settings.max_subscriber_lag),
                rate_limiter=limiter,
                query_budget=budget,
                snapshots=events.snapshots,
                responses=answers,
                heads=versions,
            )
            try:
                yield Api(services, checks)
            finally:
                await health.close_checks(checks)
    finally:
        await media.aclose()
        await db.dispose()
