"""The outbox, read by relays: claim unpublished events, stamp them published.

Rows are claimed in ``event_id`` order with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so several relays share the work and never wait on each other;
never by a high-water mark on ``event_id``, because rows commit out of
sequence order. A claim also takes a transaction-scoped advisory lock per
playlist (``pg_try_advisory_xact_lock``) and skips playlists another relay
holds: one playlist's events are never split between two relays in flight,
so they are published in version order. On SQLite there is one writer; its
relay reads the backlog without a lock (see :mod:`chorus.events.relay`).
A relay stamps ``published_at`` only after the publisher took the event
(at-least-once: a crash in between publishes it again).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.direct import fetch_in_transaction
from chorus.db.tables import outbox
from chorus.domain.changes import PlaylistEvent

RELAY_LOCK_CLASS = 0x43484F52
"""The first key of the relays' advisory locks ("CHOR"); the second is the playlist's hash."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    event_id: int
    playlist_id: str
    version: int
    payload: PlaylistEvent
    trace_context: str | None = None
    """The committing request's ``traceparent`` (:mod:`chorus.tracing`); ``None``: untraced."""


async def claim(conn: AsyncConnection, limit: int) -> list[OutboxRow]:
    """SQLite: up to ``limit`` unpublished events, oldest first.

    SQLite has one writer and one relay, so nothing is locked; PostgreSQL's relays
    claim with :func:`claim_and_stamp`.
    """
    rows = await conn.execute(_CLAIM, {"limit": limit})
    return [
        OutboxRow(r.event_id, r.playlist_id, r.version, r.payload, r.trace_context) for r in rows
    ]


# Built once: a statement object memoises its cache key and compiled form, and the
# relay runs it after every commit.
_CLAIM = (
    select(
        outbox.c.event_id,
        outbox.c.playlist_id,
        outbox.c.version,
        outbox.c.payload,
        outbox.c.trace_context,
    )
    .where(outbox.c.published_at.is_(None))
    .order_by(outbox.c.event_id)
    .limit(bindparam("limit"))
)


async def claim_and_stamp(conn: AsyncConnection, limit: int, now: datetime) -> list[OutboxRow]:
    """PostgreSQL: :func:`claim` and :func:`stamp` the claimed events ``now``, in one
    statement (the advisory locks, then ``UPDATE … RETURNING``), oldest first.

    The stamp is part of the relay's transaction, so it is seen only when that
    commits, after the publisher took the events; if publishing fails the
    transaction rolls back and the events stay unpublished (at-least-once, as
    with :func:`stamp` after publishing). One round trip per drain besides the
    transaction's ``BEGIN`` and ``COMMIT``, run on asyncpg itself
    (:func:`~chorus.db.direct.fetch_in_transaction`): the embedded relay drains
    after commits, and the locks' statement and the claim's through SQLAlchemy
    were ~3% of a write's CPU (py-spy, bench/writes.py).
    """
    rows = await fetch_in_transaction(
        conn, _CLAIM_AND_STAMP, {"limit": limit, "now": now, "lock_class": RELAY_LOCK_CLASS}
    )
    return sorted(
        (OutboxRow(r[0], r[1], r[2], r[3], r[4]) for r in rows),
        key=lambda row: row.event_id,
    )


async def stamp(conn: AsyncConnection, event_ids: list[int], now: datetime) -> None:
    """Mark events published."""
    if event_ids:
        await conn.execute(_STAMP, {"event_ids": event_ids, "now": now})


_CLAIM_AND_STAMP = text(
    # Playlists are tried oldest unpublished event first (OFFSET 0 keeps the ordered
    # subquery apart, so the locks are tried row by row in order); a CTE calling a
    # volatile function is evaluated once, before the update reads it.
    "WITH heads AS (SELECT playlist_id, min(event_id) AS first FROM outbox "
    "WHERE published_at IS NULL GROUP BY playlist_id ORDER BY first OFFSET 0), "
    "locked AS (SELECT playlist_id FROM heads WHERE pg_try_advisory_xact_lock("
    "CAST(:lock_class AS integer), hashtext(playlist_id)) LIMIT :limit) "
    "UPDATE outbox SET published_at = :now WHERE event_id IN (SELECT event_id FROM outbox "
    "WHERE published_at IS NULL AND playlist_id IN (SELECT playlist_id FROM locked) "
    "ORDER BY event_id LIMIT :limit FOR UPDATE SKIP LOCKED) "
    "RETURNING event_id, playlist_id, version, payload, trace_context"
)
"""Up to ``:limit`` unpublished events of the playlists whose advisory lock this
transaction won (at most ``:limit``), stamped ``:now``."""
_STAMP = (
    update(outbox)
    .where(outbox.c.event_id.in_(bindparam("event_ids", expanding=True)))
    .values(published_at=bindparam("now", type_=outbox.c.published_at.type))
)


async def prune(conn: AsyncConnection, *, older_than: timedelta, now: datetime) -> int:
    """Delete events published more than ``older_than`` ago; how many."""
    result = await conn.execute(delete(outbox).where(outbox.c.published_at < now - older_than))
    return int(result.rowcount or 0)


async def backlog(conn: AsyncConnection, now: datetime) -> tuple[int, float]:
    """``(unpublished events, age in seconds of the oldest, 0 when none)``."""
    row = (
        await conn.execute(
            select(func.count(), func.min(outbox.c.created_at)).where(
                outbox.c.published_at.is_(None)
            )
        )
    ).one()
    count, oldest = int(row[0]), row[1]
    if oldest is None:
        return count, 0.0
    if oldest.tzinfo is None:  # SQLite's aggregate bypasses the column type
        oldest = datetime.fromisoformat(str(oldest)).replace(tzinfo=now.tzinfo)
    return count, max((now - oldest).total_seconds(), 0.0)
