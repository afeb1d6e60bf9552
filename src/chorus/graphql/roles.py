"""What one ``chorus serve`` process answers on ``/graphql``: its role (``CHORUS_SERVE_ROLE``).

* ``all`` — HTTP queries and mutations and WebSocket subscriptions (one kind of process);
* ``api`` — HTTP only: a WebSocket handshake is refused with HTTP 421 and a JSON
  error (``MISDIRECTED_REQUEST``) saying to open it on a gateway;
* ``gateway`` — WebSocket subscriptions only: an HTTP request to ``/graphql``
  gets 421 with the same error shape saying to send it to an API process, and a
  query or mutation sent over the socket gets the protocol's ``error`` message
  with that code.

A gateway hears of commits the way every API process does in the full profile
(Kafka → ``chorus fanout`` → Redis pub/sub → its hub), so API processes and
gateways scale apart with the same ordering and catch-up (docs/deploying.md).
The health endpoints and ``/metrics`` answer in every role.
"""

from __future__ import annotations

from graphql import GraphQLError, OperationType, get_operation_ast, parse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from chorus.middleware import error_response
from chorus.settings.server import ServeRole

MISDIRECTED = 421
"""The HTTP status of a request this role does not answer (RFC 9110 §15.5.20)."""

MISDIRECTED_CODE = "MISDIRECTED_REQUEST"
"""The ``extensions.code`` of such a refusal."""

TO_GATEWAY = (
    "this process serves CHORUS_SERVE_ROLE=api: HTTP queries and mutations only; "
    "open WebSocket subscriptions on a gateway (CHORUS_SERVE_ROLE=gateway)"
)
TO_API = (
    "this process serves CHORUS_SERVE_ROLE=gateway: WebSocket subscriptions only; "
    "send queries and mutations to an API process (CHORUS_SERVE_ROLE=api or all)"
)


class RoleGate:
    """``/graphql`` as ``role`` answers it: the requests of another role refused with 421."""

    def __init__(self, app: ASGIApp, role: ServeRole) -> None:
        self.app = app
        self.role = role

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.role == "api" and scope["type"] == "websocket":
            await _refuse_socket(WebSocket(scope, receive, send))
            return
        if self.role == "gateway" and scope["type"] == "http":
            await error_response(MISDIRECTED, TO_API, MISDIRECTED_CODE)(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _refuse_socket(websocket: WebSocket) -> None:
    """421 with the JSON error where the server takes a denial response; else a bare 403."""
    await websocket.receive()  # websocket.connect
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            error_response(MISDIRECTED, TO_GATEWAY, MISDIRECTED_CODE)
        )
    else:
        await websocket.close(code=1008, reason="use a gateway for WebSocket subscriptions")


def socket_refusal(role: str, query: str, operation_name: object) -> GraphQLError | None:
    """Why a socket's ``subscribe`` of ``query`` may not run in ``role``; ``None``: it may.

    On a gateway only a subscription runs; a query or mutation is refused with
    :data:`MISDIRECTED_CODE`. A document that does not parse, or names no
    operation it holds, is left to strawberry's own answer.
    """
    if role != "gateway":
        return None
    try:
        document = parse(query)
    except GraphQLError:
        return None
    name = operation_name if isinstance(operation_name, str) else None
    chosen = get_operation_ast(document, name)
    if chosen is None or chosen.operation is OperationType.SUBSCRIPTION:
        return None
    return GraphQLError(TO_API, extensions={"code": MISDIRECTED_CODE})


__all__ = ["MISDIRECTED", "MISDIRECTED_CODE", "RoleGate", "socket_refusal"]
