"""Fanout: Kafka events → Redis ``PUBLISH`` on each playlist's channel.

``chorus fanout`` consumes the events topic in its own consumer group
(DESIGN §1) and publishes every record's value, byte for byte, on
:func:`~chorus.events.wire.events_channel` of its playlist, where the
API processes listen (DESIGN §6).

**Delivery rule: at least once from Kafka, at most once to Redis.** The relay
may produce an event twice and a rebalance re-delivers what was not committed
yet, so each event goes through one Lua script, atomic in Redis: publish it
only when its ``version`` is above the playlist's
:func:`~chorus.events.wire.fanout_version_key` (missing: -1), and
raise the key to it. A duplicate or an older version is dropped. The key is
shared, so the rule holds across every fanout consumer of the deployment,
rebalances included: subscribers see each version at most once, in
increasing order, and repair any gap from SQL (DESIGN §6, §8).

Offsets are committed by hand, after the records they cover were published:
per ``getmany`` batch, and for revoked partitions when a rebalance starts. A
crash or a rebalance re-delivers records (harmless), never skips one.

Failures:

* Redis errors: nothing is committed; the same records are tried again, in
  order, with backoff (0.05 s doubling to 2 s) until Redis answers.
* Kafka errors: aiokafka retries by itself; if the consumer fails anyway it
  is closed and a new one joins the group after a backoff.
* A broker that lost its log. Tansu keeps it in memory: after a restart the
  topic and the group are gone, so the consumer joins again and, with no
  committed offset, starts at the earliest one. Versions produced after the
  restart are higher than those published before, so they pass the dedupe.
  Traps, checked with aiokafka 0.14 and Tansu 0.6:

  - Tansu answers a fetch past the end of a partition with no records, not
    ``OFFSET_OUT_OF_RANGE``, so an offset of the old log committed into the
    new one would silently skip the new log's first records; and a commit
    sent after aiokafka reset its membership (generation -1) *is* accepted by
    the new, empty group. So commits go out only as a known member
    (:func:`_can_commit`), and a partition that ends below an offset already
    consumed is read again from its beginning.
  - Until someone creates the topic again, Tansu acknowledges and serves
    records produced to it (and drops them when the topic is created), but
    refuses offset commits with a retriable ``UNKNOWN_TOPIC_OR_PARTITION``,
    which aiokafka retries forever. So a commit gets
    :data:`COMMIT_TIMEOUT_S`, and after every assignment (and after a failed
    commit) fanout runs :func:`ensure_topic` and refreshes its metadata: a
    topic re-created by another client may also have another partition
    count, which the group leader only notices on a refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from chorus.domain.changes import PlaylistEvent
from chorus.events.kafka import KafkaConfig, can_commit, consumer, ensure_topic
from chorus.events.wire import decode_event, events_channel, fanout_version_key
from chorus.metrics import CONSUMER_LAG, FANOUT_DUPLICATES, FANOUT_PUBLISHED

log = logging.getLogger("chorus.fanout")

PUBLISH_IF_NEWER = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1') or -1
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[4])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
"""
"""KEYS: the fanout version key. ARGV: version, channel, payload, TTL (seconds).

Returns 1 when published, 0 when dropped (a duplicate or an older version).
"""

RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0
COMMIT_TIMEOUT_S = 5.0
"""How long a commit may take; aiokafka retries some broker errors without end
(a restarted Tansu may answer UNKNOWN_TOPIC_OR_PARTITION for a while)."""


@dataclass(frozen=True, slots=True)
class _Record:
    partition: TopicPartition
    value: bytes
    event: PlaylistEvent


class _Backoff:
    """Delays of 0.05 s doubling to 2 s."""

    def __init__(self) -> None:
        self._next = RETRY_FIRST_S

    def reset(self) -> None:
        self._next = RETRY_FIRST_S

    def next(self) -> float:
        delay = self._next
        self._next = min(delay * 2, RETRY_MAX_S)
        return delay


