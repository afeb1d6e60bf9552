"""``feedEvents``: the viewer's feed, live, one shared source per viewer per process.

Every ``feedEvents`` subscription of one viewer in a process reads from the
same :class:`FeedSource`: it holds the viewer's followed playlists (read
once, then kept current), one hub membership per followed playlist, the last
version heard of each and whether the viewer may read it; it turns each new
version into one :class:`~chorus.domain.follows.FeedItem` and hands it to
every subscription's queue. So what a user's subscriptions cost — hub
memberships, reads, the follow set — does not grow with how many they open,
and a version costs no SQL unless it changes who may read the playlist
(then one shared read, :class:`~chorus.subscriptions.reader_checks.SharedAccess`).

**Follows** are not polled. A follow or unfollow made through this process
tells the source at once (:meth:`FeedSources.follows_changed`); one made
through another process reaches it as a notice on the bus
(:meth:`~chorus.subscriptions.bus.Bus.watch_follows`); a notice lost with the
bus connection is covered by the gap the reconnect reports, after which the
source reads the follows again.

**Each version once, or** :class:`FeedResync`. Versions of a followed
playlist count from when the source started hearing it. When events may
have been lost — the bus reported a gap (Redis was away), the source's hub
queue overflowed, or a version skipped ahead — the source reads the heads of
the followed playlists; if one it may read moved past what it heard, every
subscription gets a :class:`FeedResync` ("events lost") instead of the
missing items: read ``viewer.feed`` again. A subscription whose own queue
fills (a slow socket) gets one ("slow consumer") and skips what was queued.

**Budget.** Each subscription weighs the playlists its viewer follows (at
least 1); one viewer's subscriptions in a process may weigh
``FeedLimits.live_weight_max`` in all, and a subscription past it is refused
with ``LIMIT_EXCEEDED``. The last subscription to leave stops the source:
its memberships, its notices and its entry in :class:`FeedSources` go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from chorus.db import follows as follow_rows
from chorus.db import pages
from chorus.db.engine import Database
from chorus.domain.committed import CommittedVersion
from chorus.domain.errors import LimitExceeded
from chorus.domain.follows import FeedItem, FeedLimits, TargetKind
from chorus.domain.model import role_can_read
from chorus.subscriptions.hub import Hub, Membership, changes_access

log = logging.getLogger("chorus.feed")

RETRY_S = 1.0
"""How long a source waits after a failed read (the database away) before trying again."""


@dataclass(frozen=True, slots=True)
class FeedResync:
    """Items may be missing since the last one: read ``viewer.feed`` again, then go on."""

    reason: str


FeedEvent = FeedItem | FeedResync


class FeedSubscription:
    """One ``feedEvents`` subscription's queue, filled by its viewer's source.

    Args:
        size: items it may hold; past them it is a slow consumer (module docstring).
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: deque[FeedEvent] = deque()
        self._overflowed = False
        self._wakeup = asyncio.Event()

    def offer(self, item: FeedEvent) -> None:
        if self._overflowed:
            return
        if len(self._items) >= self._size:
            self._overflowed = True
            self._items.clear()  # all in the feed; the resync says so
        else:
            self._items.append(item)
        self._wakeup.set()

    async def next(self) -> FeedEvent:
        """The next item or resync, waiting for one."""
        while True:
            if self._overflowed:
                self._overflowed = False
                return FeedResync("slow consumer")
            if self._items:
                return self._items.popleft()
            self._wakeup.clear()
            await self._wakeup.wait()


