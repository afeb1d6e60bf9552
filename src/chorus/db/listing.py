"""Batched and paged reads for the API: playlists by id, roles, members.

Batched reads serve the per-request DataLoaders (one query per batch); paged
reads are keyset pages over an index, ``limit`` rows after an exclusive
keyset position. Lists of playlists are in :mod:`chorus.db.playlist_list_reads`.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.repository import playlist_from_row
from chorus.db.tables import playlist, playlist_entry, playlist_member
from chorus.domain.model import Member, Playlist, Role


async def get_playlists(
    conn: AsyncConnection, playlist_ids: Collection[str]
) -> dict[str, Playlist]:
    """Header rows by id, deleted ones included; unknown ids are absent."""
    if not playlist_ids:
        return {}
    rows = await conn.execute(select(playlist).where(playlist.c.id.in_(list(set(playlist_ids)))))
    return {r.id: playlist_from_row(r) for r in rows}


async def get_roles(
    conn: AsyncConnection, user_id: str, playlist_ids: Collection[str]
) -> dict[str, Role]:
    """The roles ``user_id`` holds in these playlists; non-member playlists are absent."""
    if not playlist_ids:
        return {}
    rows = await conn.execute(
        select(playlist_member.c.playlist_id, playlist_member.c.role).where(
            playlist_member.c.user_id == user_id,
            playlist_member.c.playlist_id.in_(list(set(playlist_ids))),
        )
    )
    return {r.playlist_id: Role(r.role) for r in rows}


async def members_page(
    conn: AsyncConnection, playlist_id: str, *, after_user: str | None, limit: int
) -> list[Member]:
    """Members ordered by user id, strictly after ``after_user``."""
    query = select(playlist_member).where(playlist_member.c.playlist_id == playlist_id)
    if after_user is not None:
        query = query.where(playlist_member.c.user_id > after_user)
    rows = await conn.execute(query.order_by(playlist_member.c.user_id).limit(limit))
    return [Member(r.playlist_id, r.user_id, Role(r.role), r.membership_epoch) for r in rows]


async def count_members(conn: AsyncConnection, playlist_id: str) -> int:
    return int(
        await conn.scalar(
            select(func.count())
            .select_from(playlist_member)
            .where(playlist_member.c.playlist_id == playlist_id)
        )
        or 0
    )


async def media_in(conn: AsyncConnection, playlist_id: str, media_ids: Collection[str]) -> set[str]:
    """Which of ``media_ids`` have a live entry in the playlist (``ix_playlist_entry_media``)."""
    if not media_ids:
        return set()
    query = select(playlist_entry.c.media_id).where(
        playlist_entry.c.playlist_id == playlist_id,
        playlist_entry.c.removed_at.is_(None),
        playlist_entry.c.media_id.in_(list(media_ids)),
    )
    return {row.media_id for row in await conn.execute(query)}
