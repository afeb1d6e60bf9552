"""The composition root: every service and worker of every command is built here.

Nothing connects to a server at import time. Each builder takes the frozen
:class:`~chorus.settings.Settings` and returns one part; the context managers
start what runs in the background and stop it (for certain, with
:func:`~chorus.resilience.tasks.cancel_and_wait`) when their block ends:

* :func:`api_services` — what ``chorus serve`` hands every request: the
  database, the store, the catalog, the event bus and hub, the snapshot cache
  (full profile) and the in-process relay (embedded profile) or the workers
  (``--with-workers``), plus the readiness checks.
* :func:`opened_database` and :func:`store` — what the other CLI commands need.
* :func:`traced` — the OpenTelemetry tracer provider and its OTLP exporter,
  when ``CHORUS_OTLP_ENDPOINT`` is set (:mod:`chorus.tracing`).

The event path of each profile — the commit hooks, the buses and relays, and
the full profile's workers (:func:`chorus.wiring.running_workers`, for
``chorus relay`` / ``fanout`` / ``project-cache`` / ``feed``) — is the root's
other module, :mod:`chorus.wiring`. docs/architecture.md draws how these
parts connect.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from chorus import __version__, health, tracing, wiring
from chorus.auth import ClaimRules, TokenVerifier, load_or_create_secret
from chorus.caches.heads import Heads, LocalHeads, SharedHeads
from chorus.caches.reader import SnapshotCache
from chorus.caches.responses import ResponseCache
from chorus.catalog.embedded import EmbeddedCatalog
from chorus.catalog.http import HttpCatalog
from chorus.catalog.protocol import Catalog
from chorus.db.engine import Database, postgres_engine
from chorus.db.follows import FollowStore
from chorus.db.replicas import Replica, Replicas
from chorus.db.store import PlaylistStore
from chorus.jwks import JWKSKeys, JWKSVerifier
from chorus.resilience.breaker import CircuitBreaker
from chorus.resolvers.context import Services
from chorus.resolvers.durations import Durations
from chorus.resolvers.ratelimit import RateLimiter, Unlimited
from chorus.settings import Settings
from chorus.subscriptions.hub import Hub


def jwt_secret(settings: Settings) -> str:
    """The configured secret, or the one generated and kept in ``CHORUS_DATA_DIR``.

    Raises:
        SecretUnusable: the kept secret is too short or unreadable, or the
            data directory is not a writable directory
            (:func:`~chorus.auth.load_or_create_secret`).
    """
    return settings.jwt_secret or load_or_create_secret(Path(settings.data_dir))


def claim_rules(settings: Settings) -> ClaimRules:
    """The user claim, issuer and audience of ``CHORUS_JWT_*``."""
    return ClaimRules(settings.jwt_user_claim, settings.jwt_issuer, settings.jwt_audience)


def token_verifier(settings: Settings) -> TokenVerifier | JWKSVerifier:
    """The identity provider's verifier when ``CHORUS_JWKS_URL`` is set, else HS256's.

    Raises:
        SecretUnusable: as :func:`jwt_secret` (HS256 only).
    """
    if settings.jwks_url is None:
        return TokenVerifier(jwt_secret(settings), rules=claim_rules(settings))
    keys = JWKSKeys(
        settings.jwks_url,
        cache_s=settings.jwks_cache_s,
        refetch_interval_s=settings.jwks_refetch_interval_s,
        timeout_s=settings.jwks_timeout_ms / 1000,
    )
    return JWKSVerifier(keys, settings.jwt_algorithm_set, claim_rules(settings))


def library_secret(settings: Settings) -> bytes:
    """The key of Liked Songs ids: configured, or generated and kept in ``CHORUS_DATA_DIR``."""
    secret = settings.library_secret or load_or_create_secret(
        Path(settings.data_dir), "library-secret"
    )
    return secret.encode()


def database(settings: Settings) -> Database:
    """The engines for ``CHORUS_DATABASE_URL`` and its replicas (connect lazily; the caller
    disposes), through a transaction pooler if ``CHORUS_DATABASE_POOLER`` says so."""
    return Database(
        settings.database_url,
        pool_size=settings.database_pool_size,
        replicas=replicas(settings),
        pooler=settings.behind_transaction_pooler,
        direct_url=settings.database_direct_url,
    )


def replicas(settings: Settings) -> Replicas | None:
    """The read replicas of ``CHORUS_DATABASE_REPLICA_URLS``, each with a breaker that one
    failure opens for ``CHORUS_DATABASE_REPLICA_BREAKER_S``; ``None``: none."""
    urls = settings.database_replica_url_list
    if not urls:
        return None
    pooler = settings.behind_transaction_pooler
    return Replicas(
        [
            Replica(
                postgres_engine(url, pool_size=settings.database_pool_size, pooler=pooler),
                CircuitBreaker(failures=1, reset_s=settings.database_replica_breaker_s),
            )
            for url in urls
        ]
    )


@asynccontextmanager
async def opened_database(settings: Settings) -> AsyncIterator[Database]:
    """:func:`database`, disposed when the block ends."""
    db = database(settings)
    try:
        yield db
    finally:
        await db.dispose()


def embedded_catalog(db: Database) -> EmbeddedCatalog:
    """The catalog kept in ``db`` (``catalog serve`` serves it, ``import mpd`` adds to it)."""
    return EmbeddedCatalog(db)


def catalog(settings: Settings, db: Database) -> Catalog:
    """The catalog service at ``CHORUS_CATALOG_URL``, else the embedded one in ``db``."""
    if settings.catalog_url:
        return HttpCatalog(settings.catalog_url, timeout_s=settings.catalog_timeout_ms / 1000)
    return embedded_catalog(db)


def store(
    settings: Settings, db: Database, on_commit: Callable[[str, int], None] | None = None
) -> PlaylistStore:
    """The unit of work over ``db`` with the configured limits and owner queues."""
    return PlaylistStore(
        db,
        limits=settings.limits,
        on_commit=on_commit,
        group_commit=settings.group_commit,
        queue_size=settings.owner_queue_size,
        queue_per_user=settings.owner_queue_per_user,
        library_secret=library_secret(settings),
    )


def response_cache(settings: Settings) -> ResponseCache | None:
    """The response cache of ``CHORUS_RESPONSE_CACHE*``, or ``None`` when it is off."""
    if not settings.response_cache:
        return None
    return ResponseCache(
        settings.response_cache_max_bytes, media_freshness_s=settings.media_freshness_s
    )


def heads(snapshots: SnapshotCache | None) -> Heads:
    """Redis's heads where there is a snapshot cache (full profile), else this process's."""
    return SharedHeads(snapshots) if snapshots is not None else LocalHeads()


SERVICE_NAME = "chorus"
"""The ``service.name`` of every Chorus process's spans; ``chorus.role`` tells them apart."""


