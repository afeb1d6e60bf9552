"""The ASGI application and its composition root.

:func:`create_app` wires nothing at import time: the lifespan builds the
database engines, the store, the catalog client, the event bus, the hub and
the profile's event plumbing from :class:`Settings`, hands them to every
request in a typed :class:`~chorus.resolvers.context.RequestContext`, and
closes them on shutdown (uvicorn closes the WebSockets first, which ends
every stream and runs its cleanup).

Profiles (DESIGN §1): **embedded** — an in-process relay feeds an in-process
bus; **full** (Kafka and Redis set) — this process only listens on Redis
pub/sub, reads PUBLIC playlists' snapshots from Redis and raises their head
version after each commit; the relay, fanout and cache projector run as
their own processes, or here with ``with_workers``.

Routes: ``/graphql`` (POST queries and mutations; GET opens GraphiQL;
WebSocket ``graphql-transport-ws`` for subscriptions), ``/healthz`` (alive),
``/readyz`` (the servers it needs answer), ``/metrics`` (Prometheus).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import redis.asyncio as redis
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp

from chorus import health, workers
from chorus.auth import load_or_create_secret
from chorus.caches.reader import SnapshotCache
from chorus.catalog.embedded import EmbeddedCatalog
from chorus.catalog.http import HttpCatalog
from chorus.catalog.protocol import Catalog
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.events.relay import OutboxRelay
from chorus.graphql.view import ChorusGraphQL
from chorus.middleware import BodySizeLimit
from chorus.resilience.breaker import CircuitBreaker
from chorus.resilience.tasks import cancel_and_wait
from chorus.resolvers.context import Services
from chorus.resolvers.ratelimit import RateLimiter
from chorus.settings import Settings
from chorus.subscriptions.bus import Bus, BusPublisher, InProcessBus
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.redis_bus import RedisBus


def jwt_secret(settings: Settings) -> str:
    """The configured secret, or the one generated and kept in the data directory."""
    return settings.jwt_secret or load_or_create_secret(Path(settings.data_dir))


def build_catalog(settings: Settings, db: Database) -> Catalog:
    if settings.catalog_url:
        return HttpCatalog(settings.catalog_url, timeout_s=settings.catalog_timeout_ms / 1000)
    return EmbeddedCatalog(db)


async def healthz(request: Request) -> JSONResponse:
    """The process is alive; with the counts an operator watches for leaks."""
    services: Services = request.app.state.services
    graphql: ChorusGraphQL = request.app.state.graphql
    hub = services.hub
    return JSONResponse(
        {
            "status": "ok",
            "live_streams": hub.stream_count if hub else 0,
            "bus_subscriptions": hub.playlist_count if hub else 0,
            "websocket_connections": sum(graphql.connections.values()),
        }
    )


class _CommitHooks:
    """What a commit sets in motion in this process: wake the relay, raise the cache's head.

    The head is raised in the background (a mutation never waits for Redis).
    """

    def __init__(self) -> None:
        self.relay: OutboxRelay | None = None
        self.snapshots: SnapshotCache | None = None

    def __call__(self, playlist_id: str, version: int) -> None:
        if self.relay is not None:
            self.relay.notify(playlist_id, version)
        if self.snapshots is not None:
            self.snapshots.committed(playlist_id, version)


@asynccontextmanager
async def _embedded_events(db: Database, hooks: _CommitHooks) -> AsyncIterator[Bus]:
    """The embedded profile: an in-process bus fed by an in-process relay."""
    bus = InProcessBus()
    relay = hooks.relay = OutboxRelay(db, BusPublisher(bus))
    task = asyncio.create_task(relay.run(), name="outbox-relay")
    try:
        yield bus
    finally:
        await cancel_and_wait(task)
        await bus.aclose()


@asynccontextmanager
async def _full_events(
    settings: Settings, db: Database, hooks: _CommitHooks, with_workers: bool
) -> AsyncIterator[tuple[Bus, redis.Redis]]:
    """The full profile: Redis pub/sub in, snapshots in Redis, workers elsewhere or here."""
    assert settings.redis_url is not None
    client = redis.Redis.from_url(
        settings.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0
    )
    hooks.snapshots = SnapshotCache(
        client,
        breaker=CircuitBreaker(
            failures=settings.redis_breaker_failures, reset_s=settings.redis_breaker_reset_s
        ),
        page_size=settings.snapshot_page_size,
    )
    bus = RedisBus(settings.redis_url)
    await bus.start()
    try:
        if with_workers:
            async with workers.running(settings, workers.WORKERS, db) as running:
                hooks.relay = running.relay
                yield bus, client
        else:
            yield bus, client
    finally:
        await hooks.snapshots.aclose()
        await bus.aclose()
        await client.aclose()


def create_app(settings: Settings | None = None, *, with_workers: bool = False) -> ASGIApp:
    """The Chorus ASGI app for ``settings`` (read from the environment when omitted).

    ``with_workers`` runs the full profile's relay, fanout and cache projector
    in this process (``chorus serve --with-workers``).

    Raises:
        ValueError: ``with_workers`` without the full profile's settings.
    """
    settings = settings or Settings()
    secret = jwt_secret(settings)
    if with_workers and not settings.full_profile:
        raise ValueError(
            "--with-workers needs the full profile: set CHORUS_KAFKA_BOOTSTRAP_SERVERS "
            "and CHORUS_REDIS_URL"
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        catalog = build_catalog(settings, db)
        hooks = _CommitHooks()
        store = PlaylistStore(db, limits=settings.limits, on_commit=hooks)
        limiter = (
            RateLimiter(settings.rate_limit_per_minute) if settings.rate_limit_per_minute else None
        )
        checks = [health.database_check(db)]
        async with contextlib.AsyncExitStack() as stack:
            if settings.full_profile:
                assert settings.kafka_bootstrap_servers is not None
                bus, client = await stack.enter_async_context(
                    _full_events(settings, db, hooks, with_workers)
                )
                checks += [
                    health.redis_check(client),
                    health.kafka_check(settings.kafka_bootstrap_servers),
                ]
            else:
                bus = await stack.enter_async_context(_embedded_events(db, hooks))
            hub = Hub(bus, queue_size=settings.max_subscriber_lag)
            app.state.services = Services(
                db=db,
                store=store,
                catalog=catalog,
                limits=settings.limits,
                hub=hub,
                rate_limiter=limiter,
                snapshots=hooks.snapshots,
            )
            app.state.readiness = checks
            try:
                yield
            finally:
                await health.close_checks(checks)
                await catalog.aclose()
                await db.dispose()

    graphql_app = ChorusGraphQL(
        secret,
        graphql_ide="graphiql",
        allow_queries_via_get=False,
        max_subscriptions_per_connection=settings.max_ws_operations,
        max_connections_per_user=settings.max_ws_connections_per_user,
    )
    app = Starlette(
        routes=[
            Route("/graphql", graphql_app, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", graphql_app),
            Route("/healthz", healthz),
            Route("/readyz", health.readyz),
            Route("/metrics", health.metrics),
        ],
        lifespan=lifespan,
    )
    app.state.graphql = graphql_app
    asgi: ASGIApp = BodySizeLimit(app, settings.max_body_bytes)
    if settings.cors_origins:
        origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
        asgi = CORSMiddleware(
            asgi,
            allow_origins=origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type"],
            max_age=600,
        )
    return asgi
