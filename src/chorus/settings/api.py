"""Settings of the API: what one request may ask, the catalog, the response cache, the feed.

Part of :class:`chorus.settings.Settings`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from chorus.domain.follows import FeedLimits
from chorus.domain.limits import Limits


class ApiSettings(BaseModel):
    """Limits of playlists, pages, queries and subscriptions; the catalog; caching; the feed."""

    model_config = ConfigDict(frozen=True)

    max_entries: int = Field(10_000, ge=1, description="Live entries per playlist.")
    max_media_per_add: int = Field(100, ge=1)
    max_entries_per_edit: int = Field(100, ge=1, description="Entry ids per move or remove.")
    page_size_default: int = Field(50, ge=1)
    page_size_max: int = Field(100, ge=1)
    max_subscriber_lag: int = Field(
        1_000, ge=1, description="Versions a live subscriber may fall behind before a resync."
    )
    catch_ups_per_user: int = Field(
        2,
        ge=1,
        le=1_000,
        description="Subscriptions of one user that catch up from the log at once, per "
        "process (page by page; the others wait their turn).",
    )
    presence_ttl_s: float = Field(
        30.0,
        ge=0.3,
        le=3_600,
        description="How long presence outlives its session (seconds): a socket's entry "
        "is refreshed every third of it and goes within this after its process dies; a "
        "setPresence declaration lasts this long unless repeated.",
    )
    max_batch_operations: int = Field(
        100, ge=1, le=1_000, description="Operations in one applyOperations batch."
    )
    max_batch_entries: int = Field(
        1_000,
        ge=1,
        le=100_000,
        description="Media ids and entry ids across all operations of one applyOperations "
        "batch, counted together; also the entries one revertPlaylist may change.",
    )
    # 10 × 20: at 2,000 subscriptions one user held /healthz for seconds (an attacker's pass).
    max_ws_connections_per_user: int = Field(
        10, ge=1, description="Open WebSocket connections per user, per process."
    )
    max_ws_operations: int = Field(
        20, ge=1, description="Operations (subscriptions) per WebSocket connection."
    )
    rate_limit_per_minute: int | None = Field(
        None, ge=1, description="Mutations per user per minute (per process); unset: no limit."
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
    catalog_url: str | None = Field(
        None, description="Base URL of a separate catalog service; unset: the embedded catalog."
    )
    catalog_timeout_ms: int = Field(
        2_000, ge=1, le=86_400_000, description="Catalog request timeout (ms, at most a day)."
    )

    @field_validator("catalog_url")
    @classmethod
    def _catalog_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme, _, rest = value.partition("://")
        if scheme.lower() not in ("http", "https") or not rest.split("/", 1)[0]:
            raise ValueError(
                "use http://host:port or https://host (the catalog service's base URL)"
            )
        return value

    response_cache: bool = Field(
        True,
        description="Keep whole query answers by the exact versions they read "
        "(docs/caching.md); false: every query executes.",
    )
    fast_field_execution: bool = Field(
        True,
        description="Read plain fields directly instead of through graphql-core's field "
        "execution (graphql/execution/executor.py); false: graphql-core executes every field.",
    )
    compiled_execution: bool = Field(
        True,
        description="Run a kept query document by its plan, built once, instead of "
        "graphql-core's execution (graphql/execution/planned.py); anything the plan "
        "cannot answer exactly still goes to graphql-core; false: no plans.",
    )
    lean_route: bool = Field(
        True,
        description="Send a response-cache hit on /graphql from raw ASGI, before Starlette "
        "and strawberry (graphql/http/lean.py); false: every request goes the view's way.",
    )
    introspection_answers: bool = Field(
        True,
        description="Keep the answers of introspection-only operations for the process's "
        "life (graphql/http/introspection.py); false: every introspection executes.",
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
    feed_push_max_followers: int = Field(
        10_000,
        ge=1,
        description="A target with this many followers or more is pulled at read time; "
        "a pulled one is pushed again (one feed row per follower) below 90 % of it.",
    )
    feed_switch_batch_rows: int = Field(
        2_000,
        ge=1,
        le=1_000_000,
        description="Feed rows one write transaction of a switch back to push writes, at most "
        "(the backfill of a target that fell below 90 % of the threshold).",
    )
    max_follows_per_user: int = Field(
        1_000, ge=1, description="Playlists and users one user may follow."
    )
    feed_live_weight_max: int = Field(
        20_000,
        ge=1,
        description="What one user's feedEvents subscriptions may weigh in one process, each "
        "weighing the playlists the user follows (at least 1): 20 subscriptions at the "
        "default follow limit; past it a new one is refused with LIMIT_EXCEEDED.",
    )
    feed_page_size_default: int = Field(20, ge=1, description="Feed items when `first` is unset.")
    feed_page_size_max: int = Field(50, ge=1, description="Largest `first` of viewer.feed.")
    feed_retention_days: int = Field(
        30,
        ge=1,
        le=36_500,
        description="Days a feed item is kept (pushed rows) and looked back (pulled targets); "
        "at most 36,500 (100 years).",
    )

    @property
    def feed_limits(self) -> FeedLimits:
        return FeedLimits(
            push_max_followers=self.feed_push_max_followers,
            max_follows=self.max_follows_per_user,
            page_size_default=self.feed_page_size_default,
            page_size_max=self.feed_page_size_max,
            retention_days=self.feed_retention_days,
            live_weight_max=self.feed_live_weight_max,
            switch_batch_rows=self.feed_switch_batch_rows,
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
            max_batch_operations=self.max_batch_operations,
            max_batch_entries=self.max_batch_entries,
        )
