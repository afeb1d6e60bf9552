"""The ``graphql-transport-ws`` side of ``/graphql``: Chorus's limits on strawberry's handler.

What a socket may send and how it ends (the close codes are those of
:mod:`chorus.graphql.endpoint`'s docstring): a frame that is not a JSON object
with a ``type`` closes with 4400; a ``subscribe`` needs a string id of at
most :data:`MAX_OPERATION_ID` characters and a payload with a string query;
a connection runs a bounded number of operations (``LIMIT_EXCEEDED``); a
user over the per-process connection limit is closed with 1013; the socket
closes with 4403 when the token it was opened with expires. A stream that
fails after it started ends with the protocol's ``error`` message; an event
whose field errors nulled its ``data`` is a ``next`` (``{"data": null,
"errors": […]}``, each error with its ``path``) and the stream goes on, as
is a query's or mutation's answer with field errors.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from graphql import GraphQLError
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.http.exceptions import (
    NonJsonMessageReceived,
    NonTextMessageReceived,
    WebSocketDisconnected,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    ConnectionInitMessage,
    Message,
    SubscribeMessage,
)
from strawberry.types.execution import ExecutionResult, PreExecutionError

from chorus.auth import Identity, Unavailable
from chorus.graphql.execution.delivery import CURRENT_SINK, EncodedData, next_frame
from chorus.graphql.execution.result_shape import is_request_error
from chorus.graphql.guards.documents import MAX_QUERY_CHARS
from chorus.graphql.guards.nesting import JSONRefused
from chorus.graphql.guards.persisted import PersistedDocuments, PersistedQueryError
from chorus.graphql.roles import socket_refusal
from chorus.graphql.websocket.socket_sink import SocketSink
from chorus.metrics import DELIVERY_SECONDS, count_error
from chorus.resolvers.context import RequestContext

_log = logging.getLogger(__name__)

MAX_OPERATION_ID = 128
"""Longest ``id`` of a ``subscribe`` message (characters).

The client's name for an operation on its socket, bounded because every
result echoes it; not one of the ids of
:data:`~chorus.domain.limits.MAX_ID_LENGTH`, though as long."""

TOO_MANY_CONNECTIONS = "too many connections"
"""The reason a socket over the per-user limit is closed with (1013)."""


NO_TOKEN = 'send {"Authorization": "Bearer <token>"} in the connection_init payload'
"""The close reason of a ``connection_init`` without a token (4403)."""

MAX_CLOSE_REASON_BYTES = 123
"""The longest close reason a WebSocket close frame carries (RFC 6455 §5.5)."""


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame may carry, on a character boundary."""
    encoded = text.encode()[:MAX_CLOSE_REASON_BYTES]
    return encoded.decode(errors="ignore")


@runtime_checkable
class ConnectionGate(Protocol):
    """What the handler asks of its view (:class:`~chorus.graphql.endpoint.ChorusGraphQL`)."""

    async def identify(self, header: object) -> tuple[Identity | None, str | None]: ...

    def at_connection_limit(self, user_id: str) -> bool: ...

    def release(self, context: RequestContext) -> None: ...


TWO_TOKENS = "connection_init holds Authorization and authorization: send the token once"


def authorization(params: dict[str, object]) -> object:
    """The token of a ``connection_init`` payload: its ``Authorization`` (or ``authorization``)."""
    return params.get("Authorization") or params.get("authorization")


