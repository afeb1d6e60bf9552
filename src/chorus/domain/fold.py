"""Folding canonical changes into state.

:func:`advance` moves a playlist header to its next version; :class:`PlaylistState`
is a whole playlist in memory (header, members, every entry) that
:meth:`PlaylistState.apply` advances one version at a time. Folding the log
from version 0 through :class:`PlaylistState` rebuilds the exact list (DESIGN §3);
storage applies the very same changes to its rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from chorus.domain import changes as ch
from chorus.domain.model import Entry, Playlist, Role


def created(playlist_id: str, change: ch.PlaylistCreated) -> Playlist:
    """The header of a playlist at version 0."""
    details = change.details
    return Playlist(
        id=playlist_id,
        owner_id=change.owner_id,
        title=details.title,
        description=details.description,
        visibility=details.visibility,
        collaborative=details.collaborative,
        version=0,
        membership_epoch=0,
        entry_count=0,
        created_at=change.created_at,
        updated_at=change.created_at,
        kind=change.kind,
    )


def advance(playlist: Playlist, changes: Iterable[ch.Change], committed_at: datetime) -> Playlist:
    """The header after one more version made of ``changes``."""
    p = dataclasses.replace(playlist, version=playlist.version + 1, updated_at=committed_at)
    for change in changes:
        match change:
            case ch.EntriesAdded():
                p = dataclasses.replace(p, entry_count=p.entry_count + len(change.entries))
            case ch.EntriesRemoved():
                p = dataclasses.replace(p, entry_count=p.entry_count - len(change.entries))
            case ch.DetailsUpdated():
                d = change.details
                p = dataclasses.replace(
                    p,
                    title=d.title,
                    description=d.description,
                    visibility=d.visibility,
                    collaborative=d.collaborative,
                )
            case ch.MembersChanged():
                p = dataclasses.replace(p, membership_epoch=p.membership_epoch + 1)
            case ch.PlaylistDeleted():
                p = dataclasses.replace(p, deleted_at=change.deleted_at)
            case ch.EntriesMoved() | ch.PlaylistCreated():
                pass
            case _:
                assert_never(change)
    return p


@dataclass
class PlaylistState:
    """A whole playlist in memory: header, members, entries and tombstones."""

    playlist: Playlist
    members: dict[str, Role] = field(default_factory=dict)
    entries: dict[str, Entry] = field(default_factory=dict)

    @classmethod
    def create(cls, playlist_id: str, change: ch.PlaylistCreated) -> PlaylistState:
        return cls(created(playlist_id, change), {change.owner_id: Role.OWNER})

    def live(self) -> list[Entry]:
        """Live entries in list order."""
        return sorted((e for e in self.entries.values() if e.live), key=lambda e: e.sort_key)

    def apply(self, version: int, changes: Iterable[ch.Change], committed_at: datetime) -> None:
        """Advance to ``version``.

        Raises:
            ValueError: ``version`` is not the next one.
        """
        if version != self.playlist.version + 1:
            raise ValueError(f"version {version} does not follow {self.playlist.version}")
        changes = list(changes)
        for change in changes:
            match change:
                case ch.EntriesAdded():
                    for e in change.entries:
                        self.entries[e.entry_id] = e
                case ch.EntriesMoved():
                    for m in change.moves:
                        self.entries[m.entry.entry_id] = m.entry
                case ch.EntriesRemoved():
                    for e in change.entries:
                        self.entries[e.entry_id] = dataclasses.replace(e, removed_at=committed_at)
                case ch.MembersChanged():
                    if change.role is None:
                        self.members.pop(change.user_id, None)
                    else:
                        self.members[change.user_id] = change.role
                case ch.DetailsUpdated() | ch.PlaylistDeleted() | ch.PlaylistCreated():
                    pass  # the header's part, folded by advance() below
                case _:
                    assert_never(change)
        self.playlist = advance(self.playlist, changes, committed_at)
