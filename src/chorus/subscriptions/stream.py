"""One subscriber's stream: catch up from a version, then live, never a gap or a repeat.

For ``playlist_stream(…, since_version=v)`` the subscriber receives versions
``v+1, v+2, …`` strictly in order, each once (DESIGN §6):

1. join the hub first, so live events buffer while we read history;
2. catch up on the versions after ``v`` from the mutation log, in pages;
3. then take live events, dropping any version already sent; an event that
   skips ahead makes us read the missing versions from SQL first.

A :class:`Resync` goes out instead when the log no longer holds ``v + 1``,
when ``v`` is already more than ``max_lag`` versions behind the head at
subscribe (``too far behind``: reading the playlist is cheaper than
replaying its log, and one user's 200 subscriptions from version 0 would
otherwise replay the whole log 200 times), or when a slow consumer falls more
than ``max_lag`` versions behind; the stream then continues from the current
version. A version that changes
access (members, visibility, deletion) goes to everyone who could see the
playlist before it; then access is checked again, and a viewer who lost it
gets :class:`~chorus.domain.errors.Forbidden` and nothing more (docs/api.md).

Once the subscription is accepted (the first access check answered), a read
the database cannot answer does not end the stream: the stream keeps its
place (the last version sent) and tries the same read again, backing off
from 0.1 s to 5 s, for as long as it takes (:meth:`_Stream.read`). A stream
ends only for what the client must act on (access lost, a bad argument); a
database that blips is the server's to ride out, and nothing commits while
it is away, so the subscriber misses nothing by waiting (docs/live-updates.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from chorus.db.engine import Database, DatabaseUnavailable
from chorus.domain.changes import PlaylistDeleted
from chorus.domain.committed import CommittedVersion
from chorus.domain.errors import Forbidden, InvalidInput, NotFound
from chorus.metrics import STREAM_CATCH_UPS, child
from chorus.resilience.backoff import Backoff
from chorus.subscriptions.catchup import read_since
from chorus.subscriptions.delivery_groups import DirectSink
from chorus.subscriptions.hub import Hub, Membership, changes_access
from chorus.subscriptions.presence import Presence

PAGE_SIZE = 100
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0
"""A read the database could not answer is tried again after 0.1 s, then twice as long
each time, at most 5 s apart (:meth:`_Stream.read`, the project's :class:`Backoff`)."""

IN_FLIGHT_S = 2.0
"""Seconds a quiet stream that found the head past it waits at least for that version
before it reads SQL (:meth:`_Stream.live`): a commit moves the head a moment before its
event reaches this process (the relay's poll, Kafka, the fanout, Redis), and a stream
that looked in between would read SQL for a version already on its way. It waits
longer, up to its idle check, while events lately took longer to arrive
(:attr:`Hub.arrival_s`, twice over) and while the hub has the version."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Resync:
    """Start again from ``current_version``: read the playlist, then continue."""

    playlist_id: str
    current_version: int
    reason: str


StreamItem = CommittedVersion | Resync


class _Stream:
    def __init__(
        self,
        db: Database,
        hub: Hub,
        member: Membership,
        viewer: str,
        *,
        max_lag: int,
        idle_check_s: float,
    ) -> None:
        self.db = db
        self.hub = hub
        self.member = member
        self.viewer = viewer
        self.playlist_id = member.playlist_id
        self.max_lag = max_lag
        self.idle_check_s = idle_check_s

    @property
    def last(self) -> int:
        """The last version sent; the membership holds it, as a direct write advances it."""
        return self.member.sent

    @last.setter
    def last(self, version: int) -> None:
        self.member.sent = version

    async def visible(self) -> int:
        """The current version if the viewer may see the playlist, else ``-1``.

        Read after the stream joined the hub, in one read that the streams
        subscribing at the same moment share (:meth:`SharedAccess.since_now`).
        """
        readers = await self.hub.access(self.db).since_now(self.playlist_id)
        header = readers.header
        return header.version if header is not None and readers.can_read(self.viewer) else -1

    async def head(self) -> int | None:
        """The playlist's version (``None``: gone), read at most a second ago (one read for
        all quiet streams of a playlist)."""
        return await self.hub.access(self.db).head(
            self.playlist_id, max_age_s=min(1.0, self.idle_check_s / 2)
        )

    def send(self, version: CommittedVersion) -> CommittedVersion:
        self.last = version.version
        return version

    async def read(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``'s answer, tried again while the database is unavailable.

        The stream's place (``last``) stays where it is meanwhile, so the next read
        after the database is back goes on from there: nothing lost, nothing twice.
        Cancelled with the stream (the client left).
        """
        backoff = Backoff(RETRY_FIRST_S, RETRY_MAX_S)
        while True:
            try:
                return await call()
            except DatabaseUnavailable:
                await backoff.sleep()

    async def keep_access(self, version: CommittedVersion) -> None:
        """After a version that changes access: end the stream if the viewer lost it."""
        if any(isinstance(c, PlaylistDeleted) for c in version.changes):
            raise Forbidden("the playlist was deleted")
        if changes_access(version) and not await self.read(
            lambda: self.hub.access(self.db).can_read(
                self.playlist_id, version.version, self.viewer
            )
        ):
            # One read of the playlist's readers per version for every stream
            # of this process, not one per subscriber (subscriptions/reader_checks.py).
            raise Forbidden("you no longer have access to this playlist")

    async def catch_up(self, why: str, *, far: str | None = None) -> AsyncIterator[StreamItem]:
        """Everything after ``last`` from SQL, page by page, until the head.

        ``why``: the ``reason`` label it is counted under
        (``chorus_subscription_catch_ups_total``). With ``far`` (the reason told to
        the client), more than ``max_lag`` versions behind is a :class:`Resync`
        instead.
        """
        child(STREAM_CATCH_UPS, why).inc()
        while True:
            # One page per slot: the viewer's other streams catch up in turn. The
            # last item of the catch-up goes out after the slot is given back, so
            # a stream at the head never holds one, whether or not it is read.
            final: StreamItem | None = None
            async with self.hub.catch_ups.slot(self.viewer):
                page = await self.read(
                    partial(read_since, self.db, self.playlist_id, self.last, limit=PAGE_SIZE)
                )
                if page is None:
                    raise Forbidden("you no longer have access to this playlist")
                behind = page.current_version - self.last
                if page.resync or (far and behind > self.max_lag):
                    reason = "retention" if page.resync or far is None else far
                    if await self.read(self.visible) < 0:
                        raise Forbidden("you no longer have access to this playlist")
                    self.last = page.current_version
                    final = Resync(self.playlist_id, page.current_version, reason)
                else:
                    sent_in_slot = page.versions if page.has_more else page.versions[:-1]
                    for version in sent_in_slot:
                        yield self.send(version)
                        await self.keep_access(version)
                    if not page.has_more and page.versions:
                        final = page.versions[-1]
            if isinstance(final, Resync):
                yield final
                return
            if final is not None:
                yield self.send(final)
                await self.keep_access(final)
            if not page.has_more:
                return

    async def live(self, member: Membership) -> AsyncIterator[StreamItem]:
        # A version the head showed past what was sent while the stream was quiet: if
        # it has not come (queued, or written to the socket by the hub) nor reached
        # this process's hub in the time events lately take to arrive, twice over
        # (IN_FLIGHT_S at least), its event was lost on the way, and SQL is read. A
        # version the hub has is being written to its thousands of sockets (seconds
        # on a busy gateway): the stream waits on, up to its idle check. Read at
        # once, every quiet stream that looked between a commit and its delivery (a
        # few hundred of 10,000 a commit, each idle check 15 s apart) read SQL for a
        # version already on its way; the catch-ups queued on the pool for seconds,
        # which made the next commit later still.
        expected: int | None = None
        expected_by = looked_at = 0.0  # the loop's clock
        loop = asyncio.get_running_loop()
        while True:
            if member.overflowed:
                member.overflowed = False
                member.clear()
                async for item in self.catch_up("overflow", far="slow consumer"):
                    yield item
                continue
            if member.queue.empty():
                member.wakeup.clear()
                self.hub.release(member)
                # Parked: the hub may write the group's versions to our socket
                # meanwhile (hub.py, direct writes), advancing `last`.
                member.parked = True
                try:
                    # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that
                    # comes in the loop turn an event wakes us (the client left as
                    # the event arrived), and the stream would go on for nobody.
                    quiet_s = self.idle_check_s
                    if expected is not None:
                        quiet_s = max(0.0, expected_by - loop.time())
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(quiet_s):
                            await member.wakeup.wait()
                finally:
                    member.parked = False
                if not member.queue.empty() or member.overflowed:
                    continue
                if expected is not None:
                    behind = expected > self.last
                    if behind and loop.time() < expected_by:
                        continue  # woken for another membership: wait on
                    waited = loop.time() - looked_at
                    if (
                        behind
                        and waited < self.idle_check_s
                        and self.hub.received(self.playlist_id) >= expected
                    ):
                        expected_by = loop.time() + min(IN_FLIGHT_S, self.idle_check_s - waited)
                        continue
                    lost, expected = behind, None
                else:
                    head = await self.read(self.head)
                    lost = head is None  # catch_up ends the stream as it would
                    if head is not None and head > self.last:
                        looked_at = loop.time()
                        grace = max(IN_FLIGHT_S, min(2 * self.hub.arrival_s, self.idle_check_s))
                        expected, expected_by = head, looked_at + grace
                if lost:
                    # Quiet for a while and still behind the head: an event was lost.
                    async for item in self.catch_up("lost"):
                        yield item
                continue
            version = member.take()
            if version.version <= self.last:
                continue
            if version.version > self.last + 1:
                async for item in self.catch_up("gap"):  # gap repair, includes this event
                    yield item
                continue
            yield self.send(version)
            # Sent, so rendered: the parked members of our group get it now.
            self.hub.release(member)
            await self.keep_access(version)