class Fanout:
    """Publishes the events topic on per-playlist Redis channels, once per version.

    Args:
        config: the events topic and its broker.
        redis: where to publish (the dedupe keys live there too).
        group_id: the consumer group; one per deployment, shared by every
            fanout process so they split the partitions.
        client_id: the Kafka client id (shows in broker logs).
        dedupe_ttl_s: seconds a playlist's last published version is kept
            after its last event; a version re-delivered later than that
            would be published again.

    Raises:
        ValueError: ``dedupe_ttl_s`` below 1.

    Attributes:
        started: set when the consumer first joined the group and got its
            partitions (possibly none: more consumers than partitions).
        published: events this instance published.
        duplicates: events dropped as already published (same or older version).
        skipped: records that were not events (logged, committed, never retried).
        redis_failures: Redis round trips that failed and were retried.
        lost_logs: partitions found shorter than already consumed (broker lost its log).
        restarts: consumers closed after a failure and created again.
    """

    def __init__(
        self,
        config: KafkaConfig,
        redis: Redis,
        *,
        group_id: str = "chorus-fanout",
        client_id: str = "chorus-fanout",
        dedupe_ttl_s: int = 7 * 24 * 3600,
    ) -> None:
        if dedupe_ttl_s < 1:
            raise ValueError("dedupe_ttl_s must be at least 1 second")
        self._config = config
        self._redis = redis
        self._script = redis.register_script(PUBLISH_IF_NEWER)
        self._group_id = group_id
        self._client_id = client_id
        self._dedupe_ttl_s = dedupe_ttl_s
        self._owned: frozenset[TopicPartition] = frozenset()
        self._uncommitted: dict[TopicPartition, int] = {}
        """Next offset to read, per partition, published but not committed yet."""
        self._positions: dict[TopicPartition, int] = {}
        """Next offset to read, per owned partition (for the lag gauge)."""
        self._consumed_to: dict[TopicPartition, int] = {}
        """The highest next offset ever consumed per partition (to notice a lost log)."""
        self._topic_checked = False
        self.started = asyncio.Event()
        self.published = 0
        self.duplicates = 0
        self.skipped = 0
        self.redis_failures = 0
        self.lost_logs = 0
        self.restarts = 0

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this instance consumes now."""
        return self._owned

    async def run(self) -> None:
        """Consume and publish until cancelled.

        Never returns and raises nothing but :exc:`asyncio.CancelledError`:
        every failure is logged and retried (see the module docstring).
        """
        backoff = _Backoff()
        while True:
            kafka = consumer(self._config, self._group_id, client_id=self._client_id)
            kafka.subscribe([self._config.topic], listener=_Listener(self, kafka))
            self._owned = frozenset()
            self._uncommitted.clear()
            self._positions.clear()
            self._consumed_to.clear()
            try:
                await ensure_topic(self._config)
                await kafka.start()
                log.info("fanout consuming %s in group %s", self._config.topic, self._group_id)
                await self._consume(kafka, backoff)
            except (KafkaError, OSError) as exc:
                log.warning(
                    "fanout consumer failed (%s: %s); joining the group again",
                    type(exc).__name__,
                    exc,
                )
            except Exception:
                log.exception("fanout consumer failed; joining the group again")
            finally:
                await kafka.stop()
            self.restarts += 1
            await asyncio.sleep(backoff.next())

    async def _consume(self, kafka: AIOKafkaConsumer, backoff: _Backoff) -> None:
        while True:
            if not self._topic_checked:
                await self._check_topic(kafka)
            batch: dict[TopicPartition, list[Any]] = await kafka.getmany(timeout_ms=1_000)
            if batch:
                backoff.reset()  # the consumer works: a later failure starts small again
                await self._fan_out(kafka, batch)
            await self._commit(kafka, list(self._uncommitted))
            await self._repair_lost_logs(kafka)
            self._measure_lag(kafka)

    async def _fan_out(
        self, kafka: AIOKafkaConsumer, batch: Mapping[TopicPartition, Sequence[Any]]
    ) -> None:
        """Publish a ``getmany`` batch, retrying Redis failures, then mark it uncommitted.

        While Redis refuses, the lag gauge goes on counting the batch.
        """
        records: list[_Record] = []
        for tp, consumed in batch.items():
            if tp in self._owned:  # lag counts from the first record not yet published
                self._positions.setdefault(tp, consumed[0].offset)
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
                    records.append(_Record(tp, record.value, event))
        backoff = _Backoff()
        while True:
            # Partitions revoked meanwhile belong to another consumer now,
            # which reads them again from the last commit: stop retrying them.
            due = [r for r in records if r.partition in self._owned]
            try:
                await self._publish(due)
                break
            except RedisError as exc:
                self.redis_failures += 1
                delay = backoff.next()
                log.warning("Redis failed (%s); retrying %d events in %.2fs", exc, len(due), delay)
                self._measure_lag(kafka)
                await asyncio.sleep(delay)
        for tp, consumed in batch.items():
            end = consumed[-1].offset + 1
            self._consumed_to[tp] = max(end, self._consumed_to.get(tp, 0))
            if tp in self._owned:
                self._uncommitted[tp] = end
                self._positions[tp] = end

    async def _publish(self, records: Sequence[_Record]) -> None:
        """Run the dedupe script for ``records``, in order, in one round trip.

        Raises:
            redis.RedisError: some, all or none of them ran; running them
                again is safe (the script drops what already went out).
        """
        if not records:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for r in records:
                playlist_id = r.event["playlist_id"]
                await self._script(
                    keys=[fanout_version_key(playlist_id)],
                    args=[
                        r.event["version"],
                        events_channel(playlist_id),
                        r.value,
                        self._dedupe_ttl_s,
                    ],
                    client=pipe,
                )
            results: list[int] = await pipe.execute()
        published = sum(1 for result in results if result == 1)
        self.published += published
        self.duplicates += len(results) - published
        FANOUT_PUBLISHED.inc(published)
        FANOUT_DUPLICATES.inc(len(results) - published)

    async def _commit(self, kafka: AIOKafkaConsumer, partitions: Iterable[TopicPartition]) -> None:
        """Commit what was published on these partitions; failures only log.

        What is not committed stays due, for the next attempt (after the next
        batch, or when the partitions are revoked), and is forgotten when the
        partitions go: after a rebalance, and above all after a broker restart,
        an old offset must never be committed. Not committing costs only a
        re-delivery, which the dedupe absorbs.
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

    async def _on_revoked(self, kafka: AIOKafkaConsumer, revoked: Iterable[TopicPartition]) -> None:
        revoked = set(revoked)
        await self._commit(kafka, revoked)
        self._owned = self._owned - revoked
        for tp in revoked:
            self._uncommitted.pop(tp, None)
            self._positions.pop(tp, None)

    def _on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._owned = frozenset(assigned)
        self._topic_checked = False
        log.info(
            "fanout in group %s got partitions %s",
            self._group_id,
            sorted(tp.partition for tp in self._owned),
        )
        self.started.set()

    async def _repair_lost_logs(self, kafka: AIOKafkaConsumer) -> None:
        """Read again from the start every partition that now ends below what was consumed."""
        lost = []
        for tp in kafka.assignment():
            end = kafka.highwater(tp)
            if end is not None and end < self._consumed_to.get(tp, 0):
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
            del self._consumed_to[tp]
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

        A partition that returned no record since it was assigned counts 0
        (``AIOKafkaConsumer.position`` may wait for the broker, so it is not used).
        """
        lag = 0
        for tp in kafka.assignment():
            end = kafka.highwater(tp)
            if end is not None and tp in self._positions:
                lag += max(end - self._positions[tp], 0)
        CONSUMER_LAG.labels(group=self._group_id).set(lag)


def _refresh_metadata(kafka: AIOKafkaConsumer) -> None:
    """Ask aiokafka for fresh topic metadata now (private API, aiokafka 0.14).

    The group leader compares partition counts on every metadata update and
    rebalances when one changed; otherwise a re-created topic's new
    partitions would wait for ``metadata_max_age_ms`` (5 minutes).
    """
    client = getattr(kafka, "_client", None)
    force = getattr(client, "force_metadata_update", None)
    if callable(force):
        updated = force()
        if isinstance(updated, asyncio.Future):  # its failure is only logged by aiokafka
            updated.add_done_callback(lambda f: f.cancelled() or f.exception())


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """Commits what was published before partitions move to another consumer."""

    def __init__(self, fanout: Fanout, kafka: AIOKafkaConsumer) -> None:
        self._fanout = fanout
        self._kafka = kafka

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._fanout._on_revoked(self._kafka, revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._fanout._on_assigned(assigned)
