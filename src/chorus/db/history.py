"""Reading a playlist at an older version: the anchor, the log since, a keyset window.

A read at version ``v`` (:func:`rewound_at`) takes the first checkpoint at or
after ``v`` (:mod:`chorus.db.checkpoints`), or the head when none lies before
it, reads the log rows ``v … anchor`` through the log's primary key and
rewinds (:func:`chorus.domain.history.rewind`). A page (:func:`window`) then
reads the anchor's rows in the page's keyset window — the live rows
(``ix_playlist_entry_order``) or the checkpoint's (its primary key) — and
lays the rewound entries over them (:func:`chorus.domain.history.overlay`).
Every function runs in the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, null, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import checkpoints, repository
from chorus.db.tables import playlist_checkpoint_entry, playlist_entry, playlist_mutation
from chorus.domain.history import Rewound, Window, left_out, overlay, rewind
from chorus.domain.model import Entry


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where a rewind started: the head, or the checkpoint of ``version``."""

    version: int
    checkpoint: bool


@dataclass(frozen=True, slots=True)
class AtVersion:
    """A playlist at an older version and the anchor it was rewound from.

    ``replayed`` is how many log rows the rewind undid.
    """

    rewound: Rewound
    anchor: Anchor
    replayed: int


@dataclass(frozen=True, slots=True)
class NotKept:
    """The version is out of reach: above the head, or below the log floor.

    ``oldest`` is the oldest version a read can reach (the log floor).
    """

    current: int
    oldest: int


async def rewound_at(
    conn: AsyncConnection, playlist_id: str, version: int
) -> AtVersion | NotKept | None:
    """The playlist at ``version``, rewound from the nearest anchor after it.

    Returns:
        ``None`` when there is no such playlist; :class:`NotKept` when
        ``version`` is negative, above the head, or below the log floor
        (compacted away).
    """
    head = await repository.get_playlist(conn, playlist_id)
    floor = await repository.log_floor(conn, playlist_id)
    if head is None or floor is None:
        return None
    if not floor <= version <= head.version:
        return NotKept(head.version, floor)
    anchor = await checkpoints.first_at_or_after(conn, head, version) or head
    if anchor.version == version:
        rewound = Rewound(anchor, {}, {})
        return AtVersion(rewound, Anchor(anchor.version, anchor is not head), 0)
    # Rows v … anchor: v's own row tells when it committed.
    rows = (
        await conn.execute(
            select(
                playlist_mutation.c.version,
                playlist_mutation.c.committed_at,
                playlist_mutation.c.payload,  # not ``result``: a rewind needs the changes only
            )
            .where(
                playlist_mutation.c.playlist_id == playlist_id,
                playlist_mutation.c.version >= version,
                playlist_mutation.c.version <= anchor.version,
            )
            .order_by(playlist_mutation.c.version)
        )
    ).all()
    # Never rewind across a hole (rows deleted by hand): that version is not kept.
    if [r.version for r in rows] != list(range(version, anchor.version + 1)):
        return NotKept(head.version, max(floor, version + 1))
    log = [(r.version, repository.decode_payload(r.payload)) for r in rows[1:]]
    rewound = rewind(anchor, log, rows[0].committed_at)
    return AtVersion(rewound, Anchor(anchor.version, anchor is not head), len(log))


async def anchor_holds(conn: AsyncConnection, playlist_id: str, anchor: Anchor) -> bool:
    """Whether ``anchor``'s rows are still those a rewind from it read.

    A checkpoint holds until compaction deletes it; the head until the next commit.
    """
    if anchor.checkpoint:
        return await checkpoints.exists(conn, playlist_id, anchor.version)
    head = await repository.get_playlist(conn, playlist_id)
    return head is not None and head.version == anchor.version


def _anchor_rows(playlist_id: str, anchor: Anchor) -> tuple[Select[Any], list[ColumnElement[Any]]]:
    """The query of an anchor's live rows and the ``(position_key, entry_id)`` it orders by."""
    if anchor.checkpoint:
        t = playlist_checkpoint_entry
        query = select(
            t.c.entry_id,
            t.c.position_key,
            t.c.media_id,
            t.c.added_by,
            t.c.added_at,
            null().label("removed_at"),
        ).where(t.c.playlist_id == playlist_id, t.c.version == anchor.version)
        return query, [t.c.position_key, t.c.entry_id]
    e = playlist_entry
    query = select(
        e.c.entry_id, e.c.position_key, e.c.media_id, e.c.added_by, e.c.added_at, e.c.removed_at
    ).where(e.c.playlist_id == playlist_id, e.c.removed_at.is_(None))
    return query, [e.c.position_key, e.c.entry_id]


async def window(
    conn: AsyncConnection,
    playlist_id: str,
    at: AtVersion,
    within: Window,
    *,
    limit: int,
    from_end: bool = False,
) -> list[Entry]:
    """Up to ``limit`` entries live at ``at``'s version within ``within``, in list order.

    ``from_end``: the ``limit`` nearest the window's end (Relay ``last``).
    The anchor must still hold (:func:`anchor_holds`).
    """
    query, order = _anchor_rows(playlist_id, at.anchor)
    key = tuple_(*order)
    if within.after is not None:
        query = query.where(
            key >= tuple_(*within.after) if within.inclusive else key > tuple_(*within.after)
        )
    if within.before is not None:
        query = query.where(
            key <= tuple_(*within.before) if within.inclusive else key < tuple_(*within.before)
        )
    query = query.order_by(*(c.desc() for c in order) if from_end else order)
    wanted = limit + left_out(at.rewound, within)
    rows = [repository.entry_from_row(r) for r in await conn.execute(query.limit(wanted))]
    return overlay(
        rows[::-1] if from_end else rows, at.rewound, within, limit=limit, from_end=from_end
    )