async def playlist_stream(
    db: Database,
    hub: Hub,
    viewer: str,
    playlist_id: str,
    since_version: int,
    *,
    max_lag: int = 1_000,
    idle_check_s: float = 15.0,
    presence: Presence | None = None,
    group: Hashable | None = None,
    sink: DirectSink | None = None,
) -> AsyncGenerator[StreamItem, None]:
    """Versions after ``since_version`` of a playlist the viewer may see, forever.

    With ``presence``, the viewer is VIEWING the playlist from the moment its
    access was checked until the stream ends (closed, or access lost). With
    ``group`` and ``sink``, versions of its delivery group that the stream
    would send as they come may be written to ``sink`` without it
    (:mod:`chorus.subscriptions.hub`, direct writes): the stream yields only
    the others.

    Raises:
        NotFound: the playlist is missing or not visible to the viewer.
        InvalidInput: ``since_version`` is negative or in the future.
        Forbidden: the viewer lost access while streaming.
    """
    member = await hub.join(playlist_id, group=group, sink=sink)
    stream = _Stream(db, hub, member, viewer, max_lag=max_lag, idle_check_s=idle_check_s)
    try:
        current = await stream.visible()
        if current < 0:
            raise NotFound("playlist not found", field=("playlistId",))
        if not 0 <= since_version <= current:
            raise InvalidInput(
                f"sinceVersion must be between 0 and {current}", field=("sinceVersion",)
            )
        stream.last = since_version
        async with presence.hold(playlist_id, viewer) if presence else contextlib.nullcontext():
            async for item in stream.catch_up("subscribe", far="too far behind"):
                yield item
            async for item in stream.live(member):
                yield item
    finally:
        await hub.leave(member)
