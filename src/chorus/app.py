"""The ASGI application and its composition root.

:func:`create_app` wires nothing at import time: the lifespan builds the
database engines, the store and the catalog client from :class:`Settings`,
hands them to every request in a typed :class:`RequestContext`, and closes
them on shutdown.

Routes: ``/graphql`` (POST queries and mutations; GET opens GraphiQL),
``/healthz`` (the process is alive).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from cross_web import HTTPException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL

from chorus.auth import InvalidToken, bearer_token, load_or_create_secret, verify_token
from chorus.catalog.embedded import EmbeddedCatalog
from chorus.catalog.http import HttpCatalog
from chorus.catalog.protocol import Catalog
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.graphql.schema import build_schema
from chorus.resolvers.context import RequestContext, Services
from chorus.settings import Settings


def jwt_secret(settings: Settings) -> str:
    """The configured secret, or the one generated and kept in the data directory."""
    return settings.jwt_secret or load_or_create_secret(Path(settings.data_dir))


def build_catalog(settings: Settings, db: Database) -> Catalog:
    if settings.catalog_url:
        return HttpCatalog(settings.catalog_url, timeout_s=settings.catalog_timeout_ms / 1000)
    return EmbeddedCatalog(db)


class ChorusGraphQL(GraphQL[RequestContext, None]):
    """Strawberry's ASGI view with Chorus's context: the viewer from the bearer token."""

    def __init__(self, secret: str, **kwargs: Any) -> None:
        super().__init__(build_schema(), **kwargs)
        self._secret = secret

    def viewer(self, header: str | None) -> tuple[str | None, str | None]:
        """``(user id, None)`` for a valid token, ``(None, reason)`` otherwise."""
        try:
            token = bearer_token(header)
            return (verify_token(self._secret, token) if token else None), None
        except InvalidToken as error:
            return None, str(error)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> RequestContext:
        services: Services = request.app.state.services
        viewer, error = self.viewer(request.headers.get("authorization"))
        return RequestContext(services, viewer, error)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Strawberry answers a body it cannot read (not JSON, not an object,
        # no query) with plain text; clients expect a GraphQL error with a code.
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        try:
            response = await self.run(Request(scope, receive=receive))
        except HTTPException as error:
            response = error_response(error.status_code, error.reason, "BAD_REQUEST")
        await response(scope, receive, send)

    def decode_json(self, data: str | bytes) -> object:
        """The request body: a JSON object (or a list, which is a batch strawberry refuses)."""
        try:
            body = json.loads(data)
        except UnicodeDecodeError:
            raise HTTPException(400, "the request body is not UTF-8") from None
        if not isinstance(body, dict | list):
            raise HTTPException(400, "the request body must be a JSON object")
        return body


def error_response(status_code: int, message: str, code: str) -> JSONResponse:
    """A request-level failure outside GraphQL execution, shaped like a GraphQL error."""
    return JSONResponse(
        {"errors": [{"message": message, "extensions": {"code": code}}]},
        status_code=status_code,
    )


class BodySizeLimit:
    """Refuses HTTP bodies over ``max_bytes`` with 413, before they are parsed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        # Read the whole body before the app runs: a body found too large
        # halfway through cannot be refused once the app has begun to answer.
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"request body over {self.max_bytes} bytes"
        await error_response(413, message, "PAYLOAD_TOO_LARGE")(scope, receive, send)


async def healthz(_request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


def create_app(settings: Settings | None = None) -> ASGIApp:
    """The Chorus ASGI app for ``settings`` (read from the environment when omitted)."""
    settings = settings or Settings()
    secret = jwt_secret(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        catalog = build_catalog(settings, db)
        store = PlaylistStore(db, limits=settings.limits)
        app.state.services = Services(db=db, store=store, catalog=catalog, limits=settings.limits)
        try:
            yield
        finally:
            await catalog.aclose()
            await db.dispose()

    graphql_app = ChorusGraphQL(secret, graphql_ide="graphiql", allow_queries_via_get=False)
    app = Starlette(
        routes=[
            Route("/graphql", graphql_app, methods=["GET", "POST"]),
            Route("/healthz", healthz),
        ],
        lifespan=lifespan,
    )
    return BodySizeLimit(app, settings.max_body_bytes)
