"""Reading history: a playlist as it was at an older version.

A read at version ``v`` starts from an **anchor** — the head, or a
*checkpoint* (the whole list as a later version ``c`` left it, kept by
storage every :data:`CHECKPOINT_EVERY` versions) — and undoes the log
``v+1 … c`` with the fold a revert uses (:func:`chorus.domain.revert.undo`).
Only the entries those versions touched differ between the anchor and
``v``: :func:`rewind` says what each was then and where it stood at the
anchor, and :func:`overlay` lays them over a keyset window of the anchor's
rows. With a checkpoint at most :data:`CHECKPOINT_EVERY` (plus one group
commit) versions after any version, a read undoes at most that many.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import assert_never

from chorus.domain import changes as ch
from chorus.domain.model import Entry, Playlist
from chorus.domain.ports import SortKey
from chorus.domain.revert import undo

CHECKPOINT_EVERY = 500
"""Versions between two checkpoints: a commit that reaches a multiple of it
keeps the whole list (:func:`checkpoint_due`). Each costs one row per live
entry; a history read undoes at most this many versions (plus one group)."""


def checkpoint_due(before: int, after: int, every: int | None = None) -> bool:
    """Whether a commit taking a playlist from version ``before`` to ``after`` keeps a checkpoint.

    True when ``(before, after]`` holds a positive multiple of ``every``
    (default :data:`CHECKPOINT_EVERY`): a group commit of several versions
    keeps one, at its last version.
    """
    every = CHECKPOINT_EVERY if every is None else every
    return after >= every and before // every < after // every


@dataclass(frozen=True, slots=True)
class Rewound:
    """An older version, as far as it differs from the anchor it was rewound from.

    Attributes:
        playlist: the header at the older version (details, entry count,
            ``updated_at`` = when that version committed).
        then: each entry the later versions touched → its state then
            (``None``: not live then).
        at_anchor: the same entries that are live at the anchor → their
            keyset there (the anchor's rows to leave out).
    """

    playlist: Playlist
    then: Mapping[str, Entry | None]
    at_anchor: Mapping[str, SortKey]


def rewind(
    anchor: Playlist, log: Sequence[tuple[int, Sequence[ch.Change]]], committed_at: datetime
) -> Rewound:
    """The playlist ``len(log)`` versions before ``anchor``.

    Args:
        anchor: the header at version ``c`` (the head, or a checkpoint's).
        log: ``(version, changes)`` of versions ``v+1 … c``, oldest first, without a gap.
        committed_at: when version ``v`` committed (its ``updated_at``).

    Raises:
        ValueError: ``log`` does not end at ``anchor``'s version or has a gap.
    """
    version = anchor.version - len(log)
    if any(v != version + 1 + i for i, (v, _) in enumerate(log)):
        raise ValueError(f"the log does not lead from version {version} to {anchor.version}")
    past = undo(anchor, log)
    now: dict[str, SortKey | None] = {}
    epochs = 0
    deleted = False
    for _, changes in log:
        for change in changes:
            match change:
                case ch.EntriesAdded():
                    now.update((e.entry_id, e.sort_key) for e in change.entries)
                case ch.EntriesMoved():
                    now.update((m.entry.entry_id, m.entry.sort_key) for m in change.moves)
                case ch.EntriesRemoved():
                    now.update((e.entry_id, None) for e in change.entries)
                case ch.MembersChanged():
                    epochs += 1
                case ch.PlaylistDeleted():
                    deleted = True
                case ch.DetailsUpdated() | ch.PlaylistCreated():
                    pass  # the details come from undo(); a creation is version 0
                case _:
                    assert_never(change)
    at_anchor = {i: key for i, key in now.items() if key is not None}
    live_then = sum(1 for e in past.entries.values() if e is not None)
    d = past.details
    header = dataclasses.replace(
        anchor,
        title=d.title,
        description=d.description,
        visibility=d.visibility,
        collaborative=d.collaborative,
        version=version,
        membership_epoch=anchor.membership_epoch - epochs,
        entry_count=anchor.entry_count - len(at_anchor) + live_then,
        updated_at=committed_at,
        deleted_at=None if deleted else anchor.deleted_at,
    )
    then = {
        i: None if e is None else dataclasses.replace(e, removed_at=None)
        for i, e in past.entries.items()
    }
    return Rewound(header, then, at_anchor)


@dataclass(frozen=True, slots=True)
class Window:
    """A keyset range of a list: between ``after`` and ``before`` (``None``: open).

    Both bounds are exclusive (a page between two cursors), or both
    inclusive (whether anything lies at or beyond a cursor).
    """

    after: SortKey | None = None
    before: SortKey | None = None
    inclusive: bool = False

    def __contains__(self, key: SortKey) -> bool:
        if self.inclusive:
            return (self.after is None or key >= self.after) and (
                self.before is None or key <= self.before
            )
        return (self.after is None or key > self.after) and (
            self.before is None or key < self.before
        )


def left_out(rewound: Rewound, window: Window) -> int:
    """How many of the anchor's rows in ``window`` :func:`overlay` leaves out.

    A window read of the anchor asks for this many rows more than it keeps.
    """
    return sum(1 for key in rewound.at_anchor.values() if key in window)


def overlay(
    anchor_rows: Sequence[Entry],
    rewound: Rewound,
    window: Window,
    *,
    limit: int,
    from_end: bool = False,
) -> list[Entry]:
    """Up to ``limit`` entries live at the older version within ``window``, in list order.

    Args:
        anchor_rows: the anchor's live rows in the window nearest its start
            (``from_end``: nearest its end), in list order: all of them, or at
            least ``limit + left_out(rewound, window)``.
        rewound: from :func:`rewind`.
        window: the keyset range.
        limit: entries wanted.
        from_end: keep the ``limit`` nearest the window's end (Relay ``last``).
    """
    kept = [e for e in anchor_rows if e.entry_id not in rewound.then]
    kept.extend(e for e in rewound.then.values() if e is not None and e.sort_key in window)
    kept.sort(key=lambda e: e.sort_key)
    if from_end:
        return kept[-limit:] if limit else []
    return kept[:limit]
