"""The cache projector: Kafka events → Redis snapshots of PUBLIC playlists.

``chorus project-cache`` consumes the events topic in its own consumer group.
An event only says *that* a playlist reached a version; the projector reads
the playlist's **current** header and first page from SQL (one read
transaction) and stores that as the snapshot, or removes the snapshot when
the playlist is no longer PUBLIC or was deleted. So an event lost or skipped
costs nothing but cache hits: the next event of the playlist repairs it, and
until then the API serves SQL because the head version (raised by every
commit) is ahead of the snapshot.

Per batch handed by the :class:`~chorus.events.consumer.ConsumerRunner`
(which owns joining, commits, lag and a broker that lost its log): keep each
playlist's highest version, drop playlists whose stored snapshot is already at
or past it (idempotent by version: duplicates from an at-least-once relay,
replays after a rebalance or a broker restart), read the rest from SQL and
write them in one Redis pipeline. Redis or database errors fail the batch,
which the runner hands again with backoff, committing nothing. Events a
restarted broker lost are not needed: the next event of a playlist makes the
projector read its current state from SQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import RedisError

from chorus.caches.cluster_store import snapshot_store
from chorus.caches.generation import Generation
from chorus.caches.snapshot import SNAPSHOT_PAGE_SIZE, Snapshot
from chorus.db import listing, repository
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.domain.model import Visibility
from chorus.events.consumer import ConsumerRunner, Record
from chorus.events.kafka import KafkaConfig
from chorus.events.wire import PROJECTOR_GROUP
from chorus.metrics import PROJECTOR_APPLIED


class CacheProjector:
    """Keeps Redis snapshots of PUBLIC playlists at their latest version.

    Args:
        config: the events topic.
        redis: where snapshots go.
        db: where the current state is read.
        group_id: the consumer group (one per deployment).
        page_size: live entries per snapshot (the API's first page).
        retry_max_s: the longest wait between retries (backoff doubles up to it).
        generation: the belief its Redis client's ``redis_connect_func`` keeps.

    Attributes:
        consumer: the runner consuming for the projector (``group_id``, and
            ``records``: records consumed and committed, garbage included).
        applied: snapshots written or removed since start.
    """

    def __init__(
        self,
        config: KafkaConfig,
        redis: Redis,
        db: Database,
        *,
        group_id: str = PROJECTOR_GROUP,
        page_size: int = SNAPSHOT_PAGE_SIZE,
        retry_max_s: float = 5.0,
        generation: Generation | None = None,
    ) -> None:
        self._store = snapshot_store(redis, generation)
        self._db = db
        self._page_size = page_size
        self.consumer = ConsumerRunner(
            config,
            self,
            group_id=group_id,
            client_id="chorus-cache-projector",
            expected=(RedisError, DatabaseUnavailable),
            retry_first_s=0.1,
            retry_max_s=retry_max_s,
        )
        self.applied = 0

    @property
    def started(self) -> asyncio.Event:
        """Set when the consumer first joined the group and got its partitions."""
        return self.consumer.started

    async def run(self) -> None:
        """Consume and project until cancelled (:meth:`ConsumerRunner.run`)."""
        await self.consumer.run()

    async def handle(self, records: Sequence[Record]) -> None:
        """Project a batch: each playlist to the newest version the batch announces."""
        latest: dict[str, int] = {}
        for record in records:
            pid, version = record.event["playlist_id"], record.event["version"]
            latest[pid] = max(version, latest.get(pid, -1))
        await self.apply(latest)

    async def apply(self, latest: dict[str, int]) -> int:
        """Bring the snapshots of these playlists to at least these versions.

        Args:
            latest: playlist id → the newest version an event announced.

        Returns:
            how many snapshots were written or removed.

        Raises:
            redis.RedisError, OSError, sqlalchemy.exc.SQLAlchemyError: nothing
                is lost; call again (a ``StaleTicket``: Redis forgot since the read).
        """
        stored = await self._store.versions(latest)
        due = {p: v for p, v in latest.items() if stored.get(p, -1) < v}
        if not due:
            return 0
        # Taken before SQL is read: if Redis forgot since, it refuses the
        # writes (StaleTicket, a RedisError) and the runner hands the batch again.
        ticket = await self._store.ticket()
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
        changed = await self._store.write(list(snapshots.values()), removes, ticket)
        self.applied += changed
        PROJECTOR_APPLIED.inc(changed)
        return changed
