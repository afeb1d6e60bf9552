"""Readiness and Prometheus endpoints: ``/readyz`` and ``/metrics``.

``/healthz`` (in :mod:`chorus.app`) says the process is alive; ``/readyz``
says whether the servers it needs answer, naming the one that does not, so
a load balancer stops sending traffic while PostgreSQL, Redis or Kafka is
away and an operator sees which. Each dependency is one :class:`Check`; all
run concurrently, each bounded by :data:`PROBE_TIMEOUT_S`.

What the handlers read from ``request.app.state`` (set by the lifespan):

* ``metrics_token``: ``str | None`` — ``CHORUS_METRICS_TOKEN``: when set,
  ``/metrics`` answers only ``Authorization: Bearer <it>`` (set by the app
  factory);
* ``readiness``: ``Sequence[Check]`` — the checks ``/readyz`` runs;
* ``role``: ``str`` — ``CHORUS_SERVE_ROLE`` of ``chorus serve``, which a ready
  ``/readyz`` names (absent in workers);
* ``drain``: :class:`~chorus.drain.Drain` — once it started, ``/readyz``
  answers 503 ``draining`` without running a check (set by the app factory);
* ``services``: :class:`~chorus.resolvers.context.Services` — ``/metrics``
  reads the outbox backlog through ``services.db`` and live subscribers from
  ``services.hub`` just before rendering (gauges describing state elsewhere,
  see :mod:`chorus.metrics`).

Checks that keep a client (Kafka) are closed with :func:`close_checks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaClient
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from chorus.auth import InvalidToken, bearer_token
from chorus.db import outbox
from chorus.metrics import (
    DELIVERY_GROUP_SOCKETS,
    DELIVERY_GROUPS,
    DELIVERY_RENDERS,
    LIVE_SUBSCRIBERS,
    OUTBOX_BACKLOG,
    OUTBOX_OLDEST_AGE,
)

if TYPE_CHECKING:
    import redis.asyncio as redis

    from chorus.db.engine import Database
    from chorus.drain import Drain
    from chorus.resolvers.context import Services
    from chorus.subscriptions.hub import Hub

PROBE_TIMEOUT_S = 1.0
"""How long one dependency may take to answer before it counts as down."""

_REASON_CHARS = 160


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Check:
    """One dependency of readiness.

    Attributes:
        name: how ``/readyz`` names it (``postgresql``, ``sqlite``, ``redis``, ``kafka``,
            ``replica <host:port>``).
        probe: answers when the dependency does (a string: what it measured, shown
            after ``ok:``); raises (anything) when it does not.
        close: releases what the probe keeps open between calls.
        required: the process is not ready while it is down; a read replica is
            not required (while it is away, reads go to the primary).
    """

    name: str
    probe: Callable[[], Awaitable[str | None]]
    close: Callable[[], Awaitable[None]] = _nothing
    required: bool = True


def _reason(error: BaseException) -> str:
    """A one-line description of a failure, short enough for a probe log."""
    name = type(error).__name__
    message = " ".join(str(error).split())
    if not message:
        return name
    if message.startswith(name):  # aiokafka's errors name themselves
        return message[:_REASON_CHARS]
    return f"{name}: {message}"[:_REASON_CHARS]


_ABANDONED: set[asyncio.Future[str | None]] = set()
"""Probes past their time, cancelled and left to finish their clean-up (kept referenced)."""


def _forget(probe: asyncio.Future[str | None]) -> None:
    _ABANDONED.discard(probe)
    if not probe.cancelled():
        probe.exception()  # retrieved: a late failure is not logged as never retrieved


async def _outcome(check: Check, timeout_s: float) -> str:
    probe = asyncio.ensure_future(check.probe())
    await asyncio.wait({probe}, timeout=timeout_s)
    if not probe.done():
        # Cancelled, not waited for: a probe's clean-up can take seconds more (closing
        # a connection to a server that stopped answering), and the answer is already
        # known. asyncio.timeout waited for it: /readyz answered in 3 s, not 1.
        probe.cancel()
        _ABANDONED.add(probe)
        probe.add_done_callback(_forget)
        return f"down: no answer within {timeout_s:g}s"
    try:
        measured = probe.result()
    except TimeoutError:
        return f"down: no answer within {timeout_s:g}s"
    except Exception as error:  # a probe reports any failure as "down"
        return f"down: {_reason(error)}"
    return "ok" if measured is None else f"ok: {measured}"


async def run_checks(
    checks: Iterable[Check], timeout_s: float = PROBE_TIMEOUT_S
) -> tuple[bool, dict[str, str]]:
    """Run ``checks`` concurrently.

    Returns:
        ``(every required check ok, {name: "ok" | "ok: <measured>" | "down: <reason>"})``.
    """
    checks = list(checks)
    outcomes = await asyncio.gather(*(_outcome(c, timeout_s) for c in checks))
    results = {c.name: o for c, o in zip(checks, outcomes, strict=True)}
    ready = all(o.startswith("ok") for c, o in zip(checks, outcomes, strict=True) if c.required)
    return ready, results


async def close_checks(checks: Iterable[Check]) -> None:
    """Release what every check keeps open (on shutdown)."""
    for check in checks:
        await check.close()


class ReadOnlyPrimary(Exception):
    """The PostgreSQL primary answers but takes no writes."""


def database_check(db: Database) -> Check:
    """The database answers, named by dialect (``postgresql``, ``sqlite``): on SQLite
    ``SELECT 1`` on a fresh read transaction, on PostgreSQL as below.

    On PostgreSQL, a write transaction asks whether it may write: a primary made
    read-only (``default_transaction_read_only``) or a standby behind the URL after a
    failover answers reads but fails every edit (``SERVICE_UNAVAILABLE``), so it is
    ``down: ReadOnlyPrimary: …`` and the process leaves rotation until it writes again.
    """

    async def probe() -> None:
        if not db.is_postgres:
            async with db.read() as conn:
                await conn.execute(text("SELECT 1"))
            return
        async with db.write() as conn:
            read_only = await conn.scalar(text("SELECT current_setting('transaction_read_only')"))
        if read_only == "on":
            raise ReadOnlyPrimary("the database takes no writes (transaction_read_only is on)")

    return Check(db.dialect, probe)


def replica_checks(db: Database) -> list[Check]:
    """One check per read replica of ``db``, none required: its lag, or why it is down.

    ``ok: lag 0.012s, 1840 bytes`` (seconds since the last replayed commit, 0
    when it replayed all it received; WAL bytes behind the primary), or
    ``down: <reason>``: reads then go to the primary, so readiness holds.
    Each probe also sets the ``chorus_db_replica_lag_*`` gauges.
    """
    replicas = db.replicas
    if replicas is None:
        return []

    def probe_of(name: str) -> Callable[[], Awaitable[str | None]]:
        async def probe() -> str:
            lag = (await replicas.lag(db))[name]
            if isinstance(lag, BaseException):
                raise lag
            return f"lag {lag.seconds:.3f}s, {lag.bytes} bytes"

        return probe

    return [Check(f"replica {r.name}", probe_of(r.name), required=False) for r in replicas.members]


def redis_check(client: redis.Redis) -> Check:
    """``PING`` on the process's Redis client."""

    async def probe() -> None:
        await client.ping()

    return Check("redis", probe)


