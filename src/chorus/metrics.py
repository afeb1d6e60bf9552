"""Prometheus metrics of every Chorus process (``/metrics``; a worker's on ``--port``).

Defined once per process in the default registry. Counters and histograms are
updated where the work happens; gauges that describe state elsewhere (outbox
backlog, live subscribers) are set just before a scrape by whoever serves it.
Names follow the Prometheus conventions: ``chorus_`` prefix, base units
(seconds), ``_total`` for counters.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

REQUEST_SECONDS = Histogram(
    "chorus_graphql_request_seconds",
    "GraphQL operation latency, by operation type and name.",
    ["operation_type", "operation_name"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
SUBSCRIPTIONS = Counter(
    "chorus_graphql_subscriptions_total",
    "GraphQL subscriptions whose execution began (validated and costed; one its variables "
    "or its resolver then refuse, NOT_FOUND or a bad sinceVersion, included; one completed "
    "by its client before it began not), by operation name (not timed: they last).",
    ["operation_name"],
)
PLANNED = Counter(
    "chorus_graphql_planned_total",
    "GraphQL queries, mutations and subscription events (one per delivery group) "
    "executed, by how: plan (the kept document's plan answered), abandoned (the plan gave "
    "way to graphql-core: an error, a null in a non-null position; a mutation's command is "
    "not run again) or unplanned (graphql-core only), by operation name.",
    ["operation_name", "served_by"],
)
ERRORS = Counter(
    "chorus_graphql_errors_total",
    "GraphQL errors this process answered (each entry of an answer's errors list, over HTTP "
    "or a WebSocket; refusals before execution included, a mutation payload's userErrors "
    "not; a subscription event's for each subscriber it reaches), by extensions.code "
    "(OTHER: a code not in ERROR_CODES).",
    ["code"],
)
COMMITS = Counter("chorus_commits_total", "Playlist versions committed by this process.")
OWNER_QUEUE_WAITING = Gauge(
    "chorus_owner_queue_waiting",
    "Commands waiting in this process's owner queues (all playlists), not yet in a group.",
)
OWNER_QUEUE_REFUSED = Counter(
    "chorus_owner_queue_refused_total",
    "Commands refused RATE_LIMITED because a playlist's queue or a user's share was full.",
)
GROUP_COMMIT_SIZE = Histogram(
    "chorus_group_commit_commands",
    "Commands committed together in one transaction by an owner.",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
GROUP_COMMITS = Counter(
    "chorus_group_commits_total",
    "Owner groups committed (or answered without a write), by path: one_statement (read, "
    "decide, then one statement that writes only if the playlist did not move on; "
    "PostgreSQL without a pooler) or transaction (the playlist's row locked first).",
    ["path"],
)
GROUP_COMMIT_FALLBACKS = Counter(
    "chorus_group_commit_fallbacks_total",
    "Groups tried as one statement, then committed in a transaction instead, by reason: "
    "moved_on (another commit landed after the read), writes_rows (a command changes "
    "rows, not only adds), checkpoint (the group keeps a history checkpoint), refused "
    "(a command refused and none committed).",
    ["reason"],
)
for _path in ("one_statement", "transaction"):
    GROUP_COMMITS.labels(_path)  # shown at 0 before the first
for _reason in ("moved_on", "writes_rows", "checkpoint", "refused"):
    GROUP_COMMIT_FALLBACKS.labels(_reason)
OUTBOX_BACKLOG = Gauge("chorus_outbox_backlog", "Outbox events not yet published.")
OUTBOX_OLDEST_AGE = Gauge(
    "chorus_outbox_oldest_unpublished_age_seconds",
    "Age of the oldest unpublished outbox event (0 when none).",
)
RELAY_PUBLISHED = Counter(
    "chorus_relay_published_total", "Outbox events the relay published and stamped."
)
RELAY_BATCHES = Counter(
    "chorus_relay_batches_total",
    "Batches the relay published (each one claim and stamp); published / batches is the "
    "mean batch.",
)
PRESENCE_WRITES_LOST = Counter(
    "chorus_presence_writes_lost_total",
    "Presence writes (joins, heartbeats, leaves) lost to a store error; presence is "
    "best-effort and the next heartbeat writes the session again.",
)
RELAY_ERRORS = Counter("chorus_relay_errors_total", "Relay batches that failed and were retried.")
FANOUT_PUBLISHED = Counter(
    "chorus_fanout_published_total", "Events fanout published to Redis pub/sub."
)
FANOUT_DUPLICATES = Counter(
    "chorus_fanout_duplicates_total", "Events fanout dropped as already published."
)
PROJECTOR_APPLIED = Counter(
    "chorus_projector_snapshots_total", "Snapshots the cache projector wrote or removed."
)
CONSUMER_LAG = Gauge(
    "chorus_consumer_lag_records",
    "Records between a consumer's position and the partition end, summed over partitions.",
    ["group"],
)
CONSUMER_PARTITIONS = Gauge(
    "chorus_consumer_partitions",
    "Partitions of the events topic this process consumes now in the group (0: none "
    "assigned, as for a member beyond the partition count or during a rebalance).",
    ["group"],
)
FEED_ROWS_WRITTEN = Counter(
    "chorus_feed_rows_written_total", "Feed rows pushed to followers (repeats write none)."
)
LIVE_SUBSCRIBERS = Gauge("chorus_live_subscribers", "Subscription streams open in this process.")
DELIVERY_GROUPS = Gauge(
    "chorus_subscription_groups",
    "Delivery groups (same playlist, document, variables, operation name) with a subscriber.",
)
DELIVERY_GROUP_SOCKETS = Gauge(
    "chorus_subscription_group_sockets",
    "Subscriptions per delivery group: the largest group, and the mean over groups.",
    ["stat"],
)
DELIVERY_RENDERS = Gauge(
    "chorus_subscription_renders",
    "Live event executions since start: made (one per group and version, or per viewer "
    "when viewer-dependent), reused (handed to another subscriber of the group) and direct "
    "(of the reused, written to a parked subscriber's socket without waking its stream).",
    ["result"],
)
STREAM_CATCH_UPS = Counter(
    "chorus_subscription_catch_ups_total",
    "Subscription streams that read the mutation log from SQL, by why: subscribe (from "
    "the client's sinceVersion), gap (an event skipped ahead of the last sent), lost (a "
    "quiet stream whose version did not come after it saw the head ahead), overflow (a "
    "slow consumer's dropped queue, or the bus reconnected and events may be lost).",
    ["reason"],
)
for _reason in ("subscribe", "gap", "lost", "overflow"):
    STREAM_CATCH_UPS.labels(_reason)  # shown at 0 before the first
DELIVERY_SECONDS = Histogram(
    "chorus_subscription_delivery_seconds",
    "Commit to the moment a live event's frame was handed to its socket.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SNAPSHOT_READS = Counter(
    "chorus_snapshot_reads_total",
    "Reads of PUBLIC playlists by where they were served from (hit: Redis snapshot).",
    ["result"],
)
SNAPSHOT_FILLS = Counter(
    "chorus_snapshot_fills_total",
    "Snapshots written by the API after a read missed them (read-through).",
)
REDIS_BREAKER_OPEN = Gauge(
    "chorus_redis_breaker_open", "1 while the Redis circuit breaker sends reads to SQL."
)
RESPONSE_CACHE = Counter(
    "chorus_response_cache_total",
    "GraphQL queries by what the response cache did: hit, miss (computed), bypass "
    "(not cacheable: no token, an error, an uncacheable read, the cache off) and "
    "not_modified (a 304 to If-None-Match), by operation name.",
    ["operation_name", "result"],
)
RESPONSE_CACHE_SERVED_BYTES = Counter(
    "chorus_response_cache_served_bytes_total", "Response body bytes served from the cache."
)
RESPONSE_CACHE_ENTRIES = Gauge("chorus_response_cache_entries", "Answers in the response cache.")
RESPONSE_CACHE_BYTES = Gauge(
    "chorus_response_cache_bytes", "Bytes the response cache holds (bodies, keys, overhead)."
)
DB_READS = Counter(
    "chorus_db_reads_total",
    "Read transactions by the database that answered: primary, or replica (a read of a "
    "playlist the replica held at least as new as the newest version known; docs/deploying.md).",
    ["database"],
)
REPLICA_READS_DISCARDED = Counter(
    "chorus_db_replica_reads_discarded_total",
    "Replica reads thrown away and read again on the primary, by reason: stale (older than "
    "the newest version known), unavailable (no answer).",
    ["reason"],
)
REPLICA_LAG_SECONDS = Gauge(
    "chorus_db_replica_lag_seconds",
    "Age of the last transaction a replica replayed, 0 when it replayed all it received "
    "(measured at /readyz and /metrics; -1: no answer).",
    ["replica"],
)
REPLICA_LAG_BYTES = Gauge(
    "chorus_db_replica_lag_bytes",
    "WAL bytes between the primary's current position and what the replica replayed "
    "(measured at /readyz and /metrics; -1: no answer).",
    ["replica"],
)


_CHILDREN: dict[tuple[Any, ...], Any] = {}
"""(metric, label values) → the child ``labels()`` returned for them."""


def child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, the same object, kept: ``labels()`` takes a lock and checks
    its arguments on every call, and the GraphQL path asks per request. Bounded as the
    label values are (operation names by ``OperationNames``, the rest fixed sets)."""
    key = (metric, *values)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*values)
    return found


