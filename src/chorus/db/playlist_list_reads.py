"""Lists of playlists in any :class:`~chorus.domain.playlist_search.PlaylistOrder`, paged both ways.

Three lists share one keyset pager (:func:`_page`):

* the viewer's playlists (owned or a member of; ``playlist_member.user_id``);
* a user's playlists as another viewer sees them: owned by the user, PUBLIC
  or shared with the viewer (``ix_playlist_owner_id``, then sorted: one
  user's playlists);
* PUBLIC playlists whose title key starts with a query: one range scan of
  ``ix_playlist_visibility_title_key``, already in ``(title key, id)`` order.

Liked Songs and deleted playlists are in none of them. Each function opens
one read transaction: a page and its total agree.

Raises (every function):
    DatabaseUnavailable: the database cannot be reached or lost the connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, exists, func, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.engine import Database
from chorus.db.pages import Page
from chorus.db.repository import playlist_from_row
from chorus.db.tables import TITLE_KEY, UTCDateTime, playlist, playlist_entry, playlist_member
from chorus.domain.model import Playlist, PlaylistKind, Visibility
from chorus.domain.playlist_search import (
    BY_TITLE,
    Direction,
    OrderField,
    PlaylistKey,
    PlaylistOrder,
    PlaylistWindow,
    prefix_end,
)

_COLUMNS = {
    OrderField.CREATED_AT: playlist.c.created_at,
    OrderField.UPDATED_AT: playlist.c.updated_at,
    OrderField.TITLE: playlist.c.title_key,
}


def _listed() -> tuple[ColumnElement[bool], ...]:
    # Liked Songs has its own field (viewer.likedSongs), not a place in these lists.
    return playlist.c.deleted_at.is_(None), playlist.c.kind == PlaylistKind.PLAYLIST.value


def _is_member(user_id: str) -> ColumnElement[bool]:
    return exists().where(
        playlist_member.c.playlist_id == playlist.c.id, playlist_member.c.user_id == user_id
    )


def _row_and_key(order: PlaylistOrder, key: PlaylistKey) -> tuple[Any, Any]:
    """The row's ``(value, id)`` in ``order`` and ``key``'s, as SQL tuples of one type."""
    kind: Any = TITLE_KEY if order.field is OrderField.TITLE else UTCDateTime()
    row = tuple_(_COLUMNS[order.field], playlist.c.id)
    return row, tuple_(literal(key.value, kind), literal(key.playlist_id))


def _keyset(order: PlaylistOrder, key: PlaylistKey, *, beyond: bool) -> ColumnElement[bool]:
    """Rows strictly past ``key`` in ``order`` (``beyond``), or strictly before it."""
    row, at = _row_and_key(order, key)
    ascending = (order.direction is Direction.ASC) == beyond
    past: ColumnElement[bool] = row > at if ascending else row < at
    return past


def _order_by(order: PlaylistOrder, *, reverse: bool) -> tuple[Any, ...]:
    column = _COLUMNS[order.field]
    ascending = (order.direction is Direction.ASC) != reverse
    if ascending:
        return column.asc(), playlist.c.id.asc()
    return column.desc(), playlist.c.id.desc()


async def _page(
    conn: AsyncConnection, where: Sequence[ColumnElement[bool]], window: PlaylistWindow
) -> Page[Playlist]:
    """The ``window`` of the playlists matching ``where``.

    Whether playlists lie beyond the page is exact on both sides, like entries.
    """
    order, size, from_end = window.order, window.size, window.from_end
    after, before = window.after, window.before
    bounds = list(where)
    if after is not None:
        bounds.append(_keyset(order, after, beyond=True))
    if before is not None:
        bounds.append(_keyset(order, before, beyond=False))
    query = select(playlist).where(*bounds).order_by(*_order_by(order, reverse=from_end))
    rows = [playlist_from_row(r) for r in await conn.execute(query.limit(size + 1))]
    more = len(rows) > size
    rows = rows[:size]
    if from_end:
        rows.reverse()
    # The far side: is anything at or beyond the cursor we came from?
    came_from = before if from_end else after
    beyond = False
    if came_from is not None:
        past = _keyset(order, came_from, beyond=from_end)
        row, at = _row_and_key(order, came_from)
        far = select(playlist.c.id).where(*where, past | (row == at)).limit(1)
        beyond = (await conn.scalar(far)) is not None
    total = int(await conn.scalar(select(func.count()).select_from(playlist).where(*where)) or 0)
    has_next, has_previous = (beyond, more) if from_end else (more, beyond)
    return Page(rows, has_next, has_previous, total)


async def viewer_playlists(db: Database, user_id: str, window: PlaylistWindow) -> Page[Playlist]:
    """The ``window`` of the playlists ``user_id`` owns or is a member of (an owner is one)."""
    where = (*_listed(), _is_member(user_id))
    async with db.read() as conn:
        return await _page(conn, where, window)


async def user_playlists(
    db: Database, owner_id: str, viewer_id: str, window: PlaylistWindow
) -> Page[Playlist]:
    """The ``window`` of ``owner_id``'s playlists ``viewer_id`` may read: PUBLIC, or a member's."""
    readable = (playlist.c.visibility == Visibility.PUBLIC.value) | _is_member(viewer_id)
    where = (playlist.c.owner_id == owner_id, *_listed(), readable)
    async with db.read() as conn:
        return await _page(conn, where, window)


async def search_public(db: Database, key: str, window: PlaylistWindow) -> Page[Playlist]:
    """The ``window`` of PUBLIC playlists whose title key starts with ``key``.

    Args:
        key: a title key (:func:`~chorus.domain.playlist_search.title_key`);
            empty: every PUBLIC one.
        window: its order must be :data:`~chorus.domain.playlist_search.BY_TITLE`,
            ``(title key, id)``.

    Raises:
        ValueError: a window of another order (its keysets would not fit the search's range).
    """
    if window.order != BY_TITLE:
        raise ValueError(f"a title search pages by title, not {window.order}")
    where = [playlist.c.visibility == Visibility.PUBLIC.value, *_listed()]
    if key:
        where.append(playlist.c.title_key >= literal(key, TITLE_KEY))
        end = prefix_end(key)
        if end is not None:
            where.append(playlist.c.title_key < literal(end, TITLE_KEY))
    async with db.read() as conn:
        return await _page(conn, where, window)


async def media_counts(db: Database, playlist_id: str) -> tuple[int, dict[str, int]] | None:
    """How often each media id is live in a playlist, and the version that was read at.

    Returns:
        ``(version, {media id: live entries})`` from one read transaction
        (``ix_playlist_entry_media``); ``None`` when there is no such playlist.
    """
    async with db.read() as conn:
        version = await conn.scalar(select(playlist.c.version).where(playlist.c.id == playlist_id))
        if version is None:
            return None
        rows = await conn.execute(
            select(playlist_entry.c.media_id, func.count())
            .where(
                playlist_entry.c.playlist_id == playlist_id, playlist_entry.c.removed_at.is_(None)
            )
            .group_by(playlist_entry.c.media_id)
        )
        return int(version), {media_id: int(n) for media_id, n in rows}
