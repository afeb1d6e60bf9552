"""Settings of the HTTP server: where it listens, its transport bounds, CORS, ``/metrics``.

Part of :class:`chorus.settings.Settings`.
"""

from __future__ import annotations

import re

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
:data:`chorus.graphql.metrics.OPERATION_NAME` (a test keeps them equal; not
imported, so reading settings does not load the schema)."""

MAX_METRICS_OPERATION_NAMES = 1_000
"""The most names ``CHORUS_METRICS_OPERATION_NAMES`` may list (each is a series per type)."""


MAX_TIMEOUT_S = 86_400.0
"""The longest transport timeout a setting takes (seconds: one day)."""


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


def _comma_list(value: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


class ServerSettings(BaseModel):
    """The HTTP and WebSocket server: bind address, request and connection bounds, CORS."""

    model_config = ConfigDict(frozen=True)

    host: str = Field("127.0.0.1", description="Address the HTTP server binds.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port of the HTTP server.")
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
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Seconds a connection has to send a whole request head, counted from "
        "connecting or from the previous response; then 408 and closed.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Seconds a request has to send its whole body once its head is in; "
        "then 408 and closed.",
    )
    keep_alive_timeout_s: float = Field(
        5.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Seconds an idle keep-alive HTTP connection stays open.",
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
        "authenticated caller sent them (docs/operations.md); unset: none.",
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