class _KafkaProbe:
    """A metadata request over one long-lived client.

    The client bootstraps on the first probe (it must be made inside the
    running loop) and is kept while the cluster answers; after a failure it
    is dropped, so the next probe bootstraps afresh from
    ``bootstrap_servers`` (a restarted or moved broker is found again).
    """

    def __init__(self, bootstrap_servers: str, timeout_s: float) -> None:
        self._servers = bootstrap_servers
        self._timeout_ms = max(int(timeout_s * 1000), 1)
        self._client: AIOKafkaClient | None = None
        self._lock = asyncio.Lock()  # concurrent scrapes share one client

    async def probe(self) -> None:
        async with self._lock:
            await self._probe()

    async def _probe(self) -> None:
        try:
            if self._client is None:
                self._client = AIOKafkaClient(
                    bootstrap_servers=self._servers,
                    client_id="chorus-readyz",
                    request_timeout_ms=self._timeout_ms,
                )
                await self._client.bootstrap()  # itself a metadata request
            else:
                await self._client.fetch_all_metadata()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await asyncio.shield(client.close())


def kafka_check(bootstrap_servers: str, timeout_s: float = PROBE_TIMEOUT_S) -> Check:
    """A cluster metadata request to ``bootstrap_servers`` (``host:port[,host:port]``).

    The check keeps a client between probes: close it with :func:`close_checks`.
    """
    kafka = _KafkaProbe(bootstrap_servers, timeout_s)
    return Check("kafka", kafka.probe, kafka.close)


