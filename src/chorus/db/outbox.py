"""The outbox, read by relays: claim unpublished events, stamp them published.

Rows are claimed in ``event_id`` order with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so several relays share the work and never wait on each other;
never by a high-water mark on ``event_id``, because rows commit out of
sequence order. On SQLite the claim runs in the single writer's transaction.
A relay stamps ``published_at`` only after the bus took the event
(at-least-once: a crash in between publishes it again).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.tables import outbox
from chorus.domain.changes import PlaylistEvent


@dataclass(frozen=True, slots=True)
class OutboxRow:
    event_id: int
    playlist_id: str
    version: int
    payload: PlaylistEvent


async def claim(conn: AsyncConnection, limit: int) -> list[OutboxRow]:
    """Up to ``limit`` unpublished events, oldest first, locked for this transaction."""
    query = (
        select(outbox.c.event_id, outbox.c.playlist_id, outbox.c.version, outbox.c.payload)
        .where(outbox.c.published_at.is_(None))
        .order_by(outbox.c.event_id)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    rows = await conn.execute(query)
    return [OutboxRow(r.event_id, r.playlist_id, r.version, r.payload) for r in rows]


async def stamp(conn: AsyncConnection, event_ids: list[int], now: datetime) -> None:
    """Mark events published."""
    if event_ids:
        await conn.execute(
            update(outbox).where(outbox.c.event_id.in_(event_ids)).values(published_at=now)
        )


async def prune(conn: AsyncConnection, *, older_than: timedelta, now: datetime) -> int:
    """Delete events published more than ``older_than`` ago; how many."""
    result = await conn.execute(delete(outbox).where(outbox.c.published_at < now - older_than))
    return int(result.rowcount or 0)
