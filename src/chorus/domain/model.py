"""The playlist aggregate: its header, its members and its entries.

A playlist is read in parts. :class:`Playlist` is the header row (details,
``version``, ``entry_count``), :class:`Member` a role held by a user, and
:class:`Entry` one row of the ordered list, live or a tombstone. Commands load
the header, the actor's membership and only the entries they touch (see
:mod:`chorus.domain.ports`), so an edit costs the same on a long playlist.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """What a member may do (DESIGN §7)."""

    OWNER = "OWNER"
    """Everything: entries, details, members, visibility, deletion."""
    EDITOR = "EDITOR"
    """Entries and title/description, while the playlist is collaborative."""
    VIEWER = "VIEWER"
    """Read only."""


class PlaylistKind(StrEnum):
    """Whether a playlist is the user's own list or one the system keeps for them."""

    PLAYLIST = "PLAYLIST"
    """An ordinary playlist, made by ``createPlaylist``."""
    LIKED_SONGS = "LIKED_SONGS"
    """A user's Liked Songs (:mod:`chorus.domain.library`): PRIVATE, owner-only,
    title fixed, not deletable; changed by ``likeMedia`` / ``unlikeMedia``."""


class Visibility(StrEnum):
    PUBLIC = "PUBLIC"
    """Readable by every authenticated user."""
    PRIVATE = "PRIVATE"
    """Readable by members only."""


@dataclass(frozen=True, slots=True)
class Playlist:
    """The header row of a playlist, as of ``version``.

    ``membership_epoch`` grows by one with every membership change, so a
    long-lived reader (a subscription) can tell cheaply that access must be
    checked again. ``entry_count`` is the number of live entries.
    """

    id: str
    owner_id: str
    title: str
    description: str | None
    visibility: Visibility
    collaborative: bool
    version: int
    membership_epoch: int
    entry_count: int
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
    kind: PlaylistKind = PlaylistKind.PLAYLIST

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def system(self) -> bool:
        """A playlist the system keeps for its owner (Liked Songs), not one they made."""
        return self.kind is not PlaylistKind.PLAYLIST


@dataclass(frozen=True, slots=True)
class Member:
    """``user_id`` holds ``role`` on ``playlist_id`` since ``membership_epoch``."""

    playlist_id: str
    user_id: str
    role: Role
    membership_epoch: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a playlist; a tombstone when ``removed_at`` is set.

    ``entry_id`` is stable for the entry's life. Live entries are ordered by
    ``(position_key, entry_id)`` compared bytewise; a tombstone keeps the key
    it had when removed, so an anchor on it still knows where it stood.
    """

    entry_id: str
    position_key: str
    media_id: str
    added_by: str
    added_at: datetime
    removed_at: datetime | None = None

    @property
    def live(self) -> bool:
        return self.removed_at is None

    @property
    def sort_key(self) -> tuple[str, str]:
        """The keyset ``(position_key, entry_id)`` that orders entries and cursors."""
        return (self.position_key, self.entry_id)


_NEW = object.__new__
# Each field's slot, set directly: Entry is frozen, and its __init__ sets each field
# through object.__setattr__, 0.9 µs an entry in the serving process (~5% of a cold
# page's CPU, py-spy); the slots' own setters take half of that.
(
    _SET_ENTRY_ID,
    _SET_POSITION_KEY,
    _SET_MEDIA_ID,
    _SET_ADDED_BY,
    _SET_ADDED_AT,
    _SET_REMOVED_AT,
) = (getattr(Entry, name).__set__ for name in Entry.__dataclass_fields__)
assert tuple(Entry.__dataclass_fields__) == (
    "entry_id",
    "position_key",
    "media_id",
    "added_by",
    "added_at",
    "removed_at",
), "entries_of sets these fields, in this order"


def entries_of(rows: Iterable[Sequence[Any]], start: int = 0) -> list[Entry]:
    """The :class:`Entry` of each row, from its columns ``start`` to ``start + 5`` in
    the fields' order; a row whose ``entry_id`` column is ``None`` has none.

    The same entries as ``Entry(*row[start:start + 6])``, made without ``__init__``
    (a page is 50 to 100 of them).
    """
    found: list[Entry] = []
    append = found.append
    for row in rows:
        entry_id = row[start]
        if entry_id is None:
            continue
        entry = _NEW(Entry)
        _SET_ENTRY_ID(entry, entry_id)
        _SET_POSITION_KEY(entry, row[start + 1])
        _SET_MEDIA_ID(entry, row[start + 2])
        _SET_ADDED_BY(entry, row[start + 3])
        _SET_ADDED_AT(entry, row[start + 4])
        _SET_REMOVED_AT(entry, row[start + 5])
        append(entry)
    return found


def role_can_read(role: Role | None, playlist: Playlist) -> bool:
    """Whether a user with ``role`` (``None``: not a member) may see ``playlist``."""
    if playlist.deleted:
        return False
    return role is not None or playlist.visibility is Visibility.PUBLIC


def role_can_edit(role: Role | None, playlist: Playlist) -> bool:
    """Whether ``role`` may change entries, title and description.

    A non-collaborative playlist is edited by its owner only (DESIGN §7).
    """
    if role is Role.OWNER:
        return True
    return role is Role.EDITOR and playlist.collaborative