async def readyz(request: Request) -> JSONResponse:
    """200 ``{"status": "ready", "checks": {...}, "role": "api"}`` when every check answers,
    else 503 (``role``: ``chorus serve``'s ``CHORUS_SERVE_ROLE``; workers give none).

    A failing check reads ``"down: <short reason>"``, e.g.
    ``{"status": "unavailable", "checks": {"postgresql": "ok", "redis": "down: …"}}``;
    503 ``{"status": "draining", "checks": {}}`` at once, without probing,
    once the process began to stop (``request.app.state.drain``, :mod:`chorus.drain`).
    """
    drain: Drain | None = getattr(request.app.state, "drain", None)
    if drain is not None and drain.draining:
        # Stopping (chorus.drain): out of rotation whatever the servers say.
        return JSONResponse({"status": "draining", "checks": {}}, status_code=503)
    checks: Sequence[Check] = getattr(request.app.state, "readiness", ())
    ready, results = await run_checks(checks)
    body: dict[str, object] = {"status": "ready" if ready else "unavailable", "checks": results}
    role: str | None = getattr(request.app.state, "role", None)
    if role is not None:  # an API process's CHORUS_SERVE_ROLE; workers have none
        body["role"] = role
    return JSONResponse(body, status_code=200 if ready else 503)


async def refresh_state_gauges(db: Database | None, hub: Hub | None) -> None:
    """Set the gauges that describe state held elsewhere: outbox backlog, live subscribers,
    the read replicas' lag.

    The backlog is one SQL query; when the database does not answer within
    :data:`PROBE_TIMEOUT_S` the outbox gauges keep their last values.
    """
    if hub is not None:
        LIVE_SUBSCRIBERS.set(hub.stream_count)
        sizes = hub.groups.sizes
        DELIVERY_GROUPS.set(len(sizes))
        DELIVERY_GROUP_SOCKETS.labels("max").set(sizes[0] if sizes else 0)
        DELIVERY_GROUP_SOCKETS.labels("mean").set(sum(sizes) / len(sizes) if sizes else 0)
        DELIVERY_RENDERS.labels("made").set(hub.renders.renders)
        DELIVERY_RENDERS.labels("reused").set(hub.renders.reuses)
        DELIVERY_RENDERS.labels("direct").set(hub.direct_writes)
    if db is None:
        return
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S), db.read() as conn:
            count, oldest_age_s = await outbox.backlog(conn, datetime.now(UTC))
    except Exception:  # a scrape must answer while the database is away
        return
    OUTBOX_BACKLOG.set(count)
    OUTBOX_OLDEST_AGE.set(oldest_age_s)
    if db.replicas is not None:
        with contextlib.suppress(Exception):  # the gauges say -1 for a replica away
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                await db.replicas.lag(db)


def metrics_allowed(request: Request) -> bool:
    """Whether the request may read ``/metrics``.

    ``request.app.state.metrics_token`` (``CHORUS_METRICS_TOKEN``) unset or
    ``None``: anyone may (keep ``/metrics`` behind the network edge); set:
    only a request with ``Authorization: Bearer <it>``, compared in
    constant time.
    """
    expected: str | None = getattr(request.app.state, "metrics_token", None)
    if expected is None:
        return True
    try:
        sent = bearer_token(request.headers.get("authorization"))
    except InvalidToken:
        return False
    return sent is not None and hmac.compare_digest(sent.encode(), expected.encode())


async def metrics(request: Request) -> Response:
    """The process's metrics in the Prometheus text format.

    401 ``UNAUTHENTICATED`` (with ``WWW-Authenticate: Bearer``) when
    :func:`metrics_allowed` says no; nothing is read then.
    """
    if not metrics_allowed(request):
        return JSONResponse(
            {
                "errors": [
                    {
                        "message": "/metrics needs 'Authorization: Bearer <CHORUS_METRICS_TOKEN>'",
                        "extensions": {"code": "UNAUTHENTICATED"},
                    }
                ]
            },
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:
        await refresh_state_gauges(None, None)
    else:
        await refresh_state_gauges(services.db, services.hub)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


__all__ = [
    "PROBE_TIMEOUT_S",
    "Check",
    "close_checks",
    "database_check",
    "kafka_check",
    "metrics",
    "metrics_allowed",
    "readyz",
    "redis_check",
    "refresh_state_gauges",
    "replica_checks",
    "run_checks",
]
