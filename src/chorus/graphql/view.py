"""The GraphQL endpoint: strawberry's ASGI view with Chorus's context and transports.

HTTP: the viewer comes from ``Authorization: Bearer``; bodies strawberry
cannot read get a GraphQL-shaped ``BAD_REQUEST``.

WebSocket (``graphql-transport-ws``): the token comes in the
``connection_init`` payload (``{"Authorization": "Bearer …"}``); a missing or
invalid one closes the socket with 4403. Each user may hold a bounded number
of connections per process, each a bounded number of operations. A stream
that fails after it started (access lost) ends with the protocol's ``error``
message, whose error carries ``extensions.code``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from cross_web import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.types.unset import UnsetType

from chorus.auth import InvalidToken, bearer_token, verify_token
from chorus.graphql.schema import build_schema
from chorus.middleware import error_response
from chorus.resolvers.context import RequestContext, Services


class TransportWSHandler(BaseGraphQLTransportWSHandler[RequestContext, None]):
    """``graphql-transport-ws`` with terminal stream errors sent as ``error``."""

    async def _send_result_stream(
        self, operation: Operation[RequestContext, None], result_source: Any
    ) -> None:
        async for result in result_source:
            if (
                isinstance(result, ExecutionResult)
                and not isinstance(result, PreExecutionError)
                and result.data is None
                and result.errors
            ):
                # The stream itself failed (NOT_FOUND, FORBIDDEN, …): the
                # protocol's `error` message ends the operation.
                await operation.send_initial_errors(result.errors)
                return
            # Pre-execution errors and ordinary events go strawberry's way.
            await super()._send_result_stream(operation, _once(result))

    async def shutdown(self) -> None:
        try:
            await super().shutdown()
        finally:
            view = self.view
            if isinstance(view, ChorusGraphQL):
                view.release(self.context)


async def _once(result: object) -> Any:
    yield result


class ChorusGraphQL(GraphQL[RequestContext, None]):
    """The ``/graphql`` endpoint; ``secret`` verifies bearer tokens (HS256)."""

    graphql_transport_ws_handler_class = TransportWSHandler

    def __init__(self, secret: str, *, max_connections_per_user: int = 20, **kwargs: Any) -> None:
        super().__init__(build_schema(), **kwargs)
        self._secret = secret
        self._max_connections_per_user = max_connections_per_user
        self.connections: Counter[str] = Counter()

    def viewer(self, header: object) -> tuple[str | None, str | None]:
        """``(user id, None)`` for a valid token, ``(None, reason)`` otherwise."""
        try:
            if header is not None and not isinstance(header, str):
                raise InvalidToken("use 'Authorization: Bearer <token>'")
            token = bearer_token(header)
            return (verify_token(self._secret, token) if token else None), None
        except InvalidToken as error:
            return None, str(error)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> RequestContext:
        services: Services = request.app.state.services
        if isinstance(request, WebSocket):
            return RequestContext(services, None, "send the token in connection_init")
        viewer, error = self.viewer(request.headers.get("authorization"))
        return RequestContext(services, viewer, error)

    async def on_ws_connect(self, context: RequestContext) -> UnsetType | dict[str, object] | None:
        params = context.connection_params or {}
        viewer, error = self.viewer(params.get("Authorization") or params.get("authorization"))
        if viewer is None:
            raise ConnectionRejectionError({"reason": error or "send a bearer token"})
        if self.connections[viewer] >= self._max_connections_per_user:
            raise ConnectionRejectionError({"reason": "too many connections"})
        self.connections[viewer] += 1
        context.viewer_id, context.auth_error = viewer, None
        context.renew_loaders()
        return await super().on_ws_connect(context)

    def release(self, context: RequestContext) -> None:
        """A WebSocket closed: give its viewer's connection back."""
        viewer = context.viewer_id
        if viewer is not None and self.connections[viewer] > 0:
            self.connections[viewer] -= 1
            if not self.connections[viewer]:
                del self.connections[viewer]

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


__all__ = ["ChorusGraphQL", "TransportWSHandler"]