class TransportWSHandler(BaseGraphQLTransportWSHandler[RequestContext, None]):
    """``graphql-transport-ws`` with terminal stream errors sent as ``error``."""

    async def handle(self) -> None:
        """Strawberry's frame loop, with the reason a frame is not JSON Chorus takes.

        Strawberry closes every such frame with "WebSocket message must be
        valid JSON"; nesting past the limit, a too long number, ``NaN`` or a
        repeated key are valid JSON or close to it, and HTTP names each.
        """
        self.on_request_accepted()
        try:
            try:
                async for message in self.websocket.iter_json():
                    await self.handle_message(message)  # type: ignore[arg-type]
            except NonTextMessageReceived:
                await self.handle_invalid_message("WebSocket message type must be text")
            except NonJsonMessageReceived as error:
                cause = error.__cause__
                phrase = cause.phrase if isinstance(cause, JSONRefused) else ""
                reason = f"WebSocket message {phrase or 'must be valid JSON'}"
                await self.handle_invalid_message(close_reason(reason))
        except WebSocketDisconnected:
            pass
        finally:
            await self.shutdown()

    async def handle_message(self, message: Message) -> None:
        # A frame of valid JSON that is not an object (``[1]``, ``null``) would
        # crash strawberry's dispatch; the protocol says: close with 4400.
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            await self.handle_invalid_message("a message must be a JSON object with a type")
            return
        await super().handle_message(message)

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        view = self.view
        payload = message.get("payload")
        if isinstance(view, ConnectionGate) and not self.connection_acknowledged:
            params = payload if isinstance(payload, dict) else {}
            if "Authorization" in params and "authorization" in params:
                # Two tokens, one taken silently: HTTP refuses two headers (400).
                await self.websocket.close(code=4400, reason=TWO_TOKENS)
                return
            identity, error = await view.identify(authorization(params))
            if identity is None:
                # Strawberry's own refusal says only "Forbidden"; over HTTP the
                # same token gets its reason, and so does the socket's close.
                # The provider's outage is 1013 (try again later), which
                # graphql-ws retries, not 4403, which signs a user out.
                code = 1013 if isinstance(error, Unavailable) else 4403
                await self.websocket.close(code=code, reason=close_reason(error or NO_TOKEN))
                return
            if view.at_connection_limit(identity.user_id):
                # 1013 (try again later), which graphql-ws retries with backoff:
                # in a reconnect storm the user's old sockets are still being
                # closed (or, half-open, wait for the ping to drop them), and
                # 4429 — graphql-ws's fatal "too many initialisation requests" —
                # left the UI without live updates until a reload. Not 4403
                # either: a client must not take this for a bad token and sign out.
                await self.websocket.close(code=1013, reason=TOO_MANY_CONNECTIONS)
                return
        await self._init_and_watch_expiry(message)

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        payload = message.get("payload")
        operation_id: object = message.get("id")
        if not isinstance(operation_id, str) or not 0 < len(operation_id) <= MAX_OPERATION_ID:
            # The protocol's id is a string; every result echoes it, so it is bounded.
            await self.handle_invalid_message(
                f"subscribe needs a string id of 1 to {MAX_OPERATION_ID} characters"
            )
            return
        reason = _payload_problem(payload)
        if reason is not None:
            await self.handle_invalid_message(reason)
            return
        refusal = self._document_refusal(payload)
        if refusal is not None:
            count_error((refusal.extensions or {}).get("code"))
            await self.send_message(
                {"id": operation_id, "type": "error", "payload": [refusal.formatted]}
            )
            return
        limit = self.max_subscriptions_per_connection
        if (
            limit is not None
            and self.connection_acknowledged
            and message["id"] not in self.operations
            and len(self.operations) >= limit
        ):
            # Strawberry refuses with a bare message; every Chorus error carries
            # extensions.code (DESIGN §5), so the refusal is ours.
            error = GraphQLError(
                f"at most {limit} operations may run on one connection",
                extensions={"code": "LIMIT_EXCEEDED"},
            )
            count_error("LIMIT_EXCEEDED")
            await self.send_message(
                {"id": message["id"], "type": "error", "payload": [error.formatted]}
            )
            return
        await super().handle_subscribe(message)

    def _document_refusal(self, payload: Any) -> GraphQLError | None:
        """Why a subscribe's document may not run here, as HTTP refuses it; ``None``: it may.

        Over-long documents (:data:`~chorus.graphql.guards.documents.MAX_QUERY_CHARS`)
        and, with ``CHORUS_PERSISTED_DOCUMENTS_ONLY``, documents that are not
        registered: the socket is no way around what ``POST /graphql`` refuses.
        On a gateway, a query or mutation (:func:`~chorus.graphql.roles.socket_refusal`).
        """
        query: str = payload["query"]
        if len(query) > MAX_QUERY_CHARS:
            return GraphQLError(
                f"the document is {len(query)} characters; the limit is {MAX_QUERY_CHARS}",
                extensions={"code": "GRAPHQL_PARSE_FAILED"},
            )
        persisted = getattr(self.view, "persisted", None)
        if isinstance(persisted, PersistedDocuments):
            try:
                resolved, _ = persisted.resolve(query, payload.get("extensions"))
            except PersistedQueryError as error:
                return GraphQLError(error.message, extensions={"code": error.code})
            query = resolved if isinstance(resolved, str) else query
        role = getattr(self.view, "role", "all")
        return socket_refusal(role, query, payload.get("operationName"))

    async def run_operation(self, operation: Operation[RequestContext, None]) -> None:
        # The operation's own task: its resolver finds the socket here
        # (graphql/websocket/socket_sink.py), for the versions the hub writes without it.
        CURRENT_SINK.set(
            SocketSink.of(
                operation.id,
                getattr(self.websocket, "ws", None),
                lambda: not operation.completed and self.operations.get(operation.id) is operation,
            )
        )
        await super().run_operation(operation)

    async def _send_result_stream(
        self, operation: Operation[RequestContext, None], result_source: Any
    ) -> None:
        async for result in result_source:
            if (
                isinstance(result, ExecutionResult)
                and not isinstance(result, PreExecutionError)
                and result.errors
                and is_request_error(result)
            ):
                # The stream itself failed (NOT_FOUND, FORBIDDEN, …: errors
                # with no path): the protocol's `error` message ends the
                # operation. An event whose field errors nulled its data
                # (each error with its path) was executed: it goes as a
                # `next` below, `{"data": null, "errors": …}`, and the
                # stream goes on (GraphQL spec §6.2.3.2, ExecuteSubscriptionEvent).
                await operation.send_initial_errors(result.errors)
                return
            data = getattr(result, "data", None)
            if isinstance(data, EncodedData) and not result.errors and not result.extensions:
                # Executed and encoded once for its group: only the id is this socket's.
                await self._send_encoded(operation, data)
                continue
            # Pre-execution errors and ordinary events go strawberry's way.
            await super()._send_result_stream(operation, _once(result))

    async def _send_encoded(
        self, operation: Operation[RequestContext, None], data: EncodedData
    ) -> None:
        if operation.completed:
            return
        frame = next_frame(operation.id, data.encoded)
        socket = getattr(self.websocket, "ws", None)
        if isinstance(socket, WebSocket):
            try:
                await socket.send_text(frame)
            except WebSocketDisconnect as error:
                raise WebSocketDisconnected from error
        else:  # another transport adapter: the same frame, encoded its way
            await self.send_message(json.loads(frame))
        DELIVERY_SECONDS.observe(max(0.0, time.time() - data.committed_at))

    async def _init_and_watch_expiry(self, message: ConnectionInitMessage) -> None:
        await super().handle_connection_init(message)
        expires_at = self.context.identity.expires_at
        if self.connection_acknowledged and expires_at is not None:
            self._expiry = asyncio.create_task(self._close_at(expires_at))

    async def _close_at(self, expires_at: datetime) -> None:
        """The token a connection was opened with expires: so does the connection."""
        await asyncio.sleep(max(0.0, (expires_at - datetime.now(UTC)).total_seconds()))
        await self.websocket.close(code=4403, reason="token expired")

    async def handle_task_exception(self, error: Exception) -> None:
        """A client that went away while its answer was being sent is not an error to log."""
        if isinstance(error, WebSocketDisconnected | WebSocketDisconnect):
            _log.debug("socket closed while an operation was sending: %r", error)
            return
        await super().handle_task_exception(error)

    async def shutdown(self) -> None:
        expiry: asyncio.Task[None] | None = getattr(self, "_expiry", None)
        if expiry is not None:
            expiry.cancel()
        try:
            await super().shutdown()
        finally:
            view = self.view
            if isinstance(view, ConnectionGate):
                view.release(self.context)


def _payload_problem(payload: object) -> str | None:
    """Why a ``subscribe`` payload cannot run (the 4400 close reason), or ``None``.

    ``variables`` and ``extensions`` are objects or absent (null), as over
    HTTP; ``operationName`` a string or absent.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
        return "subscribe needs a payload with a string query"
    if not isinstance(payload.get("variables"), dict | None):
        return "subscribe's variables must be a JSON object"
    if not isinstance(payload.get("extensions"), dict | None):
        return "subscribe's extensions must be a JSON object"
    if not isinstance(payload.get("operationName"), str | None):
        return "subscribe's operationName must be a string"
    return None


async def _once(result: object) -> Any:
    yield result


__all__ = [
    "MAX_OPERATION_ID",
    "NO_TOKEN",
    "TOO_MANY_CONNECTIONS",
    "ConnectionGate",
    "TransportWSHandler",
    "authorization",
]
