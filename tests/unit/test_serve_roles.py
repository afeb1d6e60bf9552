"""``CHORUS_SERVE_ROLE`` on ``/graphql``: what each role refuses (:mod:`chorus.graphql.roles`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cross_web import HTTPException
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from chorus.graphql.http.refusals import http_refusal
from chorus.graphql.roles import MISDIRECTED_CODE, RoleGate, socket_refusal
from chorus.graphql.schema.build import SubscriptionNeedsWebSocket
from chorus.middleware import RequestId
from chorus.settings.server import ServeRole

SUBSCRIPTION = "subscription { playlistEvents(playlistId: 1, sinceVersion: 0) { __typename } }"
MUTATION = 'mutation { createPlaylist(input: {title: "x"}) { __typename } }'
DENIAL = {"websocket.http.response": {}}


async def _inner(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers HTTP with 200 and accepts a WebSocket: whatever reaches it was let through."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"through"})
        return
    await receive()
    await send({"type": "websocket.accept"})


async def _call(
    role: ServeRole,
    kind: str,
    extensions: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> list[Message]:
    """What ``RoleGate(_inner, role)`` sends for one ``kind`` request to ``/graphql``; with
    ``headers``, behind :class:`RequestId` as in the app."""
    scope = {"type": kind, "path": "/graphql", "headers": headers or [], "extensions": extensions}
    incoming: list[Message] = [
        {"type": "websocket.connect"} if kind == "websocket" else {"type": "http.request"}
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    gate = RoleGate(_inner, role)
    await (gate if headers is None else RequestId(gate))(scope, receive, send)
    return sent


def _refusal(sent: list[Message], prefix: str) -> dict[str, Any]:
    """The status and the JSON error of a refusal sent as ``prefix``.start and ``.body``."""
    start, body = sent[0], sent[1]
    assert (start["type"], body["type"]) == (f"{prefix}.start", f"{prefix}.body")
    assert start["status"] == 421
    error: dict[str, Any] = json.loads(body["body"])["errors"][0]
    assert error["extensions"]["code"] == MISDIRECTED_CODE
    return error


async def test_api_answers_http_and_refuses_a_websocket_with_421() -> None:
    assert (await _call("api", "http", {}))[1]["body"] == b"through"
    error = _refusal(await _call("api", "websocket", DENIAL), "websocket.http.response")
    assert "gateway" in error["message"]
    # A server without denial responses: closed before the handshake completes (HTTP 403).
    assert [m["type"] for m in await _call("api", "websocket", {})] == ["websocket.close"]


@pytest.mark.parametrize(("role", "kind"), [("api", "websocket"), ("gateway", "http")])
async def test_a_refusal_carries_the_request_id(role: ServeRole, kind: str) -> None:
    # A WebSocket's handshake answer has it as any HTTP response does (docs/api.md).
    sent = await _call(role, kind, DENIAL, [(b"x-request-id", b"client-42")])
    assert sent[0]["status"] == 421
    assert (b"x-request-id", b"client-42") in sent[0]["headers"]


async def test_gateway_refuses_http_with_421_and_lets_websockets_through() -> None:
    error = _refusal(await _call("gateway", "http", {}), "http.response")
    assert "API process" in error["message"]
    assert await _call("gateway", "websocket", DENIAL) == [{"type": "websocket.accept"}]


async def test_all_lets_both_through() -> None:
    assert (await _call("all", "http", {}))[1]["body"] == b"through"
    assert await _call("all", "websocket", DENIAL) == [{"type": "websocket.accept"}]


@pytest.mark.parametrize(
    ("role", "query", "name", "refused"),
    [
        ("gateway", SUBSCRIPTION, None, False),
        ("gateway", MUTATION, None, True),
        ("gateway", "{ __typename }", None, True),
        ("gateway", f"{MUTATION} subscription S {{ __typename }}", "S", False),
        ("gateway", "not graphql", None, False),  # strawberry answers it
        ("all", MUTATION, None, False),
        ("api", MUTATION, None, False),
    ],
)
def test_a_gateway_socket_runs_subscriptions_only(
    role: ServeRole, query: str, name: str | None, refused: bool
) -> None:
    error = socket_refusal(role, query, name)
    assert (error is not None) is refused
    if error is not None:
        assert error.extensions == {"code": MISDIRECTED_CODE}


@pytest.mark.parametrize(
    ("role", "said"),
    [
        ("all", "subscriptions need a WebSocket: use graphql-transport-ws on this URL"),
        # An api process refuses the WebSocket itself (421): "this URL" would mislead.
        ("api", "use graphql-transport-ws on a gateway (CHORUS_SERVE_ROLE=gateway)"),
    ],
)
def test_a_subscription_over_http_is_told_where_to_open_its_websocket(
    role: ServeRole, said: str
) -> None:
    request = Request({"type": "http", "method": "POST", "path": "/graphql", "headers": []})
    cause = SubscriptionNeedsWebSocket()
    refused = HTTPException(400, cause.as_http_error_reason("POST"))
    refused.__cause__ = cause  # as strawberry's view raises it: `from` the schema's error
    response = http_refusal(request, refused, role)
    assert response.status_code == 400
    error = json.loads(bytes(response.body))["errors"][0]
    assert error["extensions"]["code"] == "BAD_REQUEST"
    assert said in error["message"]