class FeedSource:
    """One viewer's followed playlists, heard once for all its subscriptions in this process."""

    def __init__(self, hub: Hub, db: Database, viewer_id: str) -> None:
        self.hub = hub
        self.db = db
        self.viewer_id = viewer_id
        self.subscriptions: set[FeedSubscription] = set()
        self.members: dict[str, Membership] = {}
        self.last: dict[str, int] = {}
        """Playlist id → the newest version heard (from the head read when first heard)."""
        self.readable: dict[str, bool] = {}
        self.wakeup = asyncio.Event()
        self.stale = False
        """The follows changed since they were read."""
        self.lost = False
        """Events may have been lost (module docstring)."""
        self.started: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def weight(self) -> int:
        """What one subscription of this viewer weighs: the playlists it follows, at least 1."""
        return max(1, len(self.members))

    def follows_changed(self) -> None:
        self.stale = True
        self.wakeup.set()

    def gap(self) -> None:
        self.stale = self.lost = True
        self.wakeup.set()

    async def start(self) -> None:
        await self.hub.bus.watch_follows(self.viewer_id, self.follows_changed)
        await self._rejoin()
        self._task = asyncio.create_task(self._run(), name=f"chorus-feed-{self.viewer_id}")

    async def stop(self) -> None:
        if self.started is not None and not self.started.done():
            self.started.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.started  # so nothing it joined is left behind
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.hub.bus.unwatch_follows(self.viewer_id, self.follows_changed)
        for member in self.members.values():
            await self.hub.leave(member)
        self.members.clear()

    def _tell(self, item: FeedEvent) -> None:
        for subscription in self.subscriptions:
            subscription.offer(item)

    async def _run(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            try:
                await self._turn()
            except Exception:
                log.exception("the live feed of %s failed a read; retrying", self.viewer_id)
                self.gap()
                await asyncio.sleep(RETRY_S)

    async def _turn(self) -> None:
        if self.stale:
            self.stale = False
            await self._rejoin()
        for member in tuple(self.members.values()):
            if member.overflowed:
                member.overflowed = False
                self.lost = True
            while not member.queue.empty():
                await self._hear(member.take())
        if self.lost:
            self.lost = False
            await self._check_heads()

    async def _rejoin(self) -> None:
        """Read the follows; join the playlists newly followed (first), leave the others."""
        async with self.db.read() as conn:
            follows = await follow_rows.follows_of(conn, self.viewer_id)
        followed = {f.target.id for f in follows if f.target.kind is TargetKind.PLAYLIST}
        added = followed - self.members.keys()
        for playlist_id in added:
            self.members[playlist_id] = await self.hub.join(playlist_id, self.wakeup)
        for playlist_id in self.members.keys() - followed:
            await self.hub.leave(self.members.pop(playlist_id))
            self.last.pop(playlist_id, None)
            self.readable.pop(playlist_id, None)
        if added:
            await self._read_heads(added)

    async def _read_heads(self, playlist_ids: set[str]) -> bool:
        """Read heads and access of ``playlist_ids``; whether a readable one moved past ``last``."""
        headers = await pages.playlists_by_id(self.db, playlist_ids)
        roles = await pages.roles_of(self.db, self.viewer_id, playlist_ids)
        behind = False
        for playlist_id in playlist_ids & self.members.keys():
            header = headers.get(playlist_id)
            head = header.version if header is not None else -1
            readable = (
                header is not None
                and not header.system
                and role_can_read(roles.get(playlist_id), header)
            )
            heard = self.last.get(playlist_id)
            if heard is not None and head > heard:
                behind |= readable or self.readable[playlist_id]
            self.last[playlist_id] = max(head, heard if heard is not None else -1)
            self.readable[playlist_id] = readable
        return behind

    async def _check_heads(self) -> None:
        if await self._read_heads(set(self.members)):
            self._tell(FeedResync("events lost"))

    async def _hear(self, version: CommittedVersion) -> None:
        playlist_id = version.playlist_id
        heard = self.last.get(playlist_id)
        if heard is None or version.version <= heard:
            return  # no longer followed, a repeat, or from before the follow
        self.last[playlist_id] = version.version
        if version.version > heard + 1:
            self.lost = True  # the versions between went missing: the heads say so
            self.last[playlist_id] = heard
            return
        if changes_access(version):
            self.readable[playlist_id] = await self.hub.access(self.db).can_read(
                playlist_id, version.version, self.viewer_id
            )
        if self.readable.get(playlist_id):
            self._tell(
                FeedItem(playlist_id, version.version, version.actor_id, version.committed_at)
            )


class FeedSources:
    """This process's :class:`FeedSource`\\ s, one per viewer with a live feed here."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self._sources: dict[str, FeedSource] = {}
        hub.bus.on_gap(self.gap)

    async def open(self, db: Database, viewer_id: str, limits: FeedLimits) -> FeedSubscription:
        """A new subscription to the viewer's source (started if it is the first).

        Raises:
            LimitExceeded: the viewer's subscriptions would weigh more than
                ``limits.live_weight_max`` (module docstring).
        """
        source = self._sources.get(viewer_id)
        if source is None:
            source = self._sources[viewer_id] = FeedSource(self._hub, db, viewer_id)
            source.started = asyncio.ensure_future(source.start())
        subscription = FeedSubscription(self._hub.queue_size)
        source.subscriptions.add(subscription)  # holds the source while it starts
        try:
            assert source.started is not None
            await asyncio.shield(source.started)
            weight = source.weight * len(source.subscriptions)
            if weight > limits.live_weight_max:
                raise LimitExceeded(
                    f"your live feeds here would weigh {weight} (feedEvents subscriptions "
                    f"× the {source.weight} playlists you follow); the limit is "
                    f"{limits.live_weight_max}: close one, or follow fewer playlists"
                )
        except BaseException:
            await self.close(subscription, viewer_id)
            raise
        return subscription

    async def close(self, subscription: FeedSubscription, viewer_id: str) -> None:
        """The subscription ended; the last one stops its viewer's source."""
        source = self._sources.get(viewer_id)
        if source is None or subscription not in source.subscriptions:
            return
        source.subscriptions.discard(subscription)
        if not source.subscriptions:
            del self._sources[viewer_id]
            await source.stop()

    def follows_changed(self, viewer_id: str) -> None:
        """The viewer followed or unfollowed something through this process."""
        source = self._sources.get(viewer_id)
        if source is not None:
            source.follows_changed()

    def gap(self) -> None:
        """Events and follow notices may have been lost: every source checks."""
        for source in self._sources.values():
            source.gap()

    @property
    def source_count(self) -> int:
        """Viewers with a live feed in this process."""
        return len(self._sources)

    @property
    def subscription_count(self) -> int:
        return sum(len(s.subscriptions) for s in self._sources.values())


_of_hub: weakref.WeakKeyDictionary[Hub, FeedSources] = weakref.WeakKeyDictionary()


def feeds_of(hub: Hub) -> FeedSources:
    """The live feeds of the process whose hub this is."""
    found = _of_hub.get(hub)
    if found is None:
        found = _of_hub[hub] = FeedSources(hub)
    return found


async def feed_stream(
    db: Database, hub: Hub, viewer_id: str, limits: FeedLimits
) -> AsyncGenerator[FeedEvent, None]:
    """Feed items of the viewer's followed playlists as they are committed, until closed.

    Raises:
        LimitExceeded: past the viewer's live weight (module docstring).
    """
    feeds = feeds_of(hub)
    subscription = await feeds.open(db, viewer_id, limits)
    try:
        while True:
            yield await subscription.next()
    finally:
        await feeds.close(subscription, viewer_id)
