"""The ASGI application: routes, middleware and the lifespan.

:func:`create_app` wires nothing at import time: the lifespan has the
composition root (:func:`chorus.bootstrap.api_services`) build the database
engines, the store, the catalog client, the event bus, the hub and the
profile's event plumbing from :class:`Settings`, hands them to every request
in a typed :class:`~chorus.resolvers.context.RequestContext`, and closes them
on shutdown (uvicorn closes the WebSockets first, which ends
every stream and runs its cleanup).

Profiles (docs/architecture.md): **embedded** — an in-process relay feeds an in-process
bus; **full** (Kafka and Redis set) — this process only listens on Redis
pub/sub, reads PUBLIC playlists' snapshots from Redis and raises their head
version after each commit; the relay, fanout and cache projector run as
their own processes, or here with ``with_workers``.

Routes: ``/graphql`` (POST queries and mutations; GET queries, persisted
ones included, and GraphiQL in a browser;
WebSocket ``graphql-transport-ws`` for subscriptions; ``CHORUS_SERVE_ROLE``
keeps one side, :mod:`chorus.graphql.roles`), ``/healthz`` (alive),
``/readyz`` (the servers it needs answer), ``/graphiql/`` (GraphiQL's own
assets, :mod:`chorus.graphql.http.ide`), ``/web/`` (the reference web client),
``/metrics`` (Prometheus; only with ``Authorization: Bearer <CHORUS_METRICS_TOKEN>``
when that is set).

Middleware, outermost first: the client's address and scheme from a
trusted proxy's ``X-Forwarded-*`` (only with ``CHORUS_TRUSTED_PROXIES``;
:class:`~chorus.middleware.ForwardedClient`, in place of uvicorn's), the
request id (every response carries it), ``Connection: close`` while draining,
OpenTelemetry's server span (only when tracing is on: ``CHORUS_OTLP_ENDPOINT``,
docs/observability.md), the JSON access line (only with
``CHORUS_LOG_FORMAT=json``), CORS (``CHORUS_CORS_ORIGINS``, the same list the
WebSocket handshake checks), the body size limit; inside them, before the router, the
lean route (:mod:`chorus.graphql.http.lean`: a response-cache hit sent from raw ASGI).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta

from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from chorus import bootstrap, health, tracing
from chorus.auth import TokenVerifier
from chorus.drain import Drain
from chorus.graphql.endpoint import ChorusGraphQL
from chorus.graphql.execution.operation_metrics import OperationNames
from chorus.graphql.guards.document_limits import RequestLimits
from chorus.graphql.guards.persisted import PersistedDocuments, load_manifest
from chorus.graphql.http import ide
from chorus.graphql.http.lean import LeanRoute
from chorus.graphql.roles import RoleGate
from chorus.health import Check
from chorus.jwks import JWKSVerifier
from chorus.logs import REQUEST_ID_HEADER
from chorus.middleware import (
    AccessLog,
    BodySizeLimit,
    CloseWhileDraining,
    ForwardedClient,
    HttpOnly,
    RequestId,
    error_response,
)
from chorus.resolvers.context import Services
from chorus.settings import Settings
from chorus.subscriptions.feed import feeds_of


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
            "feed_sources": feeds_of(hub).source_count if hub else 0,
            "feed_subscriptions": feeds_of(hub).subscription_count if hub else 0,
            "websocket_connections": sum(graphql.connections.values()),
            "draining": request.app.state.drain.draining,
        }
    )


_log = logging.getLogger("chorus.app")

_HTTP_ERROR_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own refusals (no such path, a method a route does not take) as JSON.

    The same ``{"errors": [{"message", "extensions": {"code"}}]}`` shape as every
    other refusal, so a client's one error path reads them too; ``Allow`` is kept.
    """
    assert isinstance(exc, HTTPException)
    code = _HTTP_ERROR_CODES.get(exc.status_code, "BAD_REQUEST")
    response = error_response(exc.status_code, exc.detail, code)
    response.headers.update(exc.headers or {})
    return response


def create_app(
    settings: Settings | None = None, *, with_workers: bool = False, drain: Drain | None = None
) -> ASGIApp:
    """The Chorus ASGI app for ``settings`` (read from the environment when omitted).

    ``with_workers`` runs the full profile's relay, fanout and cache projector
    in this process (``chorus serve --with-workers``). ``drain`` is the state
    the server starts when told to stop (:mod:`chorus.drain`): ``/readyz``
    then answers 503 and HTTP responses carry ``Connection: close``.

    Raises:
        ValueError: ``with_workers`` without the full profile's settings,
            ``CHORUS_SERVE_ROLE=gateway`` without them and a PostgreSQL database, or
            a ``CHORUS_PERSISTED_DOCUMENTS`` file that cannot be used.
    """
    settings = settings or Settings()
    tokens = bootstrap.token_verifier(settings)
    if with_workers:
        settings.require_full_profile("--with-workers")
    if settings.serve_role == "gateway":
        # A gateway hears of commits only through Redis pub/sub (chorus.graphql.roles).
        settings.require_postgres_full_profile("CHORUS_SERVE_ROLE=gateway")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with bootstrap.api_services(settings, with_workers=with_workers) as api:
            _log.info("serving /graphql as CHORUS_SERVE_ROLE=%s", settings.serve_role)
            app.state.services = api.services
            app.state.readiness = api.checks
            if isinstance(tokens, JWKSVerifier):
                # Fetched before traffic comes; /readyz says when it cannot be.
                app.state.readiness = [*api.checks, Check("jwks", tokens.keys.ensure)]
                try:
                    await tokens.keys.ensure()
                except RuntimeError as error:
                    _log.warning("identity provider keys not fetched yet: %s", error)
            yield

    graphql_app = _graphql_view(settings, tokens)
    app = Starlette(
        routes=_routes(RoleGate(graphql_app, settings.serve_role)),
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
    )
    app.state.graphql = graphql_app
    app.state.role = settings.serve_role
    app.state.metrics_token = settings.metrics_token
    app.state.drain = drain = drain or Drain()
    inner: ASGIApp = LeanRoute(app, graphql_app, app.state) if settings.lean_route else app
    asgi: ASGIApp = RequestId(CloseWhileDraining(_middleware(settings, inner), drain))
    trusted = settings.trusted_proxy_list
    return ForwardedClient(asgi, trusted) if trusted else asgi


