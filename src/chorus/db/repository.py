"""Reads: rows to domain values, keyset pages, the log, and the command view.

Every function takes the :class:`~sqlalchemy.ext.asyncio.AsyncConnection` of
the caller's transaction and reads through an index: the playlist and member
primary keys, ``ix_playlist_entry_order`` for anything in list order, the
mutation log's primary key for history.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Integer,
    Row,
    Select,
    bindparam,
    func,
    null,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.direct import fetch_direct, fetch_in_transaction
from chorus.db.tables import playlist, playlist_entry, playlist_member, playlist_mutation
from chorus.domain.changes import Change, ChangeWire, decode_change
from chorus.domain.committed import CommittedVersion
from chorus.domain.model import (
    Entry,
    Member,
    Playlist,
    PlaylistKind,
    Role,
    Visibility,
    entries_of,
)
from chorus.domain.ports import SortKey
from chorus.domain.revert import undo

_entry_columns = (
    playlist_entry.c.entry_id,
    playlist_entry.c.position_key,
    playlist_entry.c.media_id,
    playlist_entry.c.added_by,
    playlist_entry.c.added_at,
    playlist_entry.c.removed_at,
)
_live_order = tuple_(playlist_entry.c.position_key, playlist_entry.c.entry_id)


def _live(playlist_id: str) -> tuple[Any, Any]:
    """The WHERE clause of live entries of one playlist (``ix_playlist_entry_order``)."""
    return playlist_entry.c.playlist_id == playlist_id, playlist_entry.c.removed_at.is_(None)


def playlist_from_row(row: Any) -> Playlist:
    """A :class:`Playlist` from a ``playlist`` row or mapping."""
    m = row._mapping if isinstance(row, Row) else row
    return Playlist(
        id=m["id"],
        owner_id=m["owner_id"],
        title=m["title"],
        description=m["description"],
        visibility=Visibility(m["visibility"]),
        collaborative=m["collaborative"],
        version=m["version"],
        membership_epoch=m["membership_epoch"],
        entry_count=m["entry_count"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        deleted_at=m["deleted_at"],
        kind=PlaylistKind(m["kind"]),
    )


def entry_from_row(row: Any) -> Entry:
    """An :class:`Entry` from a row holding the ``playlist_entry`` columns."""
    return Entry(
        entry_id=row.entry_id,
        position_key=row.position_key,
        media_id=row.media_id,
        added_by=row.added_by,
        added_at=row.added_at,
        removed_at=row.removed_at,
    )


async def get_playlist(
    conn: AsyncConnection, playlist_id: str, *, for_update: bool = False
) -> Playlist | None:
    """The header row, deleted or not; ``for_update`` locks it (PostgreSQL)."""
    locks = for_update and conn.dialect.name == "postgresql"
    query = _HEADER_FOR_UPDATE if locks else _HEADER
    row = (await conn.execute(query, {"playlist_id": playlist_id})).first()
    return playlist_from_row(row) if row else None


async def lock_playlist(conn: AsyncConnection, playlist_id: str) -> Playlist | None:
    """:func:`get_playlist` with ``for_update`` in a PostgreSQL write transaction, run on
    asyncpg itself (:func:`chorus.db.direct.fetch_in_transaction`; the header's columns
    have no result processor that changes what asyncpg returns)."""
    rows = await fetch_in_transaction(conn, _HEADER_FOR_UPDATE, {"playlist_id": playlist_id})
    return playlist_from_row(rows[0]) if rows else None


_HEADER = select(playlist).where(playlist.c.id == bindparam("playlist_id"))
"""The header by id; built once: a statement object memoises its cache key and compiled form."""
_HEADER_FOR_UPDATE = _HEADER.with_for_update()


async def get_role(conn: AsyncConnection, playlist_id: str, user_id: str) -> Role | None:
    role = await conn.scalar(_ROLE, {"playlist_id": playlist_id, "user_id": user_id})
    return Role(role) if role else None


_ROLE = select(playlist_member.c.role).where(
    playlist_member.c.playlist_id == bindparam("playlist_id"),
    playlist_member.c.user_id == bindparam("user_id"),
)


async def get_members(conn: AsyncConnection, playlist_id: str) -> list[Member]:
    """Every member, the owner first, then by user id."""
    rows = await conn.execute(
        select(playlist_member)
        .where(playlist_member.c.playlist_id == playlist_id)
        .order_by(playlist_member.c.role != Role.OWNER.value, playlist_member.c.user_id)
    )
    return [Member(r.playlist_id, r.user_id, Role(r.role), r.membership_epoch) for r in rows]


async def entries_page(
    conn: AsyncConnection,
    playlist_id: str,
    *,
    after: SortKey | None = None,
    before: SortKey | None = None,
    limit: int,
    from_end: bool = False,
) -> list[Entry]:
    """Up to ``limit`` live entries strictly between two keyset positions, in list order.

    Args:
        after, before: exclusive ``(position_key, entry_id)`` bounds; a bound
            may be the position of an entry removed since, which still pages
            from where it stood.
        limit: the page size.
        from_end: take the ``limit`` entries nearest ``before`` (``last``)
            rather than nearest ``after`` (``first``).
    """
    params: dict[str, Any] = {"playlist_id": playlist_id, "limit": limit}
    if after is not None:
        params["after_key"], params["after_id"] = after
    if before is not None:
        params["before_key"], params["before_id"] = before
    query = _page_query(after is not None, before is not None, from_end)
    # The columns are Entry's fields, in order.
    entries = entries_of((await conn.execute(query, params)).all())
    return entries[::-1] if from_end else entries


async def header_and_first_entries(
    conn: AsyncConnection, playlist_id: str, *, limit: int, direct: bool = False
) -> tuple[Playlist, list[Entry]] | None:
    """The header (deleted or not) and its first ``limit`` live entries, in one statement.

    PostgreSQL only (a ``LATERAL`` join): one statement is one snapshot, so
    the entries are at the header's version without a transaction.

    Args:
        direct: fetch on asyncpg itself (:func:`chorus.db.direct.fetch_direct`; only
            on a connection it allows). Its values are the same: no column of this
            statement has a result processor that changes what asyncpg returns
            (``UTCDateTime`` only marks SQLite's naive timestamps as UTC).
    """
    params = {"playlist_id": playlist_id, "limit": limit}
    if direct:
        rows: Sequence[Sequence[Any]] = await fetch_direct(conn, _HEADER_AND_FIRST, params)
    else:
        rows = (await conn.execute(_HEADER_AND_FIRST, params)).all()
    if not rows:
        return None
    split = len(playlist.c)
    header = playlist_from_row(dict(zip(playlist.c.keys(), rows[0][:split], strict=True)))
    # The header's row has no entry: its entry columns are null.
    entries = entries_of(rows, split)
    return header, entries


# The header's row, then the first live entries' rows (a header column of an entry's
# row, and an entry column of the header's, is NULL): one statement, one snapshot.
# A join repeated the header's 15 columns on each of the ~50 rows, and asyncpg decoded
# every copy (its three timestamps too): ~45% of the read's client CPU, measured on
# the cold page (bench/peers.py's statement, 320 -> 180 µs per fetch).
_HEADER_ROW = select(playlist, *(null().label(c.name) for c in _entry_columns)).where(
    playlist.c.id == bindparam("playlist_id")
)
_FIRST_LIVE_ROWS = (
    select(*(null() for _ in playlist.c), *_entry_columns)
    .where(
        playlist_entry.c.playlist_id == bindparam("playlist_id"),
        playlist_entry.c.removed_at.is_(None),
    )
    .order_by(playlist_entry.c.position_key, playlist_entry.c.entry_id)
    .limit(bindparam("limit", type_=Integer))
)
_header_and_first: CompoundSelect[Any] = union_all(_HEADER_ROW, _FIRST_LIVE_ROWS)
_HEADER_AND_FIRST = _header_and_first.order_by(
    # The header's row first (its position key is NULL), then the page's order.
    _header_and_first.selected_columns.position_key.nulls_first(),
    _header_and_first.selected_columns.entry_id,
)

_PAGE_QUERIES: dict[tuple[bool, bool, bool], Select[Any]] = {}


def _page_query(after: bool, before: bool, from_end: bool) -> Select[Any]:
    """The keyset page statement with these bounds, built once per shape (bound parameters).

    Built per request it cost more than its rows: SQLAlchemy's operators and
    cache key for every clause (a cold page read, docs/caching.md).
    """
    shape = (after, before, from_end)
    found = _PAGE_QUERIES.get(shape)
    if found is not None:
        return found
    query = select(*_entry_columns).where(
        playlist_entry.c.playlist_id == bindparam("playlist_id"),
        playlist_entry.c.removed_at.is_(None),
    )
    if after:
        query = query.where(_live_order > tuple_(bindparam("after_key"), bindparam("after_id")))
    if before:
        query = query.where(_live_order < tuple_(bindparam("before_key"), bindparam("before_id")))
    if from_end:
        query = query.order_by(
            playlist_entry.c.position_key.desc(), playlist_entry.c.entry_id.desc()
        )
    else:
        query = query.order_by(playlist_entry.c.position_key, playlist_entry.c.entry_id)
    query = query.limit(bindparam("limit", type_=Integer))
    _PAGE_QUERIES[shape] = query
    return query


async def any_live(
    conn: AsyncConnection,
    playlist_id: str,
    *,
    at_or_before: SortKey | None = None,
    at_or_after: SortKey | None = None,
) -> bool:
    """Whether a live entry lies at or before / at or after a keyset position."""
    query = select(playlist_entry.c.entry_id).where(*_live(playlist_id))
    if at_or_before is not None:
        query = query.where(_live_order <= tuple_(*at_or_before))
    if at_or_after is not None:
        query = query.where(_live_order >= tuple_(*at_or_after))
    return (await conn.execute(query.limit(1))).first() is not None


async def count_between(
    conn: AsyncConnection, playlist_id: str, *, after: SortKey | None, before: SortKey | None
) -> int:
    """How many live entries lie strictly between two keyset positions."""
    query = select(func.count()).select_from(playlist_entry).where(*_live(playlist_id))
    if after is not None:
        query = query.where(_live_order > tuple_(*after))
    if before is not None:
        query = query.where(_live_order < tuple_(*before))
    return int(await conn.scalar(query) or 0)


async def get_entries(
    conn: AsyncConnection, playlist_id: str, entry_ids: Collection[str]
) -> dict[str, Entry]:
    """Entries by id, live or tombstones; ids not in the playlist are absent."""
    if not entry_ids:
        return {}
    rows = await conn.execute(
        select(*_entry_columns).where(
            playlist_entry.c.playlist_id == playlist_id,
            playlist_entry.c.entry_id.in_(list(set(entry_ids))),
        )
    )
    return {r.entry_id: entry_from_row(r) for r in rows}


async def live_with_media(conn: AsyncConnection, playlist_id: str, media_id: str) -> list[Entry]:
    """Live entries of ``media_id`` in list order (``ix_playlist_entry_media``)."""
    rows = await conn.execute(
        select(*_entry_columns)
        .where(*_live(playlist_id), playlist_entry.c.media_id == media_id)
        .order_by(playlist_entry.c.position_key, playlist_entry.c.entry_id)
    )
    return [entry_from_row(r) for r in rows]


def decode_payload(payload: Mapping[str, Any]) -> tuple[Change, ...]:
    """The changes of a log row's ``payload``."""
    wires: list[ChangeWire] = payload["changes"]
    return tuple(decode_change(w) for w in wires)


async def log_floor(conn: AsyncConnection, playlist_id: str) -> int | None:
    """The oldest version whose changes the log still holds (``None``: no playlist)."""
    floor = await conn.scalar(select(playlist.c.log_floor).where(playlist.c.id == playlist_id))
    return None if floor is None else int(floor)


async def versions_since(
    conn: AsyncConnection, playlist_id: str, version: int, *, limit: int | None = None
) -> list[CommittedVersion] | None:
    """Log rows after ``version``, oldest first, at most ``limit``.

    Returns ``None`` when the log no longer holds ``version + 1`` (it was
    compacted away), so the caller must resync instead.
    """
    floor = await log_floor(conn, playlist_id)
    if floor is None or floor > version + 1:
        return None
    query = (
        select(playlist_mutation)
        .where(
            playlist_mutation.c.playlist_id == playlist_id,
            playlist_mutation.c.version > version,
        )
        .order_by(playlist_mutation.c.version)
    )
    if limit is not None:
        query = query.limit(limit)
    rows = await conn.execute(query)
    log = [
        CommittedVersion(
            playlist_id=r.playlist_id,
            version=r.version,
            operation_id=r.operation_id,
            actor_id=r.actor_id,
            committed_at=r.committed_at,
            changes=decode_payload(r.payload),
        )
        for r in rows
    ]
    # Never serve history with a hole in it: a reader would apply it across the gap.
    if any(v.version != version + 1 + i for i, v in enumerate(log)):
        return None
    return log


async def entries_at(conn: AsyncConnection, playlist_id: str, version: int) -> list[Entry] | None:
    """The live entries at an older ``version``, in list order (``None``: compacted).

    Reads the whole current list: meant for audits, tests and tools, not for
    the request path (a revert reads only the entries changed since).
    """
    current = await get_playlist(conn, playlist_id)
    log = await versions_since(conn, playlist_id, version)
    if current is None or log is None:
        return None
    past = undo(current, [(v.version, v.changes) for v in log])
    live = {e.entry_id: e for e in await entries_page(conn, playlist_id, limit=1 << 30)}
    for entry_id, then in past.entries.items():
        if then is None:
            live.pop(entry_id, None)
        else:
            live[entry_id] = then
    return sorted(live.values(), key=lambda e: e.sort_key)


class SqlPlaylistView:
    """The :class:`~chorus.domain.ports.PlaylistView` of one playlist in a transaction."""

    def __init__(self, conn: AsyncConnection, playlist_id: str) -> None:
        self._conn = conn
        self._playlist_id = playlist_id

    async def entries(self, entry_ids: Collection[str]) -> dict[str, Entry]:
        return await get_entries(self._conn, self._playlist_id, entry_ids)

    async def live_before(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        # Over-fetch by the excluded count so the page is full after filtering.
        rows = await entries_page(
            self._conn,
            self._playlist_id,
            before=position,
            limit=limit + len(exclude),
            from_end=True,
        )
        return [e for e in reversed(rows) if e.entry_id not in exclude][:limit]

    async def live_after(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        rows = await entries_page(
            self._conn, self._playlist_id, after=position, limit=limit + len(exclude)
        )
        return [e for e in rows if e.entry_id not in exclude][:limit]

    async def live_with_media(self, media_id: str) -> Sequence[Entry]:
        return await live_with_media(self._conn, self._playlist_id, media_id)

    async def role_of(self, user_id: str) -> Role | None:
        return await get_role(self._conn, self._playlist_id, user_id)

    async def changes_since(self, version: int) -> Sequence[tuple[int, Sequence[Change]]] | None:
        log = await versions_since(self._conn, self._playlist_id, version)
        return None if log is None else [(v.version, v.changes) for v in log]
