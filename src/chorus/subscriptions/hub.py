"""One bus subscription per playlist per process, shared by every local stream.

A stream :meth:`Hub.join`\\ s its playlist and reads versions from its own
bounded queue; the hub decodes each bus event once for all of them. The
first stream of a playlist subscribes the hub to the bus; the last one to
:meth:`Hub.leave` unsubscribes it. When a stream's queue is
full (a slow consumer) the hub drops events for it and marks it
``overflowed``: the stream then catches up from SQL, or resyncs when it is too
far behind.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from chorus.db.engine import Database
from chorus.domain.changes import PlaylistEvent
from chorus.domain.committed import CommittedVersion
from chorus.subscriptions.access import SharedAccess
from chorus.subscriptions.bus import Bus
from chorus.subscriptions.groups import Groups, RenderMemo

log = logging.getLogger("chorus.hub")


@dataclass(eq=False)
class Membership:
    """One local stream's place in the hub."""

    playlist_id: str
    queue: asyncio.Queue[CommittedVersion]
    overflowed: bool = False
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, version: CommittedVersion) -> None:
        try:
            self.queue.put_nowait(version)
        except asyncio.QueueFull:
            self.overflowed = True
        self.wakeup.set()

    def poke(self) -> None:
        """Ask the stream to look at SQL again (an event was lost or unreadable)."""
        self.overflowed = True
        self.wakeup.set()


class Hub:
    """The process's local fanout of bus events to streams.

    Args:
        bus: where events come from.
        queue_size: events buffered per stream before it counts as overflowed.
    """

    def __init__(self, bus: Bus, *, queue_size: int = 1_000) -> None:
        self._bus = bus
        self._queue_size = queue_size
        self._members: dict[str, set[Membership]] = {}
        self._lock = asyncio.Lock()
        self._access: dict[int, SharedAccess] = {}
        self.renders = RenderMemo()
        """One rendering of a version per delivery group (:mod:`chorus.subscriptions.groups`)."""
        self.groups = Groups()
        """The delivery groups of this process's subscriptions, by size."""
        bus.on_gap(self.poke_all)

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

    def _deliver(self, event: PlaylistEvent) -> None:
        members = list(self._members.get(event["playlist_id"], ()))
        try:
            version = CommittedVersion.from_event(event)  # once for every local stream
        except (KeyError, TypeError, ValueError):
            log.exception("undecodable event for playlist %s", event.get("playlist_id"))
            for member in members:
                member.poke()  # they read the version from SQL instead
            return
        for member in members:
            member.offer(version)

    async def join(self, playlist_id: str, wakeup: asyncio.Event | None = None) -> Membership:
        """A place for one stream; ``wakeup``: an event it shares with its other memberships."""
        member = Membership(playlist_id, asyncio.Queue(self._queue_size))
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
        async with self._lock:
            members = self._members.get(member.playlist_id)
            if members is None or member not in members:
                return
            members.discard(member)
            if not members:
                del self._members[member.playlist_id]
                await self._bus.unsubscribe(member.playlist_id, self._deliver)

    @property
    def stream_count(self) -> int:
        return sum(len(m) for m in self._members.values())

    @property
    def playlist_count(self) -> int:
        """Playlists this process holds a bus subscription for."""
        return len(self._members)
