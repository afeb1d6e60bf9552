"""Settings of the HTTP server: where it listens, its transport bounds, CORS, ``/metrics``,
and what a load balancer in front needs (trusted proxies, drain, WebSocket pings).

Part of :class:`chorus.settings.Settings`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from strawberry.http.websocket_origin import normalize_allowed_origins

DEFAULT_CORS_ALLOW_HEADERS = (
    "Authorization,Content-Type,Accept,X-Request-Id,"
    "apollographql-client-name,apollographql-client-version,apollo-require-preflight,"
    "X-Apollo-Operation-Name,graphql-client-name,graphql-client-version"
)
"""Request headers a browser app may send: the ones GraphQL clients send.

Apollo Client names itself in ``apollographql-client-*`` and Apollo's CSRF
prevention asks for ``apollo-require-preflight`` or
``X-Apollo-Operation-Name``; urql and others send ``graphql-client-*``."""


MIN_METRICS_TOKEN_LENGTH = 16
"""The shortest ``CHORUS_METRICS_TOKEN`` accepted (characters)."""

OPERATION_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]{0,99}")
"""A name ``CHORUS_METRICS_OPERATION_NAMES`` may list: the rule of
:data:`chorus.graphql.execution.operation_metrics.OPERATION_NAME` (a test keeps them equal; not
imported, so reading settings does not load the schema)."""

MAX_METRICS_OPERATION_NAMES = 1_000
"""The most names ``CHORUS_METRICS_OPERATION_NAMES`` may list (each is a series per type)."""


ServeRole = Literal["all", "api", "gateway"]
"""What one ``chorus serve`` process answers on ``/graphql`` (``CHORUS_SERVE_ROLE``)."""


MAX_TIMEOUT_S = 86_400.0
"""The longest transport timeout a setting takes (seconds: one day)."""

MIN_TIMEOUT_S = 0.1
"""Shortest transport timeout (seconds): below it no real client gets a request through."""

MIN_PING_S = 0.25
"""Shortest interval between WebSocket pings (seconds): each costs a frame on every socket."""


def check_host(value: str) -> str:
    """``value`` if it can name a bind address (not empty, no blanks or control characters).

    An empty host would bind every interface (``0.0.0.0``) while the banner
    printed ``http://:port``: refused, never guessed.

    Raises:
        ValueError: otherwise, saying what to give.
    """
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(
            "must be an address to bind: 127.0.0.1, 0.0.0.0 (every interface), ::1 or a host name"
        )
    return value


MAX_STOP_S = 3_600.0
"""The longest ``CHORUS_DRAIN_S`` and ``CHORUS_SHUTDOWN_TIMEOUT_S`` (seconds)."""


def _comma_list(value: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def trusted_networks(value: str | None) -> tuple[str, ...]:
    """``CHORUS_TRUSTED_PROXIES`` as uvicorn's ``forwarded_allow_ips`` takes it.

    Each item is an IP address or a network in CIDR notation (``10.0.0.0/8``,
    ``fd00::/8``); ``*`` alone trusts every peer. An IPv4 item also gets its
    IPv4-mapped IPv6 form (``::ffff:10.0.0.0/104``): a server listening on
    ``::`` sees IPv4 peers that way.

    Returns:
        The normalised items, ``()`` for none (proxy headers ignored), ``("*",)``.

    Raises:
        ValueError: an item that is neither, host bits set in a network, ``*``
            beside other items.
    """
    items = _comma_list(value)
    if "*" in items:
        if len(items) > 1:
            raise ValueError("'*' (trust every peer) goes alone")
        return ("*",)
    networks: list[str] = []
    for item in items:
        try:
            network = ipaddress.ip_network(item, strict=True)
        except ValueError as error:
            if "has host bits set" in str(error):
                wide = ipaddress.ip_network(item, strict=False)
                raise ValueError(f"{item!r} has host bits set; did you mean {wide}?") from None
            raise ValueError(
                f"{item!r} is not an IP address or network (e.g. 10.0.0.1, 10.0.0.0/8, fd00::/8)"
            ) from None
        networks.append(str(network))
        if network.version == 4:
            mapped = ipaddress.ip_network(
                f"::ffff:{network.network_address}/{96 + network.prefixlen}"
            )
            networks.append(str(mapped))
    return tuple(dict.fromkeys(networks))


class ServerSettings(BaseModel):
    """The HTTP and WebSocket server: bind address, request and connection bounds, CORS."""

    model_config = ConfigDict(frozen=True)

    host: str = Field("127.0.0.1", description="Address the HTTP server binds.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port of the HTTP server.")
    serve_role: ServeRole = Field(
        "all",
        description="What chorus serve answers on /graphql: all (HTTP queries and mutations "
        "and WebSocket subscriptions), api (HTTP only; a WebSocket is refused with 421) or "
        "gateway (WebSocket subscriptions only; HTTP queries and mutations get 421; needs "
        "the full profile, docs/deploying.md). chorus serve --role overrides it.",
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1_024, description="Largest accepted HTTP request body (bytes)."
    )
    max_header_bytes: int = Field(
        32_768,
        ge=1_024,
        description="Largest HTTP request head: request line and headers (bytes); over it: 431.",
    )
    max_headers: int = Field(
        100, ge=1, description="Most header fields in one HTTP request; over it: 431."
    )
    head_timeout_s: float = Field(
        10.0,
        ge=MIN_TIMEOUT_S,
        le=MAX_TIMEOUT_S,
        description="Seconds a connection has to send a whole request head, counted from "
        "connecting or from its first bytes on a kept-alive connection; then 408 and closed.",
    )
    body_timeout_s: float = Field(
        30.0,
        ge=MIN_TIMEOUT_S,
        le=MAX_TIMEOUT_S,
        description="Seconds a request has to send its whole body once its head is in; "
        "then 408 and closed.",
    )
    send_timeout_s: float = Field(
        30.0,
        ge=MIN_TIMEOUT_S,
        le=MAX_TIMEOUT_S,
        description="Seconds a client may read nothing while an answer waits to be sent to "
        "it; then the connection is dropped (a slow reader that reads is not).",
    )
    keep_alive_timeout_s: float = Field(
        20.0,
        ge=MIN_TIMEOUT_S,
        le=MAX_TIMEOUT_S,
        description="Seconds an idle keep-alive HTTP connection stays open; longer than "
        "clients keep one (httpx 5 s, undici 4 s, aiohttp 15 s), so that the client, not "
        "Chorus, closes it.",
    )
    max_connections: int = Field(
        1_000,
        ge=1,
        description="HTTP and WebSocket connections open at once, per process; a request "
        "on one more gets 503.",
    )
    cors_origins: str | None = Field(
        None,
        description="Comma-separated browser origins allowed to call the API over HTTP "
        "and open WebSockets (e.g. http://localhost:5173; * for any); unset: no CORS "
        "headers, and WebSockets only from the API's own origin or without an Origin.",
    )
    cors_allow_headers: str = Field(
        DEFAULT_CORS_ALLOW_HEADERS,
        min_length=1,
        description="Comma-separated request headers a browser app on a CORS origin may send.",
    )
    cors_max_age_s: int = Field(
        600, ge=0, le=86_400, description="Seconds a browser may cache a CORS preflight answer."
    )
    metrics_operation_names: str | None = Field(
        None,
        description="Comma-separated GraphQL operation names that always get their own "
        "operation_name label in /metrics; other names are labelled only once an "
        "authenticated caller sent them (docs/full-profile.md); unset: none.",
    )
    metrics_token: str | None = Field(
        None,
        description="When set, GET /metrics needs 'Authorization: Bearer <this>' (at least "
        f"{MIN_METRICS_TOKEN_LENGTH} characters, no spaces); unset: /metrics is open, so keep "
        "it behind the network edge.",
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return check_host(value)

    trusted_proxies: str | None = Field(
        None,
        description="Comma-separated IP addresses and CIDR networks of the proxies or load "
        "balancers in front (e.g. 10.0.0.0/8,fd00::/8; * for any peer): only a request from "
        "one of them has its X-Forwarded-For (the client's address: the nearest untrusted one "
        "in the list) and X-Forwarded-Proto (http/https, ws/wss) honoured; unset: both "
        "headers are ignored and the client is the TCP peer.",
    )
    drain_s: float = Field(
        5.0,
        ge=0,
        le=MAX_STOP_S,
        description="Seconds chorus serve keeps serving after SIGTERM with /readyz at 503, so "
        "that the load balancer stops sending before the listener and the WebSockets close; "
        "0: close at once.",
    )
    shutdown_timeout_s: float = Field(
        10.0,
        ge=MIN_TIMEOUT_S,
        le=MAX_STOP_S,
        description="Seconds requests in flight get to finish once the drain is over (and "
        "the listener closed); then they are cancelled and the process exits.",
    )
    ws_ping_s: float = Field(
        20.0,
        ge=0,
        le=MAX_TIMEOUT_S,
        description="Seconds between the WebSocket ping frames the server sends on every "
        "socket (keeps load balancers' idle timers from cutting quiet subscriptions); "
        "0: no pings.",
    )
    ws_ping_timeout_s: float = Field(
        20.0,
        ge=MIN_TIMEOUT_S,
        le=MAX_TIMEOUT_S,
        description="Seconds a peer has to answer a ping with a pong; then its socket is "
        "closed (1011), so a dead peer goes within CHORUS_WS_PING_S + this.",
    )

    ws_per_message_deflate: bool = Field(
        False,
        description="Offer permessage-deflate (RFC 7692) to WebSocket clients that ask for "
        "it. Off by default, as in the ws library graphql-ws servers run on: each socket "
        "keeps its own zlib contexts (about 50 KiB) and compresses every frame itself, "
        "so one event to 5,000 sockets is 5,000 compressions (50-120 ms of CPU).",
    )

    @field_validator("ws_ping_s")
    @classmethod
    def _ws_ping_s(cls, value: float) -> float:
        if 0 < value < MIN_PING_S:
            raise ValueError(f"must be 0 (no pings) or at least {MIN_PING_S:g} seconds")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies(cls, value: str | None) -> str | None:
        trusted_networks(value)
        return value

    @property
    def trusted_proxy_list(self) -> tuple[str, ...]:
        """:func:`trusted_networks` of ``CHORUS_TRUSTED_PROXIES``."""
        return trusted_networks(self.trusted_proxies)

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: str | None) -> str | None:
        try:
            normalize_allowed_origins(_comma_list(value))
        except ValueError as error:
            raise ValueError(str(error).replace("allowed_origins", "the list")) from None
        return value

    @property
    def cors_origin_list(self) -> tuple[str, ...]:
        """The CORS origins as browsers send them (lowercase, no default port).

        The one origin policy: HTTP's CORS answers and the WebSocket handshake's
        origin check both read it.
        """
        return tuple(sorted(normalize_allowed_origins(_comma_list(self.cors_origins))))

    @property
    def cors_allow_header_list(self) -> tuple[str, ...]:
        return _comma_list(self.cors_allow_headers)

    @field_validator("metrics_operation_names")
    @classmethod
    def _operation_names(cls, value: str | None) -> str | None:
        names = _comma_list(value)
        bad = [n for n in names if not OPERATION_NAME.fullmatch(n)]
        if bad:
            raise ValueError(
                f"{bad[0]!r} is not a GraphQL operation name (letters, digits and _, "
                "not starting with a digit, at most 100 characters)"
            )
        if len(set(names)) > MAX_METRICS_OPERATION_NAMES:
            raise ValueError(f"at most {MAX_METRICS_OPERATION_NAMES} names")
        return value

    @property
    def metrics_operation_name_list(self) -> tuple[str, ...]:
        return _comma_list(self.metrics_operation_names)

    @field_validator("metrics_token")
    @classmethod
    def _metrics_token(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if len(value) < MIN_METRICS_TOKEN_LENGTH:
            raise ValueError(f"must be at least {MIN_METRICS_TOKEN_LENGTH} characters")
        if not value.isascii() or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("must be printable ASCII without spaces (it goes in a header)")
        return value
