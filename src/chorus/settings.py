"""Settings, read once at start-up from ``CHORUS_*`` environment variables.

Every field below is one variable: ``database_url`` is ``CHORUS_DATABASE_URL``
and so on (README, Settings). Unset Redis and Kafka mean the in-process adapters of
the embedded profile. A bad value stops start-up with a message naming the
variable; nothing is guessed.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from strawberry.http.websocket_origin import normalize_allowed_origins

from chorus.auth import MIN_SECRET_LENGTH
from chorus.caches.snapshot import SNAPSHOT_PAGE_SIZE
from chorus.domain.follows import FeedLimits
from chorus.domain.limits import Limits
from chorus.events.wire import DEFAULT_TOPIC, FANOUT_GROUP, FEED_GROUP, PROJECTOR_GROUP

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./chorus-data/chorus.db"


FULL_PROFILE_SETTINGS = "set CHORUS_KAFKA_BOOTSTRAP_SERVERS and CHORUS_REDIS_URL"
"""What a command that needs the full profile tells a user of the embedded one."""

MAX_KEEP_DAYS = 36_500.0
"""The longest retention ``chorus compact`` accepts (100 years, in days)."""

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


def _comma_list(value: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


class Settings(BaseSettings):
    """Chorus configuration; frozen once read."""

    # allow_inf_nan: every float setting is finite ("inf" and "nan" parse as floats).
    model_config = SettingsConfigDict(
        env_prefix="CHORUS_", frozen=True, extra="ignore", allow_inf_nan=False
    )

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy async URL: sqlite+aiosqlite:///path or "
        "postgresql+asyncpg://user:password@host:port/db.",
    )
    data_dir: str = Field(
        "./chorus-data", description="Where the embedded profile keeps its files."
    )
    redis_url: str | None = Field(
        None,
        description="redis://host:port/db for pub/sub and snapshots; set together with "
        "kafka_bootstrap_servers (the full profile); unset: in-process.",
    )
    kafka_bootstrap_servers: str | None = Field(
        None, description="host:port[,host:port]; unset: the in-process bus."
    )
    kafka_topic: str = Field(
        DEFAULT_TOPIC, min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$"
    )
    kafka_topic_partitions: int = Field(
        12, ge=1, le=10_000, description="Partitions of the topic when Chorus creates it."
    )
    kafka_idempotent_producer: bool = Field(
        True,
        description="enable.idempotence on the relay's producer; Tansu (tests) needs false.",
    )
    kafka_fanout_group: str = Field(FANOUT_GROUP, min_length=1)
    kafka_projector_group: str = Field(PROJECTOR_GROUP, min_length=1)
    kafka_feed_group: str = Field(FEED_GROUP, min_length=1)
    snapshot_page_size: int = Field(
        SNAPSHOT_PAGE_SIZE, ge=1, description="Entries kept in a PUBLIC playlist's Redis snapshot."
    )
    redis_breaker_failures: int = Field(
        3, ge=1, description="Redis errors in a row that open the circuit breaker."
    )
    redis_breaker_reset_s: float = Field(
        2.0, gt=0, description="Seconds the breaker stays open before one trial call."
    )
    jwt_secret: str | None = Field(
        None, description="HS256 secret for bearer tokens; unset: generated in data_dir."
    )
    library_secret: str | None = Field(
        None,
        description="Key of the Liked Songs ids (HMAC of the user id); unset: generated in "
        "data_dir. Changing it gives every user a new, empty Liked Songs.",
    )
    feed_push_max_followers: int = Field(
        10_000,
        ge=1,
        description="A target with fewer followers is pushed (one feed row per follower); "
        "from this many on it is pulled at read time.",
    )
    max_follows_per_user: int = Field(
        1_000, ge=1, description="Playlists and users one user may follow."
    )
    feed_page_size_default: int = Field(20, ge=1, description="Feed items when `first` is unset.")
    feed_page_size_max: int = Field(50, ge=1, description="Largest `first` of viewer.feed.")
    feed_retention_days: int = Field(
        30,
        ge=1,
        description="Days a feed item is kept (pushed rows) and looked back (pulled targets).",
    )
    catalog_url: str | None = Field(
        None, description="Base URL of a separate catalog service; unset: the embedded catalog."
    )
    catalog_timeout_ms: int = Field(2_000, ge=1, description="Catalog request timeout (ms).")
    max_body_bytes: int = Field(
        1_048_576, ge=1_024, description="Largest accepted HTTP request body (bytes)."
    )
    rate_limit_per_minute: int | None = Field(
        None, ge=1, description="Mutations per user per minute (per process); unset: no limit."
    )
    group_commit: bool = Field(
        True,
        description="Commit a playlist's concurrent commands in groups, one transaction "
        "each, through its owner queue (docs/semantics.md); false: one transaction per command.",
    )
    owner_queue_size: int = Field(
        1024,
        ge=1,
        le=100_000,
        description="Commands that may wait for one playlist in one API process; one more "
        "is RATE_LIMITED with a retry hint.",
    )
    owner_queue_per_user: int = Field(
        256,
        ge=1,
        description="Of a playlist's waiting commands, how many may be one user's (at most "
        "owner_queue_size); one more is RATE_LIMITED.",
    )
    max_query_cost: int = Field(
        10_000,
        ge=1,
        description="Largest cost of one operation (page size × what each item selects, "
        "docs/api.md); over it: GRAPHQL_VALIDATION_FAILED.",
    )
    query_cost_per_minute: int | None = Field(
        None,
        ge=1,
        description="Query cost points per user per minute (per process), at least "
        "max_query_cost; over it: RATE_LIMITED; unset: no budget.",
    )
    max_fragments: int = Field(
        50, ge=1, description="Fragment definitions in one GraphQL document."
    )
    max_fragment_spreads: int = Field(
        100, ge=1, description="Fragment spreads (...Name) in one GraphQL document, as written."
    )
    max_expanded_fields: int = Field(
        10_000,
        ge=1,
        description="Fields one GraphQL document may expand to through its fragments "
        "(a fragment spread twice counts its fields twice).",
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
        description="Seconds a connection has to send a whole request head, counted from "
        "connecting or from the previous response; then 408 and closed.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds a request has to send its whole body once its head is in; "
        "then 408 and closed.",
    )
    keep_alive_timeout_s: float = Field(
        5.0, gt=0, description="Seconds an idle keep-alive HTTP connection stays open."
    )
    max_connections: int = Field(
        1_000,
        ge=1,
        description="HTTP and WebSocket connections open at once, per process; a request "
        "on one more gets 503.",
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
    host: str = Field("127.0.0.1", description="Address the HTTP server binds.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port of the HTTP server.")

    max_entries: int = Field(10_000, ge=1, description="Live entries per playlist.")
    max_media_per_add: int = Field(100, ge=1)
    max_entries_per_edit: int = Field(100, ge=1, description="Entry ids per move or remove.")
    page_size_default: int = Field(50, ge=1)
    page_size_max: int = Field(100, ge=1)
    max_subscriber_lag: int = Field(
        1_000, ge=1, description="Versions a live subscriber may fall behind before a resync."
    )
    max_ws_connections_per_user: int = Field(
        20, ge=1, description="Open WebSocket connections per user, per process."
    )
    max_ws_operations: int = Field(
        100, ge=1, description="Operations (subscriptions) per WebSocket connection."
    )
    log_keep_days: float | None = Field(
        None,
        gt=0,
        le=MAX_KEEP_DAYS,
        description="chorus compact: keep log versions newer than this.",
    )
    retry_window_hours: float = Field(
        24.0, gt=0, description="Operation ids stay replayable at least this long."
    )
    response_cache: bool = Field(
        True,
        description="Keep whole query answers by the exact versions they read "
        "(docs/caching.md); false: every query executes.",
    )
    response_cache_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=65_536,
        description="Memory the response cache may hold per process (bytes; LRU beyond).",
    )
    media_freshness_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="How long a cached answer holding catalog media is served (seconds); "
        "playlist content is checked by version, never by age.",
    )
    persisted_documents: str | None = Field(
        None,
        description="A JSON file of registered GraphQL documents (Apollo's persisted "
        "query manifest); clients may send only their sha256Hash.",
    )
    persisted_documents_only: bool = Field(
        False,
        description="Execute only the documents of CHORUS_PERSISTED_DOCUMENTS; "
        "automatic registration (APQ) is refused.",
    )

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str) -> str:
        try:
            backend = make_url(value).get_backend_name()
        except ArgumentError as exc:
            raise ValueError(f"not a database URL: {exc}") from None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError("use sqlite+aiosqlite:// or postgresql+asyncpg://")
        return value

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _host_ports(cls, value: str | None) -> str | None:
        if value is None:
            return None
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected host:port[,host:port], got {server.strip()!r}")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("use redis://host:port/db, rediss:// or unix://")
        return value

    @model_validator(mode="after")
    def _budget_fits_a_query(self) -> Settings:
        budget = self.query_cost_per_minute
        if budget is not None and budget < self.max_query_cost:
            raise ValueError(
                f"CHORUS_QUERY_COST_PER_MINUTE ({budget}) is below CHORUS_MAX_QUERY_COST "
                f"({self.max_query_cost}): the largest queries could never run"
            )
        return self

    @model_validator(mode="after")
    def _feed_page_sizes(self) -> Settings:
        if self.feed_page_size_default > self.feed_page_size_max:
            raise ValueError(
                f"CHORUS_FEED_PAGE_SIZE_DEFAULT ({self.feed_page_size_default}) is above "
                f"CHORUS_FEED_PAGE_SIZE_MAX ({self.feed_page_size_max})"
            )
        return self

    @model_validator(mode="after")
    def _full_profile_together(self) -> Settings:
        if (self.redis_url is None) != (self.kafka_bootstrap_servers is None):
            raise ValueError(
                "CHORUS_REDIS_URL and CHORUS_KAFKA_BOOTSTRAP_SERVERS go together: set both "
                "for the full profile, neither for the embedded one"
            )
        return self

    @model_validator(mode="after")
    def _registered_documents_named(self) -> Settings:
        if self.persisted_documents_only and not self.persisted_documents:
            raise ValueError(
                "CHORUS_PERSISTED_DOCUMENTS_ONLY needs CHORUS_PERSISTED_DOCUMENTS: the file "
                "of the documents that may run"
            )
        return self

    @model_validator(mode="after")
    def _user_share_fits(self) -> Settings:
        if self.owner_queue_per_user > self.owner_queue_size:
            raise ValueError(
                f"CHORUS_OWNER_QUEUE_PER_USER ({self.owner_queue_per_user}) is larger than "
                f"CHORUS_OWNER_QUEUE_SIZE ({self.owner_queue_size})"
            )
        return self

    @property
    def full_profile(self) -> bool:
        """Kafka and Redis carry events and snapshots (docs/architecture.md)."""
        return self.kafka_bootstrap_servers is not None

    def require_full_profile(self, what: str) -> tuple[str, str]:
        """``(Kafka bootstrap servers, Redis URL)`` of the full profile.

        Args:
            what: who needs them, for the message (``"chorus relay"``).

        Raises:
            ValueError: the embedded profile: "<what> needs the full profile: set …".
        """
        if self.kafka_bootstrap_servers is None or self.redis_url is None:
            raise ValueError(f"{what} needs the full profile: {FULL_PROFILE_SETTINGS}")
        return self.kafka_bootstrap_servers, self.redis_url

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

    @field_validator("jwt_secret", "library_secret")
    @classmethod
    def _long_secret(cls, value: str | None) -> str | None:
        if value is not None and len(value) < MIN_SECRET_LENGTH:
            raise ValueError(f"must be at least {MIN_SECRET_LENGTH} characters")
        return value

    @property
    def feed_limits(self) -> FeedLimits:
        return FeedLimits(
            push_max_followers=self.feed_push_max_followers,
            max_follows=self.max_follows_per_user,
            page_size_default=self.feed_page_size_default,
            page_size_max=self.feed_page_size_max,
            retention_days=self.feed_retention_days,
        )

    @property
    def limits(self) -> Limits:
        return Limits(
            max_entries=self.max_entries,
            max_media_per_add=self.max_media_per_add,
            max_entries_per_edit=self.max_entries_per_edit,
            page_size_default=self.page_size_default,
            page_size_max=self.page_size_max,
            max_subscriber_lag=self.max_subscriber_lag,
        )
