"""The cache projector: Kafka events → Redis snapshots of PUBLIC playlists.

``chorus project-cache`` consumes the events topic in its own consumer group.
An event only says *that* a playlist reached a version; the projector reads
the playlist's **current** header and first page from SQL (one read
transaction) and stores that as the snapshot, or removes the snapshot when
the playlist is no longer PUBLIC or was deleted. So an event lost or skipped
costs nothing but cache hits: the next event of the playlist repairs it, and
until then the API serves SQL because the head version (raised by every
commit) is ahead of the snapshot.

Per ``getmany`` batch: decode (garbage is logged and skipped), keep each
playlist's highest version, drop playlists whose stored snapshot is already at
or past it (idempotent by version: duplicates from an at-least-once relay,
replays after a rebalance or a broker restart), read the rest from SQL, write
them in one Redis pipeline, and only then commit the offsets. Redis or
database errors retry the same batch with backoff, committing nothing.

Tansu keeps its log in memory: after a broker restart offsets start at 0
again and the group's committed offsets are gone, so the rejoined consumer
starts from the earliest offset. Events the broker lost are not needed: the
next event of a playlist makes the projector read its current state from
SQL. Any consumer failure closes the consumer and joins the group again
after a backoff.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from chorus.caches.snapshot import Snapshot
from chorus.caches.store import SnapshotStore
from chorus.db import listing, repository
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.domain.model import Visibility
from chorus.events.kafka import KafkaConfig, can_commit, consumer, ensure_topic
from chorus.events.wire import decode_event
from chorus.metrics import CONSUMER_LAG, PROJECTOR_APPLIED

log = logging.getLogger("chorus.projector")


EXPECTED_OUTAGES = (RedisError, OSError, KafkaError, DatabaseUnavailable)
"""Failures of a server that is away: one warning line each, no traceback."""


START_TIMEOUT_S = 10.0
"""How long a consumer may take to start (join its group) before it is made afresh."""


def _log_failure(exc: Exception, message: str, backoff: float) -> None:
    if isinstance(exc, EXPECTED_OUTAGES):
        log.warning(message + " (%s: %s)", backoff, type(exc).__name__, exc)
    else:
        log.exception(message, backoff)


class CacheProjector:
    """Keeps Redis snapshots of PUBLIC playlists at their latest version.

    Args:
        config: the events topic.
        redis: where snapshots go.
        db: where the current state is read.
        group_id: the consumer group (one per deployment).
        page_size: live entries per snapshot (the API's first page).
        retry_max_s: the longest wait between retries (backoff doubles up to it).

    Attributes:
        records: Kafka records consumed and committed since start (garbage included).
        applied: snapshots written or removed since start.
    """

    def __init__(
        self,
        config: KafkaConfig,
        redis: Redis,
        db: Database,
        *,
        group_id: str = "chorus-cache-projector",
        page_size: int = 50,
        retry_max_s: float = 5.0,
    ) -> None:
        self._config = config
        self._store = SnapshotStore(redis)
        self._db = db
        self._group_id = group_id
        self._page_size = page_size
        self._retry_max_s = retry_max_s
        self.records = 0
        self.applied = 0
        self._applied_to: dict[TopicPartition, int] = {}  # next offset to apply, per partition

    @property
    def group_id(self) -> str:
        """The consumer group (and the ``group`` label of its lag gauge)."""
        return self._group_id

    async def run(self) -> None:
        """Consume and project until cancelled; every failure is retried."""
        backoff = 0.0
        while True:
            kafka = consumer(self._config, self._group_id, client_id="chorus-cache-projector")
            self._applied_to.clear()
            try:
                await ensure_topic(self._config)
                # Seen against a restarted Tansu: start() joined the group,
                # was assigned every partition, and never returned.
                async with asyncio.timeout(START_TIMEOUT_S):
                    await kafka.start()
                log.info("cache projector consuming %s", self._config.topic)
                backoff = 0.0
                await self._consume(kafka)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                backoff = min(max(backoff * 2, 0.2), self._retry_max_s)
                _log_failure(exc, "cache projector consumer failed; rejoining in %.1fs", backoff)
            finally:
                await kafka.stop()
            await asyncio.sleep(backoff)

    async def _consume(self, kafka: AIOKafkaConsumer) -> None:
        while True:
            batch = await kafka.getmany(timeout_ms=1_000)
            latest: dict[str, int] = {}
            for records in batch.values():
                for record in records:
                    try:
                        event = decode_event(record.value)
                    except (ValueError, TypeError):
                        log.warning("skipping a record that is not an event at %s", record.offset)
                        continue
                    pid, version = event["playlist_id"], event["version"]
                    latest[pid] = max(version, latest.get(pid, -1))
            for tp, records in batch.items():
                self._applied_to.setdefault(tp, records[0].offset)
            if latest:
                await self._apply_until_done(kafka, latest)
            for tp, records in batch.items():
                self._applied_to[tp] = records[-1].offset + 1
            if batch and can_commit(kafka):  # never an old log's offset into a restarted broker
                await kafka.commit()
                self.records += sum(len(records) for records in batch.values())
            self._measure_lag(kafka)

    async def _apply_until_done(self, kafka: AIOKafkaConsumer, latest: dict[str, int]) -> None:
        backoff = 0.0
        while True:
            try:
                await self.apply(latest)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                backoff = min(max(backoff * 2, 0.1), self._retry_max_s)
                _log_failure(exc, "cache projection failed; retrying in %.1fs", backoff)
                self._measure_lag(kafka)  # the stuck batch counts
                await asyncio.sleep(backoff)

    async def apply(self, latest: dict[str, int]) -> int:
        """Bring the snapshots of these playlists to at least these versions.

        Args:
            latest: playlist id → the newest version an event announced.

        Returns:
            how many snapshots were written or removed.

        Raises:
            redis.RedisError, OSError, sqlalchemy.exc.SQLAlchemyError: nothing
                is lost; call again.
        """
        stored = await self._store.versions(latest)
        due = {p: v for p, v in latest.items() if stored.get(p, -1) < v}
        if not due:
            return 0
        async with self._db.read() as conn:
            headers = await listing.get_playlists(conn, due)
            snapshots = {
                pid: Snapshot.read(
                    header,
                    await repository.entries_page(conn, pid, limit=self._page_size + 1),
                    self._page_size,
                )
                for pid, header in headers.items()
                if header.visibility is Visibility.PUBLIC and not header.deleted
            }
        removes = {
            pid: max(version, headers[pid].version if pid in headers else -1)
            for pid, version in due.items()
            if pid not in snapshots
        }
        changed = await self._store.write(list(snapshots.values()), removes)
        self.applied += changed
        PROJECTOR_APPLIED.inc(changed)
        return changed

    def _measure_lag(self, kafka: AIOKafkaConsumer) -> None:
        """Set the lag gauge: records after the last applied one, over assigned partitions.

        A partition with no record since it was assigned counts 0.
        """
        assigned = kafka.assignment()
        for tp in self._applied_to.keys() - assigned:  # revoked: forget, count afresh
            del self._applied_to[tp]
        lag = 0
        for tp in assigned:
            end = kafka.highwater(tp)
            if end is not None and tp in self._applied_to:
                lag += max(end - self._applied_to[tp], 0)
        CONSUMER_LAG.labels(group=self._group_id).set(lag)
