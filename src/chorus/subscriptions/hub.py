"""One bus subscription per playlist per process, shared by every local stream.

A stream :meth:`Hub.join`\\ s its playlist and reads versions from its own
bounded queue; the hub decodes each bus event once for all of them. The
first stream of a playlist subscribes the hub to the bus; the last one to
:meth:`Hub.leave` unsubscribes it. When a stream's queue is
full (a slow consumer: ``queue_size`` versions, or versions holding
``queue_entries`` entries in all) the hub drops events for it and marks it
``overflowed``: the stream then catches up from SQL, or resyncs when it is too
far behind. The entry bound is what keeps a stalled socket's memory small
when versions are heavy (a batch or a revert holds up to 1,000 entries).

**Direct writes.** A membership with a :class:`~chorus.subscriptions.delivery_groups.DirectSink`
(a ``graphql-transport-ws`` socket) whose stream is parked, in sync
(it sent the version just before) and has nothing queued does not need its
stream woken for the next version of its delivery group: the hub wakes one
of the group's in-sync members (the *leader*) the ordinary way; once the
leader's stream has sent that version (its rendering is in
:attr:`Hub.renders`), :meth:`Hub.release` writes the same rendering to the
others' sockets, one non-blocking write each. A follower that is no longer
parked and in sync by then, whose socket buffer is full, or whose group's
rendering is not shared, gets the version in its queue as before, so order,
gap repair, resync and the slow-consumer rule are its stream's as always. A
version that changes access never goes direct: every stream checks it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

from chorus.db.engine import Database
from chorus.domain.changes import (
    DetailsUpdated,
    MembersChanged,
    PlaylistDeleted,
    PlaylistEvent,
    entries_in,
)
from chorus.domain.committed import CommittedVersion
from chorus.subscriptions.bus import Bus
from chorus.subscriptions.catchup import CatchUpSlots
from chorus.subscriptions.delivery_groups import DirectSink, Groups, RenderMemo
from chorus.subscriptions.reader_checks import SharedAccess

log = logging.getLogger("chorus.hub")


def changes_access(version: CommittedVersion) -> bool:
    """Whether a version may change who can read the playlist (members, visibility, deletion)."""
    return any(
        isinstance(c, MembersChanged | DetailsUpdated | PlaylistDeleted) for c in version.changes
    )


@dataclass(eq=False, slots=True)
class Membership:
    """One local stream's place in the hub.

    ``group`` and ``sink``: its delivery group and socket, when its versions
    may be written without waking its stream (module docstring). ``sent``:
    the last version its stream sent (the stream keeps it; a direct write
    advances it). ``parked``: its stream waits for a wake-up with nothing in
    hand. ``led``: versions it was woken for on behalf of parked members of
    its group, with those members, until :meth:`Hub.release`. ``owed``: the
    version a leader is to write to it, until then.
    """

    playlist_id: str
    queue: asyncio.Queue[CommittedVersion]
    max_entries: int = 10_000
    """Entries the queued versions may hold in all; past them it counts as overflowed."""
    entries: int = 0
    """Entries the queued versions hold (:func:`~chorus.domain.changes.entries_in`)."""
    overflowed: bool = False
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    group: Hashable | None = None
    sink: DirectSink | None = None
    sent: int = 0
    parked: bool = False
    led: list[tuple[CommittedVersion, list[Membership]]] | None = None
    owed: CommittedVersion | None = None

    def in_sync(self, version: int) -> bool:
        """Whether ``version`` may be written to its socket directly now."""
        return (
            self.sink is not None
            and self.parked
            and not self.overflowed
            and self.sent == version - 1
            and self.queue.empty()
        )

    def offer(self, version: CommittedVersion) -> None:
        weight = entries_in(version.changes)
        if self.entries + weight > self.max_entries and not self.queue.empty():
            self.overflowed = True  # one version always fits, however heavy
        else:
            try:
                self.queue.put_nowait(version)
                self.entries += weight
            except asyncio.QueueFull:
                self.overflowed = True
        self.wakeup.set()

    def take(self) -> CommittedVersion:
        """The oldest queued version (the queue is not empty)."""
        version = self.queue.get_nowait()
        self.entries -= entries_in(version.changes)
        return version

    def clear(self) -> None:
        """Drop what is queued (the stream reads SQL instead)."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.entries = 0

    def poke(self) -> None:
        """Ask the stream to look at SQL again (an event was lost or unreadable)."""
        self.overflowed = True
        self.wakeup.set()