@contextmanager
def traced(settings: Settings, role: str) -> Iterator[TracerProvider | None]:
    """Install the tracer provider exporting to ``CHORUS_OTLP_ENDPOINT`` for this block.

    Spans are batched (:class:`BatchSpanProcessor`: a background thread sends
    them every 5 s or 512 spans) as OTLP/HTTP protobuf to
    ``<endpoint>/v1/traces``; the block's end flushes and shuts it down.
    The resource: ``service.name`` ``chorus``, ``service.version``,
    ``chorus.role`` (``api``, ``relay``, ``fanout`` …) and the process id.

    Yields:
        The provider; ``None`` when no endpoint is set, or a provider is
        installed already (a test's, or the API's for ``--with-workers``),
        and then nothing is installed: spans stay no-ops, or go where they went.
    """
    url = settings.otlp_traces_url
    if url is None or tracing.enabled():
        yield None
        return
    resource = Resource.create(
        {
            "service.name": SERVICE_NAME,
            "service.version": __version__,
            "chorus.role": role,
            "process.pid": os.getpid(),
        }
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    trace.set_tracer_provider(provider)
    try:
        yield provider
    finally:
        provider.shutdown()  # sends what is still batched


@dataclass(frozen=True, slots=True)
class Api:
    """What an API process runs on.

    Attributes:
        services: handed to every request (:class:`~chorus.resolvers.context.Services`).
        checks: what ``/readyz`` asks: the database, and Redis and Kafka in the full profile.
    """

    services: Services
    checks: list[health.Check]


@asynccontextmanager
async def api_services(settings: Settings, *, with_workers: bool = False) -> AsyncIterator[Api]:
    """Build and start everything an API process needs; stop it all when the block ends.

    Args:
        with_workers: run the full profile's workers in this process too.

    Raises:
        ValueError: ``with_workers`` without the full profile's settings.
    """
    if with_workers:
        settings.require_full_profile("--with-workers")
    db = database(settings)
    media = catalog(settings, db)
    # A limit that is off (unset or 0) is an Unlimited limiter, not a missing one.
    per_minute, cost_per_minute = settings.rate_limit_per_minute, settings.query_cost_per_minute
    limiter = RateLimiter(per_minute) if per_minute else Unlimited()
    budget = RateLimiter(cost_per_minute) if cost_per_minute else Unlimited()
    checks = [health.database_check(db)]
    try:
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(traced(settings, "api"))
            answers = response_cache(settings)
            versions: Heads | None
            if settings.full_profile:
                events = await stack.enter_async_context(
                    wiring.full_events(settings, db, with_workers)
                )
                versions = heads(events.snapshots) if answers is not None else None
            else:
                versions = LocalHeads() if answers is not None else None
                events = await stack.enter_async_context(
                    wiring.embedded_events(settings, db, versions)
                )
            checks += events.checks
            checks += health.replica_checks(db)
            if db.replicas is not None and events.snapshots is not None:
                db.replicas.consult(wiring.shared_floors(events.snapshots))
            services = Services(
                db=db,
                store=store(
                    settings,
                    db,
                    wiring.CommitHooks(events.relay, events.snapshots, versions, db.replicas),
                ),
                follows=FollowStore(db, settings.feed_limits),
                feed_limits=settings.feed_limits,
                catalog=media,
                limits=settings.limits,
                hub=Hub(
                    events.bus,
                    queue_size=settings.max_subscriber_lag,
                    catch_ups_per_viewer=settings.catch_ups_per_user,
                ),
                rate_limiter=limiter,
                query_budget=budget,
                snapshots=events.snapshots,
                responses=answers,
                heads=versions,
                durations=Durations(ttl_s=settings.media_freshness_s),
                presence=events.presence,
            )
            try:
                yield Api(services, checks)
            finally:
                await health.close_checks(checks)
    finally:
        await media.aclose()
        await db.dispose()
