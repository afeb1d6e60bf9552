"""ASGI middleware and responses outside GraphQL execution."""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chorus.logs import (
    ACCESS,
    ACCESS_LOGGER,
    REQUEST_ID,
    REQUEST_ID_HEADER,
    Access,
    request_id_from,
)
from chorus.metrics import count_error

access_log = logging.getLogger(ACCESS_LOGGER)

TRANSPORT_SEND = "chorus.transport_send"
"""The scope key of a WebSocket's ``send`` as the server gave it (:class:`RequestId` sets it)."""


if TYPE_CHECKING:
    from chorus.drain import Drain


class _AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped.

    A message may quote what the client sent, lone surrogates included
    (``"operationName": "\\ud800"``), which cannot be encoded as UTF-8:
    escaped, they are valid JSON all the same.
    """

    def render(self, content: object) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


def error_response(status_code: int, message: str, code: str) -> JSONResponse:
    """A request-level failure outside GraphQL execution, shaped like a GraphQL error;
    ``Cache-Control: no-store``, as every answer that is not a query's (docs/caching.md).
    Counted in ``chorus_graphql_errors_total``."""
    count_error(code)
    return _AsciiJSONResponse(
        {"errors": [{"message": message, "extensions": {"code": code}}]},
        status_code=status_code,
        headers={"Cache-Control": "no-store"},
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
        declared = None
        for name, value in scope["headers"]:  # the last, as dict(headers) kept it
            if name == b"content-length":
                declared = value
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        # Read the whole body before the app runs: a body found too large
        # halfway through cannot be refused once the app has begun to answer.
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            part = message.get("body", b"")
            parts.append(part)
            size += len(part)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"request body over {self.max_bytes} bytes"
        response = error_response(413, message, "PAYLOAD_TOO_LARGE")
        # The rest of the body is not read: the connection cannot carry another
        # request, and keeping it open would only wait out the keep-alive.
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


_ANSWER_STARTS = frozenset(
    {"http.response.start", "websocket.accept", "websocket.http.response.start"}
)
"""The messages that start an answer with headers: an HTTP response, a WebSocket's
acceptance, and a refused handshake's HTTP answer (the ASGI denial response)."""


_REQUEST_ID_NAME = REQUEST_ID_HEADER.lower().encode("latin-1")


class RequestId:
    """Gives every HTTP request and WebSocket connection its request id (:mod:`chorus.logs`).

    Sets :data:`~chorus.logs.REQUEST_ID` while the app serves the request (so
    every log line of it carries the id) and adds ``X-Request-Id`` to the
    HTTP response, and to the WebSocket handshake's answer, accepted or refused
    (421 in the ``api`` role, 403 for an origin not allowed). A socket closed
    before it is accepted on a server without the denial response extension
    gets the server's bare 403, which has no headers to add to.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        sent = None
        for name, value in scope["headers"]:  # the first, as Headers.get reads it
            if name == _REQUEST_ID_NAME:
                sent = value.decode("latin-1")
                break
        request_id = request_id_from(sent)
        header = (_REQUEST_ID_NAME, request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] in _ANSWER_STARTS:
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        if scope["type"] == "websocket":
            # The server's own send, for writes that skip the ASGI chain (no
            # middleware acts on a socket's messages after the handshake).
            scope.setdefault(TRANSPORT_SEND, send)
        token = REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


class AccessLog:
    """One ``chorus.access`` line per HTTP request once answered (``CHORUS_LOG_FORMAT=json``).

    The line's ``access`` fields: ``client`` (the peer's address, or the
    client's from ``X-Forwarded-For`` when the peer is one of
    ``CHORUS_TRUSTED_PROXIES``: :class:`ForwardedClient` rewrites it before this runs),
    ``method``, ``path`` (no query string), ``status`` (``0``:
    the client left before an answer), ``duration_ms`` (float, from the
    request's arrival to the end of its answer), ``user`` and ``operation``
    (noted by the GraphQL view, :func:`chorus.logs.note_access`; ``null``
    elsewhere). WebSocket connections get none: their operations are
    traced, and counted in ``/metrics``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        access = Access()

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        token = ACCESS.set(access)
        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            ACCESS.reset(token)
            duration_ms = round((time.perf_counter() - started) * 1000, 3)
            client = scope.get("client")
            fields = {
                "client": client[0] if client else None,
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": status,
                "duration_ms": duration_ms,
                "user": access.user,
                "operation": access.operation,
            }
            access_log.info(
                "%s %s %d %.1fms",
                fields["method"],
                fields["path"],
                status,
                duration_ms,
                # The id itself: a handler may format the line after the reset.
                extra={"access": fields, "request_id": REQUEST_ID.get() or "-"},
            )


class HttpOnly:
    """HTTP requests through ``http``, everything else (WebSockets, the lifespan) to ``other``.

    Keeps OpenTelemetry's server span off WebSocket connections: one span
    would last as long as the socket (hours) and be the parent of every
    read its subscriptions make.
    """

    def __init__(self, http: ASGIApp, other: ASGIApp) -> None:
        self.http = http
        self.other = self.app = other  # ``app``: what every other middleware here calls it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self.http if scope["type"] == "http" else self.other)(scope, receive, send)


class CloseWhileDraining:
    """Adds ``Connection: close`` to every HTTP response once ``drain`` started.

    While a stopping process drains (:mod:`chorus.drain`), each keep-alive
    connection then closes after its next response and the client (or the
    load balancer's pool) opens the next one elsewhere; without it every
    idle connection would be cut at the drain's end, when a request sent on
    one at that moment fails. uvicorn honours the header.
    """

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self.drain.draining:
                kept = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*kept, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_closing)


