"""Reverting: the changes that bring a playlist back to an older version.

The log after the target version is undone newest first; each change carries
the values it replaced (:mod:`chorus.domain.changes`), so this touches only the
entries changed since, never the whole list. Members, visibility and
collaboration are access settings and are not reverted; entries, title and
description are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import assert_never

from chorus.domain.changes import (
    Change,
    Details,
    DetailsUpdated,
    EntriesAdded,
    EntriesMoved,
    EntriesRemoved,
    MembersChanged,
    Move,
    PlaylistCreated,
    PlaylistDeleted,
)
from chorus.domain.model import Entry, Playlist


@dataclass(frozen=True, slots=True)
class PastState:
    """What the log says about an older version.

    ``entries`` maps each entry touched since to its state then (``None``:
    not live then); ``details`` are the details then (a revert restores only
    their title and description; a history read shows them all).
    """

    entries: dict[str, Entry | None]
    details: Details


def undo(playlist: Playlist, log: Sequence[tuple[int, Sequence[Change]]]) -> PastState:
    """The state before every version in ``log`` (oldest first), as far as it changed."""
    then: dict[str, Entry | None] = {}
    details = Details(
        playlist.title, playlist.description, playlist.visibility, playlist.collaborative
    )
    for _, changes in reversed(log):
        for change in reversed(changes):
            match change:
                case EntriesAdded():
                    then.update((e.entry_id, None) for e in change.entries)
                case EntriesRemoved():
                    then.update((e.entry_id, e) for e in change.entries)
                case EntriesMoved():
                    for m in change.moves:
                        old = dataclasses.replace(m.entry, position_key=m.previous_position_key)
                        then[m.entry.entry_id] = old
                case DetailsUpdated():
                    details = change.previous
                case MembersChanged() | PlaylistCreated() | PlaylistDeleted():
                    pass  # members and lifetime are no part of the list
                case _:
                    assert_never(change)
    return PastState(then, details)


def changes_to(playlist: Playlist, past: PastState, now: Mapping[str, Entry]) -> list[Change]:
    """Changes that turn the current state into ``past``.

    Args:
        playlist: the current header.
        past: from :func:`undo`.
        now: the current rows (live or tombstone) of the entries in ``past``.
    """
    removed: list[Entry] = []
    moved: list[Move] = []
    added: list[Entry] = []
    for entry_id, old in past.entries.items():
        cur = now.get(entry_id)
        if cur is None or not cur.live:
            if old is not None:
                added.append(dataclasses.replace(old, removed_at=None))
        elif old is None:
            removed.append(cur)
        elif cur.position_key != old.position_key:
            moved.append(Move(dataclasses.replace(old, removed_at=None), cur.position_key))
    changes: list[Change] = []
    if removed:
        changes.append(EntriesRemoved(tuple(sorted(removed, key=lambda e: e.sort_key))))
    if moved:
        changes.append(EntriesMoved(tuple(sorted(moved, key=lambda m: m.entry.sort_key))))
    if added:
        changes.append(EntriesAdded(tuple(sorted(added, key=lambda e: e.sort_key))))
    previous = Details(
        playlist.title, playlist.description, playlist.visibility, playlist.collaborative
    )
    # Visibility and collaboration are access settings: a revert keeps today's.
    details = dataclasses.replace(
        previous, title=past.details.title, description=past.details.description
    )
    if details != previous:
        changes.append(DetailsUpdated(details, previous))
    return changes
