"""The feed consumer: committed versions → pushed feed rows (``chorus.db.feed.push``).

The same :class:`FeedSink` runs in both profiles:

* embedded: the in-process relay publishes through :class:`FeedingPublisher`,
  which writes the feed rows of a batch before handing it to the bus;
* full: ``chorus feed`` (or ``serve --with-workers``) consumes the events topic
  in its own consumer group (:data:`~chorus.events.wire.FEED_GROUP`) through
  the :class:`~chorus.events.consumer.ConsumerRunner`.

Delivery is at least once in both (the relay stamps after publishing; Kafka
commits after handling), and the sink is idempotent by ``(follower,
playlist, version)`` with ``ON CONFLICT DO NOTHING``, so a repeated batch or a
consumer killed mid-batch and restarted writes each row once. Database errors
fail the batch, which is handed again after a backoff.

Beside the sink, in the same process, a :class:`FeedSwitcher` runs the
switches of targets back from pull to push (:mod:`chorus.db.switches`): one
bounded batch per write transaction, so no request waits for a switch longer
than one batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from chorus.db import feed, switches
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.domain.changes import PlaylistEvent
from chorus.domain.follows import DEFAULT_FEED_LIMITS, FeedLimits
from chorus.events.consumer import ConsumerRunner, Record
from chorus.events.kafka import KafkaConfig
from chorus.events.relay import Publisher
from chorus.events.wire import FEED_GROUP
from chorus.metrics import FEED_ROWS_WRITTEN
from chorus.resilience.backoff import Backoff

log = logging.getLogger(__name__)

SWITCH_POLL_S = 1.0
"""How often an idle :class:`FeedSwitcher` looks for a switch to run (seconds): the
longest a target waits for its backfill to begin. One read of a table that is
empty but for switches under way."""


def committed_of(event: PlaylistEvent) -> feed.Committed:
    """What the sink needs of an event; version 0 names the new playlist's owner.

    Raises:
        KeyError, ValueError: a malformed event.
    """
    owner = None
    if event["version"] == 0:
        for change in event["changes"]:
            if change["type"] == "PlaylistCreated":
                owner = change["owner_id"]
    return feed.Committed(
        playlist_id=event["playlist_id"],
        version=event["version"],
        actor_id=event["actor_id"],
        committed_at=datetime.fromisoformat(event["committed_at"]),
        owner_id=owner,
    )


class FeedSink:
    """Writes the pushed feed rows of committed versions, in one transaction per batch.

    Attributes:
        written: feed rows this sink wrote (repeats write none).
    """

    def __init__(self, db: Database, limits: FeedLimits = DEFAULT_FEED_LIMITS) -> None:
        self._db = db
        self._limits = limits
        self.written = 0

    async def write(self, events: Sequence[PlaylistEvent]) -> int:
        """Push ``events``; the rows written.

        Raises:
            DatabaseUnavailable: nothing or all was written; writing again is safe.
        """
        versions = [committed_of(e) for e in events]
        if not versions:
            return 0
        # Most playlists have no follower: then one read statement, not a write
        # transaction per batch (the embedded relay's batch of a hot playlist).
        # A follow that commits between this read and the push is missed, as one
        # that commits just after push's own count of followers always was.
        async with self._db.read_statement() as conn:
            if not await feed.anyone_to_push(conn, versions, self._limits):
                return 0
        async with self._db.write() as conn:
            written = await feed.push(conn, versions, self._limits)
        self.written += written
        FEED_ROWS_WRITTEN.inc(written)
        return written


class FeedingPublisher:
    """The embedded relay's publisher: feed rows first, then the inner publisher.

    Satisfies :class:`~chorus.events.relay.Publisher`. A failing sink fails the
    batch before anything reaches the bus, so the relay retries it whole.
    """

    def __init__(self, inner: Publisher, sink: FeedSink) -> None:
        self._inner = inner
        self._sink = sink

    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        await self._sink.write(events)
        await self._inner.publish_batch(events, traceparents=traceparents)


class FeedConsumer:
    """The full profile's feed consumer group.

    Args:
        config: the events topic and its broker.
        db: where feed rows go.
        limits: the push threshold.
        group_id: the consumer group, shared by every feed process of the deployment.
        client_id: the Kafka client id.

    Attributes:
        consumer: the runner (``assignment``, ``records``, ``handler_failures``, …).
        sink: the sink (``written``).
    """

    def __init__(
        self,
        config: KafkaConfig,
        db: Database,
        limits: FeedLimits = DEFAULT_FEED_LIMITS,
        *,
        group_id: str = FEED_GROUP,
        client_id: str = "chorus-feed",
    ) -> None:
        self.sink = FeedSink(db, limits)
        self.consumer = ConsumerRunner(
            config,
            self,
            group_id=group_id,
            client_id=client_id,
            expected=(DatabaseUnavailable,),
        )

    async def run(self) -> None:
        """Consume and push until cancelled (:meth:`ConsumerRunner.run`)."""
        await self.consumer.run()

    async def handle(self, records: Sequence[Record]) -> None:
        """Push the records' events in one transaction.

        Raises:
            DatabaseUnavailable: retried by the runner; the sink ignores repeats.
        """
        await self.sink.write([r.event for r in records])


MAX_REST_S = 1.0
"""The longest a :class:`FeedSwitcher` rests between two batches (seconds)."""


def _now() -> datetime:
    return datetime.now(UTC)


class FeedSwitcher:
    """Runs targets' switches back to push, a batch per write transaction, until cancelled.

    Between two batches it rests as long as the last one took (at most
    :data:`MAX_REST_S`), so a writer queued for SQLite's one write connection
    goes first — no other write waits longer than one batch
    (``limits.switch_batch_rows`` rows) — and a switch holds the writer at
    most half the time. Several processes may run one: a batch
    locks its target's rows (PostgreSQL) or holds the writer (SQLite).

    Args:
        db: the database.
        limits: the threshold, retention and the batch size.
        poll_s: how often to look for a switch when none is under way (seconds).
        clock: the time source (UTC), for retention.

    Attributes:
        batches: batches run; ``rows``: feed rows they wrote; ``switched``: targets pushed.
    """

    def __init__(
        self,
        db: Database,
        limits: FeedLimits = DEFAULT_FEED_LIMITS,
        *,
        poll_s: float = SWITCH_POLL_S,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._db = db
        self._limits = limits
        self._poll_s = poll_s
        self._clock = clock
        self.batches = 0
        self.rows = 0
        self.switched = 0

    async def run_once(self) -> switches.SwitchBatch | None:
        """One batch of the oldest switch; None when none is under way.

        Raises:
            DatabaseUnavailable: the batch was rolled back; running it again is safe.
        """
        batch = await switches.switch_batch(self._db, self._limits, self._clock())
        if batch is not None:
            self.batches += 1
            self.rows += batch.rows
            self.switched += batch.done
            FEED_ROWS_WRITTEN.inc(batch.rows)
        return batch

    async def run(self) -> None:
        """Run switches until cancelled; failures are logged and retried with backoff."""
        backoff = Backoff(0.1, 10.0)
        while True:
            started = time.monotonic()
            try:
                batch = await self.run_once()
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = backoff.next()
                if isinstance(exc, DatabaseUnavailable):
                    log.warning("feed switch: %s; retrying in %.1fs", exc, delay)
                else:
                    log.exception("feed switch failed; retrying in %.1fs", delay)
                await asyncio.sleep(delay)
                continue
            if batch is None:
                await asyncio.sleep(self._poll_s)
                continue
            # Resting as long as the batch took leaves the writer to others at least
            # half the time, and a writer woken by this commit takes it first.
            await asyncio.sleep(min(time.monotonic() - started, MAX_REST_S))