_PORT = re.compile(r"[0-9]{1,5}")
_LONGEST_ADDRESS = len("[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535")


def forwarded_address(item: str) -> str | None:
    """One ``X-Forwarded-For`` item as an IP address, normalised; ``None``: not one.

    Taken: ``203.0.113.7``, ``203.0.113.7:4711``, ``2001:db8::1``,
    ``[2001:db8::1]``, ``[2001:db8::1]:4711`` (the port is dropped). Not
    taken: host names, ``unknown``, obfuscated identifiers (RFC 7239's
    ``_hidden``), an IPv6 address with a zone (``fe80::1%eth0``: a zone is a
    name on the proxy's own host, and any text after ``%`` would be kept),
    anything longer than an address with a port, a port above 65535. An
    IPv4-mapped IPv6 address (``::ffff:203.0.113.7``) is its IPv4 address, as
    a dual-stack proxy reports an IPv4 client.
    """
    text = item.strip()
    if not text or len(text) > _LONGEST_ADDRESS or "%" in text:
        return None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest[0] == ":" and _is_port(rest[1:]))):
            return None
        text = host
        if ":" not in text:
            return None  # brackets hold IPv6 only
    elif text.count(":") == 1:
        text, _, port = text.partition(":")
        if not _is_port(port):
            return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _is_port(text: str) -> bool:
    return _PORT.fullmatch(text) is not None and int(text) <= 65_535


class ForwardedClient:
    """The client's address and scheme from a trusted proxy's ``X-Forwarded-*`` headers.

    Only for a TCP peer within ``trusted`` (:func:`chorus.settings.server.trusted_networks`:
    addresses and networks, or ``*``); uvicorn's own proxy-header middleware
    is off, as it took any text of ``X-Forwarded-For`` for the client's
    address (issue 30). Rewrites the scope's ``client`` and ``scheme`` in place,
    so uvicorn's access and WebSocket lines, :class:`AccessLog` and the app
    all see them:

    * ``X-Forwarded-For`` (every such header, joined): read from the right,
      the client is the first address that is not a trusted proxy (all of
      them trusted: the leftmost). An item that is not an IP address
      (:func:`forwarded_address`) stops the reading: a trusted proxy appends
      only addresses, so it and everything left of it are the client's own
      text, and the client is the address to its right — the nearest proxy's
      report, or the TCP peer when it is the rightmost item. The port is 0;
    * ``X-Forwarded-Proto``: ``http``, ``https``, ``ws`` or ``wss`` (the
      WebSocket's scheme follows); anything else is ignored.
    """

    def __init__(self, app: ASGIApp, trusted: Sequence[str]) -> None:
        self.app = app
        self._everyone = tuple(trusted) == ("*",)
        self._networks = [ipaddress.ip_network(t) for t in trusted if t != "*"]

    def trusts(self, address: str | None) -> bool:
        if self._everyone:
            return True
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            return False
        return any(ip in network for network in self._networks)

    def client_of(self, forwarded_for: str) -> str | None:
        """The client's address from ``forwarded_for``; ``None``: the TCP peer stays it."""
        nearest = None
        for item in reversed(forwarded_for.split(",")):
            address = forwarded_address(item)
            if address is None:
                break
            nearest = address
            if not self.trusts(address):
                break
        return nearest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and client and self.trusts(client[0]):
            proto, forwarded = None, []
            for name, value in scope["headers"]:
                if name == b"x-forwarded-proto":
                    proto = value.decode("latin-1").strip()
                elif name == b"x-forwarded-for":
                    forwarded.append(value.decode("latin-1"))
            if proto in ("http", "https", "ws", "wss"):
                secure = proto.endswith("s")
                if scope["type"] == "websocket":
                    scope["scheme"] = "wss" if secure else "ws"
                else:
                    scope["scheme"] = "https" if secure else "http"
            address = self.client_of(",".join(forwarded)) if forwarded else None
            if address is not None:
                scope["client"] = (address, 0)
        await self.app(scope, receive, send)
