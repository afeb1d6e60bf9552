"""Reading a playlist at an older version: the anchor, the log since, a keyset window.

A read at version ``v`` (:func:`rewound_at`) takes the first checkpoint at or
after ``v`` (:mod:`chorus.db.checkpoints`), or the head when none lies before
it, reads the log rows ``v … anchor`` through the log's primary key and
rewinds (:func:`chorus.domain.version_history.rewind`). A page (:func:`window`) then
reads the anchor's rows in the page's keyset window — the live rows
(``ix_playlist_entry_order``) or the checkpoint's (its primary key) — and
lays the rewound entries over them (:func:`chorus.domain.version_history.overlay`).
Every function runs in the caller's transaction.

A rewind costs what the versions it undoes hold: 500 versions of 1,000
moved entries each are half a million changes to decode and undo (about
0.5 s of pure Python). The caller bounds it (``max_entries``: the rewind is
refused before it starts, :class:`TooHeavy`), and a long one runs in a
worker thread so that the event loop keeps its turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, Text, cast, func, null, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import checkpoints, repository
from chorus.db.engine import json_loads
from chorus.db.tables import playlist_checkpoint_entry, playlist_entry, playlist_mutation
from chorus.domain.changes import Change, entries_in
from chorus.domain.model import Entry, Playlist
from chorus.domain.version_history import Rewound, Window, left_out, overlay, rewind

OFF_LOOP_ROWS = 20
"""Rewinds of more log rows than this decode and undo in a worker thread."""

_REWINDING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chorus-rewind")
"""One thread: several would each take the GIL in turn, and the loop would wait behind all."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where a rewind started: the head, or the checkpoint of ``version``."""

    version: int
    checkpoint: bool


@dataclass(frozen=True, slots=True)
class AtVersion:
    """A playlist at an older version and the anchor it was rewound from.

    ``replayed`` is how many log rows the rewind undid, ``entries`` how many
    entries of changes they held (:func:`~chorus.domain.changes.entries_in`).
    """

    rewound: Rewound
    anchor: Anchor
    replayed: int
    entries: int = 0


@dataclass(frozen=True, slots=True)
class TooHeavy:
    """The rewind would undo ``entries`` entries of changes, more than it was allowed."""

    entries: int
    allowed: int


@dataclass(frozen=True, slots=True)
class NotKept:
    """The version is out of reach: above the head, or below the log floor.

    ``oldest`` is the oldest version a read can reach (the log floor).
    """

    current: int
    oldest: int


async def rewound_at(
    conn: AsyncConnection, playlist_id: str, version: int, *, max_entries: int | None = None
) -> AtVersion | NotKept | TooHeavy | None:
    """The playlist at ``version``, rewound from the nearest anchor after it.

    Args:
        max_entries: the most entries of changes (added, removed, moved:
            :func:`~chorus.domain.changes.entries_in`) the versions undone may
            hold; ``None``: no bound.

    Returns:
        ``None`` when there is no such playlist; :class:`NotKept` when
        ``version`` is negative, above the head, or below the log floor
        (compacted away); :class:`TooHeavy` (nothing undone) when the versions
        between ``version`` and the anchor hold more than ``max_entries``.
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
    if max_entries is not None:
        # Weighed in SQL, before a row is read: a refusal costs one aggregate,
        # not the transfer and decoding of up to 500 large payloads.
        weight = await _entries_between(conn, playlist_id, version, anchor.version)
        if weight > max_entries:
            return TooHeavy(weight, max_entries)
    # Rows v … anchor: v's own row tells when it committed.
    rows = (
        await conn.execute(
            select(
                playlist_mutation.c.version,
                playlist_mutation.c.committed_at,
                # Not ``result``: a rewind needs the changes only. As text: it is
                # decoded with the rest of the rewind, off the loop when long.
                cast(playlist_mutation.c.payload, Text).label("payload"),
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
    payloads = [(r.version, r.payload) for r in rows[1:]]
    if len(payloads) > OFF_LOOP_ROWS:
        loop = asyncio.get_running_loop()
        rebuilt = await loop.run_in_executor(
            _REWINDING, _rebuild, anchor, payloads, rows[0].committed_at, max_entries
        )
    else:
        rebuilt = _rebuild(anchor, payloads, rows[0].committed_at, max_entries)
    if isinstance(rebuilt, TooHeavy):
        return rebuilt
    rewound, entries = rebuilt
    return AtVersion(rewound, Anchor(anchor.version, anchor is not head), len(payloads), entries)


ENTRY_KEY = '"entry_id"'
"""The key every entry of a change carries once in a log row's JSON (added, removed, moved)."""


async def _entries_between(conn: AsyncConnection, playlist_id: str, after: int, upto: int) -> int:
    """Entries of changes in the log rows ``after + 1 … upto``, counted in SQL.

    Each added, removed or moved entry's wire form holds one ``"entry_id"``
    key (:func:`chorus.domain.changes.entry_to_wire`), and a key inside a
    string value would be escaped (``\\"``), so the count of that text in the
    stored JSON is :func:`~chorus.domain.changes.entries_in` of the row.
    """
    text = cast(playlist_mutation.c.payload, Text)
    per_row = (func.length(text) - func.length(func.replace(text, ENTRY_KEY, ""))) / len(ENTRY_KEY)
    total = await conn.scalar(
        select(func.coalesce(func.sum(per_row), 0)).where(
            playlist_mutation.c.playlist_id == playlist_id,
            playlist_mutation.c.version > after,
            playlist_mutation.c.version <= upto,
        )
    )
    return int(total or 0)


def _rebuild(
    anchor: Playlist,
    payloads: Sequence[tuple[int, str]],
    committed_at: datetime,
    max_entries: int | None,
) -> tuple[Rewound, int] | TooHeavy:
    """Decode the log rows, weigh them against ``max_entries``, then rewind (pure: no I/O).

    Returns:
        The rewind and the entries of changes it undid.
    """
    log: list[tuple[int, tuple[Change, ...]]] = []
    entries = 0
    for row_version, payload in payloads:
        changes = repository.decode_payload(json_loads(payload))
        entries += entries_in(changes)
        log.append((row_version, changes))
    if max_entries is not None and entries > max_entries:
        return TooHeavy(entries, max_entries)
    return rewind(anchor, log, committed_at), entries


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
