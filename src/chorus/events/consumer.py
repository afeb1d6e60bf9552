"""The one Kafka consumer runner: every consumer group of Chorus runs in it.

A :class:`ConsumerRunner` owns everything Kafka for its group — joining,
rejoining, committing, measuring lag — and hands decoded events to a
:class:`Handler` (fanout, cache projector, any future group), which only
applies them. docs/full-profile.md lists the groups and their failure table.

**Delivery: at least once.** Offsets are committed by hand, after the
handler returned for the records they cover: per ``getmany`` batch, and for
revoked partitions when a rebalance starts. A crash or a rebalance
re-delivers records; handlers are idempotent by ``(playlist_id, version)``.

Failures:

* The handler raises: nothing is committed; the same records (those of
  partitions still owned) are handed again, in order, with
  :class:`~chorus.resilience.backoff.Backoff`, until it returns. Meanwhile the
  lag gauge goes on counting them.
* Records that are not events are logged, counted in ``skipped``, committed (never retried).
* Kafka errors: aiokafka retries by itself; if the consumer fails anyway it
  is closed and a new one joins the group after a backoff.
* A broker that lost its log. Tansu keeps it in memory: after a restart the
  topic and the group are gone, so the consumer joins again and, with no
  committed offset, starts at the earliest one. Traps, checked with aiokafka
  0.14 and Tansu 0.6:

  - Tansu answers a fetch past the end of a partition with no records, not
    ``OFFSET_OUT_OF_RANGE``, so an offset of the old log committed into the new
    one would silently skip the new log's first records; and a commit sent after
    aiokafka reset its membership (generation -1) *is* accepted by the new, empty
    group. So commits go out only as a known member (``kafka.can_commit``), and a
    partition ending below what was consumed or its position is read again.
  - Until someone creates the topic again, Tansu acknowledges and serves
    records produced to it (and drops them when the topic is created), but
    refuses offset commits with a retriable ``UNKNOWN_TOPIC_OR_PARTITION``,
    which aiokafka retries forever. So a commit gets :data:`COMMIT_TIMEOUT_S`,
    and after every assignment (and after a failed commit) the runner
    ensures the topic and refreshes its metadata: a topic re-created by
    another client may also have another partition count, which the group
    leader only notices on a refresh.
  - Tansu numbers a group's first generation 0, and aiokafka leaves a group
    on ``stop()`` only above generation 0: a stopped consumer stayed the
    group's leader until its session timed out, and the next consumer's
    ``start()`` waited for it (the cause of a consumer "stuck" after a
    restart). :class:`~chorus.events.kafka.GroupConsumer` always leaves; and a
    refused commit (the member was forgotten) never closes the consumer,
    which aiokafka is already rejoining.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from chorus.domain.changes import PlaylistEvent
from chorus.events.kafka import KafkaConfig, can_commit, consumer, ensure_topic, position
from chorus.events.wire import decode_event
from chorus.metrics import CONSUMER_LAG, CONSUMER_PARTITIONS
from chorus.resilience.backoff import Backoff
from chorus.tracing import header_value

log = logging.getLogger("chorus.consumer")

COMMIT_TIMEOUT_S = 5.0
"""How long a commit may take (aiokafka retries some of a restarted Tansu's errors forever)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record that decoded as an event.

    Attributes:
        partition: where it was read.
        offset: its offset there.
        value: the record's bytes (the event's JSON, :mod:`chorus.events.wire`).
        event: the decoded event.
        traceparent: its ``traceparent`` header, the commit's trace (:mod:`chorus.tracing`).
    """

    partition: TopicPartition
    offset: int
    value: bytes
    event: PlaylistEvent
    traceparent: bytes | None = None


class Handler(Protocol):
    """What a consumer group does with its events."""

    async def handle(self, records: Sequence[Record]) -> None:
        """Apply ``records`` (in partition order); return only when all are applied.

        Raises:
            Exception: any failure; nothing is committed and the same records
                (of the partitions still owned) are handed again after a backoff.
        """
        ...


class ConsumerRunner:
    """Consumes the events topic in one consumer group and feeds a :class:`Handler`.

    Args:
        config: the events topic and its broker.
        handler: what applies the events.
        group_id: the consumer group (one per kind of consumer per deployment;
            every process of that kind shares it, so they split the partitions).
        client_id: the Kafka client id (shows in broker logs).
        expected: exception types of servers that are away: logged as one
            warning line, without a traceback.
        retry_first_s: the first wait after a failure (seconds).
        retry_max_s: the longest wait between retries (backoff doubles up to it).

    Attributes:
        started: set when the consumer first joined the group and got its
            partitions (possibly none: more consumers than partitions).
        records: records handled and committed since start (skipped ones included).
        skipped: records that were not events (logged, committed, never retried).
        handler_failures: handler calls that failed and were retried.
        lost_logs: partitions found shorter than already consumed (broker lost its log).
        restarts: consumers closed after a failure and created again.
    """

    def __init__(
        self,
        config: KafkaConfig,
        handler: Handler,
        *,
        group_id: str,
        client_id: str,
        expected: tuple[type[BaseException], ...] = (),
        retry_first_s: float = 0.05,
        retry_max_s: float = 2.0,
    ) -> None:
        self._config = config
        self._handler = handler
        self.group_id = group_id
        self._client_id = client_id
        self._expected = (KafkaError, OSError, *expected)
        self._retry = (retry_first_s, retry_max_s)
        self._owned: frozenset[TopicPartition] = frozenset()
        self._uncommitted: dict[TopicPartition, int] = {}
        """Next offset to read, per partition, handled but not committed yet."""
        self._positions: dict[TopicPartition, int] = {}
        """First offset not handled yet, per owned partition (for the lag gauge)."""
        self._consumed_to: dict[TopicPartition, int] = {}
        """The highest next offset ever consumed per partition (to notice a lost log)."""
        self._pending_records = 0  # handled since the last commit (for :attr:`records`)
        self._topic_checked = False
        self.started = asyncio.Event()
        self.records = 0
        self.skipped = 0
        self.handler_failures = 0
        self.lost_logs = 0
        self.restarts = 0

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this runner consumes now (also ``chorus_consumer_partitions``)."""
        return self._owned

    async def run(self) -> None:
        """Consume and handle until cancelled.

        Never returns and raises nothing but :exc:`asyncio.CancelledError`:
        every failure is logged and retried (see the module docstring).
        """
        backoff = Backoff(*self._retry)
        while True:
            kafka = consumer(self._config, self.group_id, client_id=self._client_id)
            kafka.subscribe([self._config.topic], listener=_Listener(self, kafka))
            self._forget_partitions()
            try:
                await ensure_topic(self._config)
                await kafka.start()
                log.info("consuming %s in group %s", self._config.topic, self.group_id)
                await self._consume(kafka, backoff)
            except Exception as exc:
                self._log_failure(exc, "consumer of group %s failed; joining again", self.group_id)
            finally:
                await kafka.stop()
            self.restarts += 1
            await backoff.sleep()

    def _own(self, partitions: frozenset[TopicPartition]) -> None:
        self._owned = partitions
        CONSUMER_PARTITIONS.labels(group=self.group_id).set(len(partitions))

    def _forget_partitions(self) -> None:
        self._own(frozenset())
        self._uncommitted.clear()
        self._positions.clear()
        self._consumed_to.clear()
        self._pending_records = 0

    async def _consume(self, kafka: AIOKafkaConsumer, backoff: Backoff) -> None:
        while True:
            if not self._topic_checked:
                await self._check_topic(kafka)
            batch: dict[TopicPartition, list[Any]] = await kafka.getmany(timeout_ms=1_000)
            if batch:
                backoff.reset()  # the consumer works: a later failure starts small again
                await self._handle(kafka, batch)
            await self._commit(kafka, list(self._uncommitted))
            await self._repair_lost_logs(kafka)
            self._measure_lag(kafka)

    def _decode(self, tp: TopicPartition, consumed: Sequence[Any]) -> list[Record]:
        records = []
        for record in consumed:
            try:
                event = decode_event(record.value)
            except (ValueError, TypeError):
                self.skipped += 1
                log.warning(
                    "skipping a record that is not an event: %s[%d] offset %d",
                    tp.topic,
                    tp.partition,
                    record.offset,
                )
            else:
                traceparent = header_value(record.headers)
                records.append(Record(tp, record.offset, record.value, event, traceparent))
        return records

    async def _handle(
        self, kafka: AIOKafkaConsumer, batch: Mapping[TopicPartition, Sequence[Any]]
    ) -> None:
        """Hand a ``getmany`` batch to the handler until it took it, then mark it uncommitted."""
        records: list[Record] = []
        for tp, consumed in batch.items():
            if tp in self._owned:  # lag counts from the first record not yet handled
                self._positions.setdefault(tp, consumed[0].offset)
            records += self._decode(tp, consumed)
        backoff = Backoff(*self._retry)
        while True:
            # Revoked meanwhile: their new owner reads them from the last commit.
            due = [r for r in records if r.partition in self._owned]
            try:
                if due:
                    await self._handler.handle(due)
                break
            except Exception as exc:
                self.handler_failures += 1
                delay = backoff.next()
                self._log_failure(
                    exc, "handling %d events failed; retrying in %.2fs", len(due), delay
                )
                self._measure_lag(kafka)
                await asyncio.sleep(delay)
        for tp, consumed in batch.items():
            end = consumed[-1].offset + 1
            self._consumed_to[tp] = max(end, self._consumed_to.get(tp, 0))
            if tp in self._owned:
                self._uncommitted[tp] = end
                self._positions[tp] = end
                self._pending_records += len(consumed)

    async def _commit(self, kafka: AIOKafkaConsumer, partitions: Iterable[TopicPartition]) -> None:
        """Commit what was handled on these partitions; failures only log.

        What is not committed stays due (next batch, or revocation) and is
        forgotten when the partitions go: an old offset must never be committed
        after a rebalance or a broker restart. Not committing costs only a
        re-delivery, which the handlers' dedupe absorbs.
        """
        offsets = {
            tp: self._uncommitted[tp]
            for tp in partitions
            if tp in self._uncommitted and tp in self._owned
        }
        if not offsets or not can_commit(kafka):
            return
        try:
            async with asyncio.timeout(COMMIT_TIMEOUT_S):
                await kafka.commit(offsets)
        except TimeoutError:
            self._topic_checked = False
            log.warning("commit not answered in %.0fs; trying again later", COMMIT_TIMEOUT_S)
            return
        except CommitFailedError:
            log.info("commit refused after a rebalance; the new owner re-delivers (deduped)")
            return
        except KafkaError as exc:
            self._topic_checked = False
            log.warning("commit failed (%s); trying again later", exc)
            return
        for tp, offset in offsets.items():
            if self._uncommitted.get(tp) == offset:
                del self._uncommitted[tp]
        if not self._uncommitted:
            self.records += self._pending_records
            self._pending_records = 0

    async def _on_revoked(self, kafka: AIOKafkaConsumer, revoked: Iterable[TopicPartition]) -> None:
        revoked = set(revoked)
        await self._commit(kafka, revoked)
        self._own(self._owned - revoked)
        for tp in revoked:
            self._uncommitted.pop(tp, None)
            self._positions.pop(tp, None)

    def _on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._own(frozenset(assigned))
        self._topic_checked = False
        log.info(
            "group %s got partitions %s",
            self.group_id,
            sorted(tp.partition for tp in self._owned),
        )
        self.started.set()

    async def _repair_lost_logs(self, kafka: AIOKafkaConsumer) -> None:
        """Read again from the start every partition that now ends below what was read."""
        lost = []
        for tp in kafka.assignment():
            end = kafka.highwater(tp)  # below the position too: a rejoin at an old late commit
            read_to = max(self._consumed_to.get(tp, 0), await position(kafka, tp))
            if end is not None and end < read_to:
                lost.append(tp)
        if not lost:
            return
        self.lost_logs += len(lost)
        log.warning(
            "partitions %s of %s end below offsets already consumed: the broker lost its "
            "log; reading them again from the beginning",
            sorted(tp.partition for tp in lost),
            self._config.topic,
        )
        for tp in lost:
            self._consumed_to.pop(tp, None)
            self._uncommitted.pop(tp, None)
            self._positions.pop(tp, None)
        with contextlib.suppress(KafkaError):  # not assigned any more: the new owner reads it
            await kafka.seek_to_beginning(*lost)
        self._topic_checked = False

    async def _check_topic(self, kafka: AIOKafkaConsumer) -> None:
        """Create the topic if the broker lost it, then refresh the partition count."""
        try:
            await ensure_topic(self._config)
        except KafkaError as exc:
            log.warning("could not check topic %s (%s)", self._config.topic, exc)
            return
        self._topic_checked = True
        _refresh_metadata(kafka)

    def _measure_lag(self, kafka: AIOKafkaConsumer) -> None:
        """Set the lag gauge: records between position and end, over assigned partitions.

        A partition with no record since its assignment counts 0 (not
        ``AIOKafkaConsumer.position``, which may wait for the broker).
        """
        lag = 0
        for tp in kafka.assignment():
            end = kafka.highwater(tp)
            if end is not None and tp in self._positions:
                lag += max(end - self._positions[tp], 0)
        CONSUMER_LAG.labels(group=self.group_id).set(lag)

    def _log_failure(self, exc: Exception, message: str, *args: object) -> None:
        if isinstance(exc, self._expected):
            log.warning(message + " (%s: %s)", *args, type(exc).__name__, exc)
        else:
            log.exception(message, *args)


def _refresh_metadata(kafka: AIOKafkaConsumer) -> None:
    """Ask aiokafka for fresh topic metadata now (private API, aiokafka 0.14).

    The group leader rebalances when a metadata update shows a new partition
    count; else a re-created topic's new partitions wait ``metadata_max_age_ms``.
    """
    client = getattr(kafka, "_client", None)
    force = getattr(client, "force_metadata_update", None)
    if callable(force):
        updated = force()
        if isinstance(updated, asyncio.Future):  # its failure is only logged by aiokafka
            updated.add_done_callback(lambda f: f.cancelled() or f.exception())


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """Commits what was handled before partitions move to another consumer."""

    def __init__(self, runner: ConsumerRunner, kafka: AIOKafkaConsumer) -> None:
        self._runner = runner
        self._kafka = kafka

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._runner._on_revoked(self._kafka, revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._runner._on_assigned(assigned)