ERROR_CODES = frozenset(
    {
        # Request and execution errors (graphql/execution/error_masking.py, resolvers/
        # request_errors.py, the HTTP and transport refusals).
        "BAD_REQUEST",
        "BAD_USER_INPUT",
        "GRAPHQL_PARSE_FAILED",
        "GRAPHQL_VALIDATION_FAILED",
        "HEADERS_TOO_LARGE",
        "HISTORY_COMPACTED",
        "INTERNAL_SERVER_ERROR",
        "METHOD_NOT_ALLOWED",
        "MISDIRECTED_REQUEST",
        "PAYLOAD_TOO_LARGE",
        "PERSISTED_QUERY_NOT_ALLOWED",
        "PERSISTED_QUERY_NOT_FOUND",
        "PERSISTED_QUERY_NOT_SUPPORTED",
        "REQUEST_TIMEOUT",
        "SERVICE_UNAVAILABLE",
        "UNAUTHENTICATED",
        # The domain's (chorus.domain.errors.ErrorCode), which end a subscription stream.
        "ANCHOR_NOT_FOUND",
        "FORBIDDEN",
        "INVALID_INPUT",
        "LIMIT_EXCEEDED",
        "MEDIA_NOT_FOUND",
        "NOT_FOUND",
        "OPERATION_ID_REUSED",
        "RATE_LIMITED",
        "VERSION_CONFLICT",
    }
)
"""The ``code`` label values of :data:`ERRORS`: every code Chorus gives an error (a test
checks the sources); anything else is counted as ``OTHER``, so clients cannot grow the
label set."""


def count_error(code: object) -> None:
    """Count one error answered with ``extensions.code`` ``code`` in :data:`ERRORS`."""
    child(ERRORS, code if isinstance(code, str) and code in ERROR_CODES else "OTHER").inc()
