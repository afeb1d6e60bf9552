"""Retention: truncate each playlist's mutation log and its old tombstones.

For every playlist a new *log floor* is chosen — the oldest version whose
changes stay — from ``keep_versions`` (the last N versions) and ``keep_age``
(versions committed within that age); with both, a version stays when either
keeps it. Below the floor:

* log rows are deleted, except those committed within ``retry_window``: their
  operation id, request hash and result stay so a client's retry still
  replays instead of committing twice (the changes are no longer served);
* tombstones removed before the floor version was committed are deleted (an
  anchor on one is then ``ANCHOR_NOT_FOUND``);
* published outbox rows older than ``retry_window`` are deleted;
* history checkpoints of versions below the floor are deleted (no history
  read reaches below it: ``Playlist.atVersion`` answers ``HISTORY_COMPACTED``).

``Playlist.changes`` and subscriptions asking for versions below the floor
answer with a resync (DESIGN §6). Each playlist is compacted in its own short
transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update

from chorus.db import checkpoints, outbox
from chorus.db.engine import Database
from chorus.db.tables import playlist, playlist_entry, playlist_mutation


@dataclass(frozen=True, slots=True)
class CompactionReport:
    playlists: int
    log_rows_deleted: int
    tombstones_deleted: int
    outbox_rows_deleted: int


async def compact(
    db: Database,
    *,
    keep_versions: int | None,
    keep_age: timedelta | None = None,
    retry_window: timedelta = timedelta(hours=24),
    now: datetime,
) -> CompactionReport:
    """Compact every playlist's log; see the module docstring.

    Raises:
        ValueError: neither rule given, or ``keep_versions < 1``.
    """
    if keep_versions is None and keep_age is None:
        raise ValueError("give keep_versions, keep_age or both")
    if keep_versions is not None and keep_versions < 1:
        raise ValueError("keep_versions must be at least 1")
    async with db.read() as conn:
        heads = (await conn.execute(select(playlist.c.id, playlist.c.version))).all()
    log_rows = tombstones = touched = 0
    for playlist_id, version in heads:
        async with db.write() as conn:
            candidates = []
            if keep_versions is not None:
                candidates.append(max(0, version - keep_versions + 1))
            if keep_age is not None:
                newest = await conn.scalar(
                    select(func.min(playlist_mutation.c.version)).where(
                        playlist_mutation.c.playlist_id == playlist_id,
                        playlist_mutation.c.committed_at >= now - keep_age,
                    )
                )
                candidates.append(version + 1 if newest is None else int(newest))
            floor = min(min(candidates), version)  # the head version always stays
            moved = await conn.execute(
                update(playlist)
                .where(playlist.c.id == playlist_id, playlist.c.log_floor < floor)
                .values(log_floor=floor)
            )
            if moved.rowcount:
                touched += 1
            else:  # the floor stays; rows kept for retries may have aged out since
                floor = int(
                    await conn.scalar(
                        select(playlist.c.log_floor).where(playlist.c.id == playlist_id)
                    )
                    or 0
                )
            floor_committed = await conn.scalar(
                select(playlist_mutation.c.committed_at).where(
                    playlist_mutation.c.playlist_id == playlist_id,
                    playlist_mutation.c.version == floor,
                )
            )
            deleted = await conn.execute(
                delete(playlist_mutation).where(
                    playlist_mutation.c.playlist_id == playlist_id,
                    playlist_mutation.c.version < floor,
                    playlist_mutation.c.committed_at < now - retry_window,
                )
            )
            log_rows += int(deleted.rowcount or 0)
            await checkpoints.delete_below(conn, playlist_id, floor)
            if floor_committed is not None:
                removed = await conn.execute(
                    delete(playlist_entry).where(
                        playlist_entry.c.playlist_id == playlist_id,
                        playlist_entry.c.removed_at < floor_committed,
                    )
                )
                tombstones += int(removed.rowcount or 0)
    async with db.write() as conn:
        pruned = await outbox.prune(conn, older_than=retry_window, now=now)
    return CompactionReport(touched, log_rows, tombstones, pruned)
