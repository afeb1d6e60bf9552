"""The outbox relay: unpublished outbox rows → a publisher, then stamped published.

It drains in batches until the outbox is empty, then sleeps until a commit
:meth:`OutboxRelay.notify`\\ s it (same process) or ``poll_interval_s``
passes (another process committed). Delivery is at least once: a batch's
stamp commits only after the publisher returned (for Kafka: every record
acknowledged with ``acks=all``; on PostgreSQL the claim stamps it inside the
relay's transaction, :func:`chorus.db.outbox.claim_and_stamp`), so a crash in
between publishes it again, and consumers dedupe by ``(playlist_id, version)``
(docs/full-profile.md).

Several relays may run at once: :func:`chorus.db.outbox.claim_and_stamp` gives
each playlist's unpublished events to one relay at a time, so a playlist's events
are published in version order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from aiokafka.errors import KafkaError
from opentelemetry.trace import SpanKind

from chorus.db import outbox
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.domain.changes import PlaylistEvent
from chorus.metrics import (
    OUTBOX_BACKLOG,
    OUTBOX_OLDEST_AGE,
    RELAY_BATCHES,
    RELAY_ERRORS,
    RELAY_PUBLISHED,
)
from chorus.resilience.backoff import Backoff
from chorus.tracing import links_to, tracer

log = logging.getLogger("chorus.relay")

BACKLOG_REPORT_S = 5.0
"""How often the relay sets the outbox gauges (seconds)."""


class Publisher(Protocol):
    """Where the relay sends events: Kafka (:class:`~chorus.events.kafka.KafkaPublisher`)
    or an in-process bus (:class:`~chorus.subscriptions.bus.BusPublisher`)."""

    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        """Publish ``events`` in order; return only when all were taken.

        ``traceparents``: the trace context each event was committed in
        (:mod:`chorus.tracing`; ``None`` for an untraced commit, empty when
        none is known), for publishers that carry it on.

        Raises:
            Exception: any failure; the batch stays unpublished and is retried.
        """
        ...


class OutboxRelay:
    """Publishes committed events in per-playlist version order.

    Args:
        db: where the outbox is.
        publisher: where events go.
        batch_size: rows claimed per transaction.
        poll_interval_s: the longest sleep between looks at an empty outbox.
        retry_max_s: the longest wait after a failed batch (backoff doubles up to it).
    """

    def __init__(
        self,
        db: Database,
        publisher: Publisher,
        *,
        batch_size: int = 200,
        poll_interval_s: float = 0.5,
        retry_max_s: float = 5.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._db = db
        self._publisher = publisher
        self._batch_size = batch_size
        self._poll_interval_s = poll_interval_s
        self._retry_max_s = retry_max_s
        self._clock = clock
        self._wake = asyncio.Event()
        self.published = 0

    def notify(self, playlist_id: str = "", version: int = 0) -> None:
        """A commit happened: look at the outbox now (a store's ``on_commit``)."""
        self._wake.set()

    async def drain_once(self) -> int:
        """Publish one batch and stamp it; how many events it held.

        Raises:
            Exception: whatever the publisher or the database raised; nothing
                was stamped.
        """
        if self._db.is_postgres:
            async with self._db.write() as conn:
                # Stamped in the statement that claims them: seen when this commits,
                # after the publisher took them; a failed publish rolls it back.
                rows = await outbox.claim_and_stamp(conn, self._batch_size, self._clock())
                if rows:
                    await self._publish(rows)
        else:
            # SQLite has one writer: publishing inside its transaction would
            # stall every mutation while the broker is slow or down.
            async with self._db.read() as conn:
                rows = await outbox.claim(conn, self._batch_size)
            if rows:
                await self._publish(rows)
                async with self._db.write() as conn:
                    await outbox.stamp(conn, [r.event_id for r in rows], self._clock())
        self.published += len(rows)
        if rows:
            RELAY_BATCHES.inc()
            RELAY_PUBLISHED.inc(len(rows))
        return len(rows)

    async def _publish(self, rows: Sequence[outbox.OutboxRow]) -> None:
        """One ``outbox publish`` span, linked to each commit's trace, around the publisher."""
        contexts = [row.trace_context for row in rows]
        with tracer.start_as_current_span(
            "outbox publish",
            kind=SpanKind.PRODUCER,
            links=links_to(contexts),
            attributes={"messaging.batch.message_count": len(rows)},
        ):
            await self._publisher.publish_batch(
                [row.payload for row in rows], traceparents=contexts
            )

    async def report_backlog(self) -> None:
        """Set the outbox gauges (backlog, oldest unpublished age); never raises.

        The relay's own process serves them on ``--port``; an API
        process sets them again on each ``/metrics`` scrape.
        """
        try:
            async with self._db.read() as conn:
                count, oldest_age_s = await outbox.backlog(conn, self._clock())
        except Exception:
            return
        OUTBOX_BACKLOG.set(count)
        OUTBOX_OLDEST_AGE.set(oldest_age_s)

    async def run(self) -> None:
        """Drain forever (until cancelled); failures are logged and retried with backoff."""
        backoff = Backoff(0.1, self._retry_max_s)
        reported = -BACKLOG_REPORT_S
        while True:
            if time.monotonic() - reported >= BACKLOG_REPORT_S:
                reported = time.monotonic()
                await self.report_backlog()
            self._wake.clear()
            try:
                while await self.drain_once() == self._batch_size:
                    pass
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                RELAY_ERRORS.inc()
                delay = backoff.next()
                if isinstance(exc, DatabaseUnavailable | KafkaError):
                    log.warning("outbox relay: %s; retrying in %.1fs", exc, delay)
                else:
                    log.exception("outbox relay failed; retrying in %.1fs", delay)
                await asyncio.sleep(delay)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_interval_s):  # not wait_for: on 3.11
                    await self._wake.wait()  # it can swallow a cancel that meets a wake-up
