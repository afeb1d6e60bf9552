"""The API's reader of snapshots, with request coalescing and a circuit breaker.

:class:`SnapshotCache` answers a read with one Redis round trip (concurrent
reads of one playlist share it), behind a short timeout and a
:class:`~chorus.resilience.breaker.CircuitBreaker`; it never raises because of
Redis, so the caller reads SQL instead. It also raises the head version after
each commit of this process, in the background, until Redis takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from enum import Enum
from typing import Literal, TypeVar

from redis.asyncio import Redis

from chorus.caches.cluster_store import snapshot_store
from chorus.caches.generation import Generation, Ticket
from chorus.caches.snapshot import SNAPSHOT_PAGE_SIZE, Snapshot
from chorus.caches.snapshot_writer import StaleTicket
from chorus.metrics import REDIS_BREAKER_OPEN, SNAPSHOT_FILLS, SNAPSHOT_READS
from chorus.resilience.breaker import BreakerState, CircuitBreaker
from chorus.resilience.tasks import cancel_and_wait

log = logging.getLogger("chorus.snapshots")

T = TypeVar("T")


class _Unanswered(Enum):
    UNANSWERED = "unanswered"


_UNANSWERED = _Unanswered.UNANSWERED
"""What :meth:`SnapshotCache._ask` returns when Redis did not answer (``None`` is an answer)."""

FLUSH_BATCH = 500
"""Head bumps written per pipeline when several are pending (Redis came back)."""
MAX_FILLS = 32
"""Read-through snapshot fills running at once (:meth:`SnapshotCache.fill`)."""
FLUSH_RETRY_S = 0.5
"""How often head raises that Redis refused are tried again (seconds)."""

_Read = tuple[int | None, Snapshot | None]


class SnapshotCache:
    """The API's reader of snapshots, and its best-effort head bumps.

    Args:
        redis: the client (its own connection pool; shared with nothing slow).
        breaker: in front of every Redis call; while open, reads go to SQL at once.
        page_size: the largest first page served from a snapshot (the
            projector's page size); larger first pages read SQL unless the
            snapshot holds the whole playlist.
        timeout_s: how long one Redis call may take before it counts as a failure.
        max_pending: how many unconfirmed head bumps are remembered (the
            oldest are forgotten beyond that).
        generation: the belief the client's ``redis_connect_func`` keeps
            (:meth:`Generation.on_connect`); a fresh one by default.

    Attributes:
        redis_calls: Redis round trips made by reads (coalesced reads count once).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        breaker: CircuitBreaker,
        page_size: int = SNAPSHOT_PAGE_SIZE,
        timeout_s: float = 0.25,
        max_pending: int = 100_000,
        generation: Generation | None = None,
    ) -> None:
        self.page_size = page_size
        self.redis_calls = 0
        self._store = snapshot_store(redis, generation)
        self.generation = self._store.generation
        self._checking: asyncio.Task[None] | None = None
        self._redis = redis
        self._breaker = breaker
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._inflight: dict[str, asyncio.Future[_Read | None]] = {}
        self._pending: dict[str, int] = {}
        """Heads this process committed but could not write yet: reads below them miss."""
        self._flusher: asyncio.Task[None] | None = None
        self._fills: dict[str, asyncio.Task[None]] = {}
        REDIS_BREAKER_OPEN.set(0 if breaker.state is BreakerState.CLOSED else 1)

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    async def get(self, playlist_id: str, min_version: int | None = None) -> Snapshot | None:
        """The current snapshot of a playlist, or ``None`` (read SQL instead).

        A snapshot is returned only when its version equals the head version
        and is ``>= min_version``. Concurrent calls for one playlist share one
        Redis round trip. Never raises because of Redis: a failure, a timeout
        or an open breaker gives ``None``.
        """
        read = self._inflight.get(playlist_id)
        if read is None:
            if not self._breaker.allow():
                SNAPSHOT_READS.labels(result="bypass").inc()
                return None
            read = asyncio.ensure_future(self._read(playlist_id))
            self._inflight[playlist_id] = read
            read.add_done_callback(lambda done: self._done(playlist_id, done))
        # Shielded: one caller's cancellation must not cancel the others' read.
        result = await asyncio.shield(read)
        if result is None:
            SNAPSHOT_READS.labels(result="bypass").inc()
            return None
        head, snapshot = result
        if (
            snapshot is None
            or snapshot.version != head
            or snapshot.version < self._pending.get(playlist_id, -1)
            or (min_version is not None and snapshot.version < min_version)
        ):
            SNAPSHOT_READS.labels(result="miss").inc()
            return None
        SNAPSHOT_READS.labels(result="hit").inc()
        return snapshot

    def ticket(self) -> Ticket:
        """A ticket for a read about to begin (this process's belief; no round trip)."""
        return self.generation.ticket()

    async def heads(self, playlist_ids: Iterable[str]) -> tuple[str, dict[str, int]] | None:
        """Redis's generation and the head versions of these playlists, in one round trip.

        A commit of this process that Redis has not taken yet counts as the
        head. Playlists without a head key are absent (unknown).

        Returns:
            ``(generation, playlist id → head)``, or ``None`` when Redis cannot
            answer now (failure, timeout, open breaker) or has no generation
            (it forgot everything: a new one is begun in the background).
            Never raises because of Redis.
        """
        ids = list(playlist_ids)
        if not self._breaker.allow():
            return None
        answer = await self._ask(self._store.heads(ids))
        if answer is _UNANSWERED:
            return None
        generation, found = answer
        if generation is None:
            self._check_generation()
            return None
        self.generation.saw(generation)
        for pid in ids:
            pending = self._pending.get(pid)
            if pending is not None and pending > found.get(pid, -1):
                found[pid] = pending
        return generation, found

    async def raise_heads(self, versions: Mapping[str, int], ticket: Ticket) -> bool:
        """Raise the heads to versions a read saw committed (never lowers one); one round trip.

        Args:
            ticket: :meth:`ticket` before the read began. A missing head is
                created only when Redis forgot nothing since
                (:mod:`chorus.caches.generation`).

        Returns:
            whether Redis took them all. Never raises because of Redis.
        """
        if not self._breaker.allow():
            return False
        taken = await self._ask(self._store.learn_heads(versions, ticket))
        return taken is not _UNANSWERED and taken

    def fill(self, playlist_id: str, read: Callable[[], Awaitable[Snapshot | None]]) -> None:
        """Read-through: store the snapshot ``read`` makes, in the background; never raises.

        Called after a read of a PUBLIC playlist missed its snapshot, so that
        popular playlists are cached whether or not anyone edits them. One
        fill per playlist at a time, at most :data:`MAX_FILLS` at once (more
        are dropped: a later miss fills). The write is the projector's,
        idempotent by version: it never replaces a newer snapshot nor stores
        one below the head.

        Args:
            read: the snapshot from SQL, or ``None`` (not PUBLIC, deleted, gone).
        """
        if playlist_id in self._fills or len(self._fills) >= MAX_FILLS:
            return
        if not self._breaker.allow():
            return
        task = asyncio.get_running_loop().create_task(self._fill(read, self.ticket()))
        self._fills[playlist_id] = task
        task.add_done_callback(lambda _: self._fills.pop(playlist_id, None))

    async def _fill(self, read: Callable[[], Awaitable[Snapshot | None]], ticket: Ticket) -> None:
        try:
            snapshot = await read()
        except Exception:  # the database is the request's business, not the fill's
            log.debug("snapshot fill could not read SQL", exc_info=True)
            return
        if snapshot is None:
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                written = await self._store.put(snapshot, ticket)
        except StaleTicket:
            return  # Redis forgot since the read: a later miss fills
        except Exception as exc:
            self._failed(exc)
            return
        self._succeeded()
        if written:
            SNAPSHOT_FILLS.inc()

    def committed(self, playlist_id: str, version: int) -> None:
        """A commit of this process (a store's ``on_commit``): raise the head in the background.

        Until the head is written, this process's own reads of the playlist
        miss any older snapshot. Needs a running event loop.
        """
        self._remember(playlist_id, version)
        self._keep_flushing()

    async def bump_head(self, playlist_id: str, version: int) -> None:
        """Raise the head after a commit, through the breaker; never raises.

        A bump that cannot be written now is remembered and retried in the
        background every :data:`FLUSH_RETRY_S` until Redis takes it.
        """
        self._remember(playlist_id, version)
        while self._pending and await self._flush():
            pass
        if self._pending:
            self._keep_flushing()

    @property
    def pending_heads(self) -> int:
        """Head raises of this process's commits that Redis has not taken yet."""
        return len(self._pending)

    async def aclose(self) -> None:
        """Send what is pending if Redis answers now, then stop retrying.

        The caller closes the Redis client.
        """
        for fill in list(self._fills.values()):
            with contextlib.suppress(Exception):
                await cancel_and_wait(fill)
        for task in (self._flusher, self._checking):
            if task is not None:
                with contextlib.suppress(Exception):  # it logged its own failures
                    await cancel_and_wait(task)
        while self._pending and await self._flush():
            pass

    def _check_generation(self) -> None:
        """Begin a new generation in the background (one check at a time)."""
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._ensure())

    async def _ensure(self) -> None:
        await self._ask(self._store.ensure())

    def _keep_flushing(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_all())

    def _done(self, playlist_id: str, read: asyncio.Future[_Read | None]) -> None:
        if self._inflight.get(playlist_id) is read:
            del self._inflight[playlist_id]

    async def _read(self, playlist_id: str) -> _Read | None:
        self.redis_calls += 1
        answer = await self._ask(self._store.read_raw(playlist_id))
        if answer is _UNANSWERED:
            return None
        head, doc = answer
        try:
            return head, Snapshot.from_json(doc) if doc is not None else None
        except ValueError:
            log.warning("unreadable snapshot of playlist %s; reading SQL", playlist_id)
            return head, None

    def _remember(self, playlist_id: str, version: int) -> None:
        if version > self._pending.get(playlist_id, -1):
            self._pending.pop(playlist_id, None)  # re-insert: the dict keeps age order
            self._pending[playlist_id] = version
        while len(self._pending) > self._max_pending:
            del self._pending[next(iter(self._pending))]

    async def _flush_all(self) -> None:
        """Send remembered heads until none is left, retrying while Redis fails.

        Until then other API processes could serve a snapshot older than a
        commit of this one — even one that made the playlist PRIVATE — so
        this does not give up (docs/full-profile.md).
        """
        while self._pending:
            if not await self._flush():
                await asyncio.sleep(FLUSH_RETRY_S)

    async def _flush(self) -> bool:
        """Write up to :data:`FLUSH_BATCH` remembered heads; whether that worked."""
        if not self._pending or not self._breaker.allow():
            return False
        sent = dict(itertools.islice(self._pending.items(), FLUSH_BATCH))
        if await self._ask(self._store.bump_heads(sent)) is _UNANSWERED:
            return False
        for playlist_id, version in sent.items():
            if self._pending.get(playlist_id) == version:
                del self._pending[playlist_id]
        return True

    async def _ask(self, request: Awaitable[T]) -> T | Literal[_Unanswered.UNANSWERED]:
        """``request``'s answer within the timeout, told to the breaker; a failure is
        told to it too, and is :data:`_UNANSWERED`."""
        try:
            async with asyncio.timeout(self._timeout_s):
                answer = await request
        except Exception as exc:
            self._failed(exc)
            return _UNANSWERED
        self._succeeded()
        return answer

    def _failed(self, exc: Exception) -> None:
        was = self._breaker.state
        self._breaker.record_failure()
        if self._breaker.state is not was and self._breaker.state is BreakerState.OPEN:
            log.warning("Redis failing (%r): snapshot reads go to SQL for now", exc)
        self._track()

    def _succeeded(self) -> None:
        if self._breaker.state is not BreakerState.CLOSED:
            log.info("Redis answers again: snapshot reads resume")
        self._breaker.record_success()
        self._track()

    def _track(self) -> None:
        REDIS_BREAKER_OPEN.set(0 if self._breaker.state is BreakerState.CLOSED else 1)
