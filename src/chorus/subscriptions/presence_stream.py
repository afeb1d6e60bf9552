"""One watcher's ``playlistPresence``: the current presence first, then each change.

The stream:

1. joins the hub for the playlist's versions (to follow who may read it and
   who its members are) and reads its readers once;
2. refuses a viewer who may not read the playlist (``NotFound``, as
   ``playlist`` answers ``null``);
3. sends a :class:`PresenceSnapshot` — present members listed, others
   counted (:func:`chorus.domain.presence.listing`);
4. then a :class:`PresenceUpdate` whenever what it shows changes: entries
   that joined or changed state, users who left (or stopped being shown),
   and the new count of others. Changes that arrive while the watcher is
   busy are sent together, as one update.

After a version that changes access (members, visibility, deletion) the
readers are read again (once per version for the process,
:class:`~chorus.subscriptions.reader_checks.SharedAccess`): a viewer who lost access
gets :class:`~chorus.domain.errors.Forbidden` and nothing more; a new or
removed member moves between listed and counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from chorus.db.engine import Database
from chorus.domain.changes import DetailsUpdated, MembersChanged, PlaylistDeleted
from chorus.domain.errors import Forbidden, NotFound
from chorus.domain.model import Visibility
from chorus.domain.presence import Listing, UserPresence, listed, listing
from chorus.subscriptions.hub import Hub, Membership
from chorus.subscriptions.presence import Presence, Watch
from chorus.subscriptions.reader_checks import Readers


@dataclass(frozen=True, slots=True)
class PresenceSnapshot:
    """Everything shown now: the first message of a stream."""

    playlist_id: str
    listing: Listing


@dataclass(frozen=True, slots=True)
class PresenceUpdate:
    """What changed since the last message.

    Attributes:
        entries: members who joined or whose state or since changed, as now.
        left: members no longer listed (gone, expired, or no longer members).
        others_count: present non-members now (PUBLIC playlists; else 0).
    """

    playlist_id: str
    entries: tuple[UserPresence, ...]
    left: tuple[str, ...]
    others_count: int


PresenceItem = PresenceSnapshot | PresenceUpdate


@dataclass
class _Shown:
    """What this watcher was sent: the listed members and the counted others."""

    readers: Readers
    listed: dict[str, UserPresence] = field(default_factory=dict)
    counted: set[str] = field(default_factory=set)

    @property
    def public(self) -> bool:
        header = self.readers.header
        return header is not None and header.visibility is Visibility.PUBLIC

    def start(self, present: dict[str, UserPresence]) -> Listing:
        shown = listing(present, self.readers.roles, public=self.public)
        self.listed = {p.user_id: p for p in shown.entries}
        self.counted = {u for u in present if u not in self.readers.roles} if self.public else set()
        return shown

    def update(self, watch: Watch, users: set[str]) -> tuple[list[UserPresence], list[str], bool]:
        """Look at ``users`` again: who is listed anew or changed, who left, if the count moved."""
        changed: list[UserPresence] = []
        left: list[str] = []
        before = len(self.counted)
        for user in sorted(users):
            now = watch.of(user)
            how = None if now is None else listed(user, self.readers.roles, self.public)
            if how is True and now is not None:
                self.counted.discard(user)
                if self.listed.get(user) != now:
                    self.listed[user] = now
                    changed.append(now)
                continue
            if self.listed.pop(user, None) is not None:
                left.append(user)
            if how is False:
                self.counted.add(user)
            else:
                self.counted.discard(user)
        changed.sort(key=lambda p: (p.since, p.user_id))
        return changed, left, len(self.counted) != before


def _changes_access(member: Membership) -> tuple[bool, int | None]:
    """Drain the hub's versions: whether one changed access, and the last such version.

    A stream that overflowed (or heard of a gap) counts as changed, with no
    version: its readers are read afresh.
    """
    changed, version = False, None
    while not member.queue.empty():
        v = member.take()
        if any(isinstance(c, MembersChanged | DetailsUpdated | PlaylistDeleted) for c in v.changes):
            changed, version = True, v.version
    if member.overflowed:
        member.overflowed = False
        changed, version = True, None
    return changed, version


async def presence_stream(
    db: Database, hub: Hub, presence: Presence, viewer: str, playlist_id: str
) -> AsyncGenerator[PresenceItem, None]:
    """The playlist's presence as the viewer may see it: a snapshot, then updates, forever.

    Raises:
        NotFound: the playlist is missing or not visible to the viewer.
        Forbidden: the viewer lost access while watching.
        the presence store's connection errors, when its first read fails.
    """
    wakeup = asyncio.Event()
    member = await hub.join(playlist_id, wakeup)
    try:
        readers = await hub.access(db).fresh(playlist_id)
        if not readers.can_read(viewer):
            raise NotFound("playlist not found", field=("playlistId",))
        async with presence.watch(playlist_id, wakeup) as watch:
            shown = _Shown(readers)
            yield PresenceSnapshot(playlist_id, shown.start(watch.present()))
            while True:
                await wakeup.wait()
                wakeup.clear()
                access, version = _changes_access(member)
                dirty, everything = watch.take()
                if access:
                    shared = hub.access(db)
                    readers = await (
                        shared.fresh(playlist_id)
                        if version is None
                        else shared.readers(playlist_id, version)
                    )
                    if readers.header is not None and readers.header.deleted:
                        raise Forbidden("the playlist was deleted")
                    if not readers.can_read(viewer):
                        raise Forbidden("you no longer have access to this playlist")
                    shown.readers = readers
                    everything = True
                if everything:
                    dirty |= set(shown.listed) | shown.counted | set(watch.present())
                changed, left, moved = shown.update(watch, dirty)
                if changed or left or moved:
                    yield PresenceUpdate(
                        playlist_id, tuple(changed), tuple(left), len(shown.counted)
                    )
    finally:
        await hub.leave(member)


__all__ = ["PresenceItem", "PresenceSnapshot", "PresenceUpdate", "presence_stream"]