class Hub:
    """The process's local fanout of bus events to streams.

    Args:
        bus: where events come from.
        queue_size: versions buffered per stream before it counts as overflowed.
        queue_entries: entries those versions may hold in all, likewise.
        catch_ups_per_viewer: pages of the log one viewer's streams catch up at
            once (:class:`~chorus.subscriptions.catchup.CatchUpSlots`).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        queue_size: int = 1_000,
        queue_entries: int = 10_000,
        catch_ups_per_viewer: int = 2,
    ) -> None:
        self._bus = bus
        self._queue_size = queue_size
        self._queue_entries = queue_entries
        self._members: dict[str, set[Membership]] = {}
        self._received: dict[str, int] = {}
        """Per playlist with members here: the newest version its bus delivered."""
        self.arrival_s = 0.0
        """How long events take from their commit to this hub, lately (seconds: each new
        one's time weighs a fifth, a longer one counts whole at once)."""
        self._lock = asyncio.Lock()
        self._access: dict[int, SharedAccess] = {}
        self.renders = RenderMemo()
        """One rendering of a version per delivery group.

        See :mod:`chorus.subscriptions.delivery_groups`.
        """
        self.groups = Groups()
        """The delivery groups of this process's subscriptions, by size."""
        self.catch_ups = CatchUpSlots(catch_ups_per_viewer)
        """Each viewer's streams catch up from the log a few at a time."""
        self.direct_writes = 0
        """Versions written to a socket without waking its stream (:meth:`release`)."""
        bus.on_gap(self.poke_all)

    @property
    def bus(self) -> Bus:
        """Where this hub's events come from."""
        return self._bus

    @property
    def queue_size(self) -> int:
        """Versions buffered per stream before it counts as overflowed."""
        return self._queue_size

    def access(self, db: Database) -> SharedAccess:
        """The readers of a playlist after a version that changed access, read once per version."""
        shared = self._access.get(id(db))
        if shared is None:
            shared = self._access[id(db)] = SharedAccess(db)
        return shared

    def poke_all(self) -> None:
        """Events may have been lost: every local stream reads SQL again."""
        for members in self._members.values():
            for member in members:
                member.poke()

    def received(self, playlist_id: str) -> int:
        """The newest version of the playlist this process heard from its bus while the
        playlist had a stream here (``-1``: none). Each stream either has it, has it
        queued, or gets it from the stream that renders it for its group."""
        return self._received.get(playlist_id, -1)

    def _deliver(self, event: PlaylistEvent) -> None:
        members = list(self._members.get(event["playlist_id"], ()))
        try:
            version = CommittedVersion.from_event(event)  # once for every local stream
        except (KeyError, TypeError, ValueError):
            log.exception("undecodable event for playlist %s", event.get("playlist_id"))
            for member in members:
                member.poke()  # they read the version from SQL instead
            return
        if members and version.version > self.received(version.playlist_id):
            self._received[version.playlist_id] = version.version
            took = max(0.0, time.time() - version.committed_at.timestamp())
            self.arrival_s = max(took, 0.8 * self.arrival_s + 0.2 * took)
        direct = not changes_access(version)
        parked: dict[Hashable, list[Membership]] = {}
        for member in members:
            owed, member.owed = member.owed, None
            if owed is not None:
                # Its leader has not written the last one yet: its stream takes
                # both, in order (no gap to repair from SQL).
                member.offer(owed)
                member.offer(version)
            elif direct and member.in_sync(version.version):
                parked.setdefault(member.group, []).append(member)
            else:
                member.offer(version)
        for followers in parked.values():
            leader = followers.pop()  # renders the version for the others
            leader.offer(version)
            if followers:
                for follower in followers:
                    follower.owed = version
                if leader.led is None:
                    leader.led = []
                leader.led.append((version, followers))

    def release(self, leader: Membership) -> None:
        """Write the versions ``leader`` was woken for to the parked members of its group.

        Called by the leader's stream once it sent them, before it parks and as
        it ends. A follower gets the group's shared rendering on its socket if
        it is still parked and in sync and its socket takes it at once; else
        the version goes to its queue (its stream then does what it always did).
        """
        led, leader.led = leader.led, None
        for version, followers in led or ():
            rendering = self.renders.peek(leader.group, version.version)
            for follower in followers:
                if follower.owed is not version:
                    continue  # its stream was given it meanwhile
                follower.owed = None
                sink = follower.sink
                if (
                    rendering is not None
                    and sink is not None
                    and follower.in_sync(version.version)
                    and sink.write(rendering)
                ):
                    follower.sent = version.version
                    self.direct_writes += 1
                    self.renders.reuses += 1
                else:
                    follower.offer(version)

    async def join(
        self,
        playlist_id: str,
        wakeup: asyncio.Event | None = None,
        *,
        group: Hashable | None = None,
        sink: DirectSink | None = None,
    ) -> Membership:
        """A place for one stream; ``wakeup``: an event it shares with its other memberships.

        ``group`` and ``sink``: its delivery group and socket, for direct
        writes (module docstring); without a sink its stream gets every version.
        """
        member = Membership(
            playlist_id,
            asyncio.Queue(self._queue_size),
            self._queue_entries,
            group=group,
            sink=sink,
        )
        if wakeup is not None:
            member.wakeup = wakeup
        async with self._lock:
            members = self._members.get(playlist_id)
            if members is None:
                await self._bus.subscribe(playlist_id, self._deliver)
                members = self._members[playlist_id] = set()
            members.add(member)
        return member

    async def leave(self, member: Membership) -> None:
        self.release(member)  # what it led goes on without it
        async with self._lock:
            members = self._members.get(member.playlist_id)
            if members is None or member not in members:
                return
            members.discard(member)
            if not members:
                del self._members[member.playlist_id]
                self._received.pop(member.playlist_id, None)
                await self._bus.unsubscribe(member.playlist_id, self._deliver)

    @property
    def stream_count(self) -> int:
        return sum(len(m) for m in self._members.values())

    @property
    def playlist_count(self) -> int:
        """Playlists this process holds a bus subscription for."""
        return len(self._members)
