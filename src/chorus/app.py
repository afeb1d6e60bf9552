"""The ASGI application and its composition root.

:func:`create_app` wires nothing at import time: the lifespan builds the
database engines, the store, the catalog client, the event bus, the hub and
the outbox relay from :class:`Settings`, hands them to every request in a
typed :class:`~chorus.resolvers.context.RequestContext`, and closes them on
shutdown (uvicorn closes the WebSockets first, which ends every stream and
runs its cleanup).

Routes: ``/graphql`` (POST queries and mutations; GET opens GraphiQL;
WebSocket ``graphql-transport-ws`` for subscriptions), ``/healthz`` (alive).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp

from chorus.auth import load_or_create_secret
from chorus.catalog.embedded import EmbeddedCatalog
from chorus.catalog.http import HttpCatalog
from chorus.catalog.protocol import Catalog
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.graphql.view import ChorusGraphQL
from chorus.middleware import BodySizeLimit
from chorus.resolvers.context import Services
from chorus.resolvers.ratelimit import RateLimiter
from chorus.settings import Settings
from chorus.subscriptions.bus import InProcessBus
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.relay import BusPublisher, OutboxRelay


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


def create_app(settings: Settings | None = None) -> ASGIApp:
    """The Chorus ASGI app for ``settings`` (read from the environment when omitted)."""
    settings = settings or Settings()
    secret = jwt_secret(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        catalog = build_catalog(settings, db)
        bus = InProcessBus()
        relay = OutboxRelay(db, BusPublisher(bus))
        hub = Hub(bus, queue_size=settings.max_subscriber_lag)
        store = PlaylistStore(db, limits=settings.limits, on_commit=relay.notify)
        limiter = (
            RateLimiter(settings.rate_limit_per_minute) if settings.rate_limit_per_minute else None
        )
        app.state.services = Services(
            db=db,
            store=store,
            catalog=catalog,
            limits=settings.limits,
            hub=hub,
            rate_limiter=limiter,
        )
        app.state.relay = relay
        relay_task = asyncio.create_task(relay.run(), name="outbox-relay")
        try:
            yield
        finally:
            relay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay_task
            await bus.aclose()
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