def _graphql_view(settings: Settings, tokens: TokenVerifier | JWKSVerifier) -> ChorusGraphQL:
    """``/graphql`` over HTTP and WebSocket, with the request limits of ``settings``.

    Raises:
        ValueError: a ``CHORUS_PERSISTED_DOCUMENTS`` file that cannot be used.
    """
    registered = load_manifest(settings.persisted_documents) if settings.persisted_documents else {}
    return ChorusGraphQL(
        tokens,
        graphql_ide="graphiql",
        allow_queries_via_get=True,
        persisted=PersistedDocuments(registered, only_registered=settings.persisted_documents_only),
        max_subscriptions_per_connection=settings.max_ws_operations,
        # A socket that never sends connection_init holds its slot no longer
        # than a slow HTTP head may (strawberry's default is a minute).
        connection_init_wait_timeout=timedelta(seconds=settings.head_timeout_s),
        max_connections_per_user=settings.max_ws_connections_per_user,
        fast_field_execution=settings.fast_field_execution,
        compiled_execution=settings.compiled_execution,
        introspection_answers=settings.introspection_answers,
        role=settings.serve_role,
        allowed_origins=settings.cors_origin_list,
        operation_names=OperationNames(settings.metrics_operation_name_list),
        limits=RequestLimits(
            max_fragments=settings.max_fragments,
            max_fragment_spreads=settings.max_fragment_spreads,
            max_expanded_fields=settings.max_expanded_fields,
            max_query_cost=settings.max_query_cost,
            page_size_default=settings.page_size_default,
            page_size_max=settings.page_size_max,
            max_edit_entries=max(settings.max_media_per_add, settings.max_entries_per_edit),
            max_batch_entries=settings.max_batch_entries,
        ),
    )


class _Methods(set[str]):
    """A route's methods, iterated in order: Starlette joins them into a 405's ``Allow``,
    and a set's order is its strings' hashes', so two processes behind one proxy
    answered the same request with ``Allow: GET, POST`` and ``Allow: POST, GET``."""

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set.__iter__(self)))


def _ordered(route: Route) -> Route:
    if route.methods is not None:
        route.methods = _Methods(route.methods)
    return route


def _routes(graphql_app: ASGIApp) -> list[BaseRoute]:
    graphql = _ordered(Route("/graphql", graphql_app, methods=["GET", "POST"]))
    # Starlette adds HEAD to a GET route; the GraphQL view answers no HEAD,
    # so the 405's Allow would name a method that is itself refused.
    assert graphql.methods is not None
    graphql.methods.discard("HEAD")
    return [
        graphql,
        WebSocketRoute("/graphql", graphql_app),
        _ordered(Route("/healthz", healthz)),
        _ordered(Route("/readyz", health.readyz)),
        _ordered(Route("/metrics", health.metrics)),
        Mount(ide.ASSETS_URL, StaticFiles(directory=ide.ASSETS_PATH), name="graphiql"),
        Mount(
            ide.WEB_URL,
            ide.ProtectedFiles(
                directory=ide.WEB_PATH, html=True, policy=ide.WEB_CONTENT_SECURITY_POLICY
            ),
            name="web",
        ),
    ]


def _middleware(settings: Settings, app: ASGIApp) -> ASGIApp:
    """``app`` inside the body limit, CORS, the JSON access log and tracing ``settings`` ask for."""
    asgi: ASGIApp = BodySizeLimit(app, settings.max_body_bytes)
    if settings.cors_origin_list:
        asgi = JSONRefusingCORS(
            asgi,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=settings.cors_allow_header_list,
            expose_headers=[REQUEST_ID_HEADER],
            max_age=settings.cors_max_age_s,
        )
    if settings.log_format == "json":
        asgi = AccessLog(asgi)
    if settings.otlp_endpoint is not None or tracing.enabled():
        traced = OpenTelemetryMiddleware(
            asgi,
            # Spans per ASGI send/receive would double a read's spans for nothing.
            exclude_spans=["receive", "send"],
            excluded_urls=UNTRACED_PATHS,
        )
        asgi = HttpOnly(traced, asgi)
    return asgi


class JSONRefusingCORS(CORSMiddleware):
    """Starlette's CORS, with a refused preflight answered as every other refusal: JSON.

    Starlette answers ``Disallowed CORS origin`` as plain text; a client reading
    ``errors[0].extensions.code`` finds ``BAD_REQUEST`` and the same message.
    """

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        refusal = error_response(400, bytes(response.body).decode(), "BAD_REQUEST")
        for name, value in response.headers.items():
            if name.lower().startswith("access-control-") or name.lower() == "vary":
                refusal.headers[name] = value
        return refusal


UNTRACED_PATHS = r"/healthz$,/readyz$,/metrics$,/graphiql/,/web(/|$)"
"""URL patterns no span is made for (probes and scrapes every few seconds, static files).

OpenTelemetry's ``excluded_urls``: comma-separated regular expressions searched in the URL."""
