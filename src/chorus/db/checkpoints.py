"""History checkpoints: a playlist's header and live list as one version left them.

:func:`keep` runs in the commit's transaction (:func:`chorus.db.writer.write_records`)
every :data:`~chorus.domain.version_history.CHECKPOINT_EVERY` versions: one ``INSERT``
of the header and one ``INSERT … SELECT`` of the live rows, so its cost is one
row per live entry, paid once per that many versions. A history read
(:mod:`chorus.db.history_reads`) rewinds from the first checkpoint at or after the
version it wants; retention (:mod:`chorus.db.compaction`) deletes those below
the log floor, which no read can use.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import delete, insert, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.tables import playlist_checkpoint, playlist_checkpoint_entry, playlist_entry
from chorus.domain.model import Playlist, Visibility

_HEADER = (
    "title",
    "description",
    "visibility",
    "collaborative",
    "membership_epoch",
    "entry_count",
    "updated_at",
    "deleted_at",
)
"""The header fields a version can change (the rest come from the head)."""

_COPIED = ("entry_id", "position_key", "media_id", "added_by", "added_at")


async def keep(conn: AsyncConnection, header: Playlist) -> None:
    """Keep ``header`` and the playlist's live entry rows as the checkpoint of its version.

    The entry rows must be at ``header.version`` (the caller's transaction
    wrote them); a checkpoint already kept for that version is left alone.
    """
    if await exists(conn, header.id, header.version):
        return
    values = {name: getattr(header, name) for name in _HEADER}
    values["visibility"] = header.visibility.value
    await conn.execute(
        insert(playlist_checkpoint).values(playlist_id=header.id, version=header.version, **values)
    )
    copied = select(
        playlist_entry.c.playlist_id,
        literal(header.version),
        *(playlist_entry.c[name] for name in _COPIED),
    ).where(playlist_entry.c.playlist_id == header.id, playlist_entry.c.removed_at.is_(None))
    await conn.execute(
        insert(playlist_checkpoint_entry).from_select(["playlist_id", "version", *_COPIED], copied)
    )


async def first_at_or_after(conn: AsyncConnection, head: Playlist, version: int) -> Playlist | None:
    """The header of the oldest checkpoint from ``version`` on, below the head; ``None``: none.

    The fields no version changes (owner, creation, kind) are the head's.
    """
    row = (
        await conn.execute(
            select(playlist_checkpoint)
            .where(
                playlist_checkpoint.c.playlist_id == head.id,
                playlist_checkpoint.c.version >= version,
                playlist_checkpoint.c.version < head.version,
            )
            .order_by(playlist_checkpoint.c.version)
            .limit(1)
        )
    ).first()
    if row is None:
        return None
    m = row._mapping
    values = {name: m[name] for name in _HEADER}
    values["visibility"] = Visibility(m["visibility"])
    return dataclasses.replace(head, version=m["version"], **values)


async def exists(conn: AsyncConnection, playlist_id: str, version: int) -> bool:
    """Whether the checkpoint of ``version`` is kept."""
    found = await conn.scalar(
        select(playlist_checkpoint.c.version).where(
            playlist_checkpoint.c.playlist_id == playlist_id,
            playlist_checkpoint.c.version == version,
        )
    )
    return found is not None


async def delete_below(conn: AsyncConnection, playlist_id: str, floor: int) -> int:
    """Delete the checkpoints of versions below ``floor``; how many were deleted."""
    await conn.execute(
        delete(playlist_checkpoint_entry).where(
            playlist_checkpoint_entry.c.playlist_id == playlist_id,
            playlist_checkpoint_entry.c.version < floor,
        )
    )
    deleted = await conn.execute(
        delete(playlist_checkpoint).where(
            playlist_checkpoint.c.playlist_id == playlist_id,
            playlist_checkpoint.c.version < floor,
        )
    )
    return int(deleted.rowcount or 0)
