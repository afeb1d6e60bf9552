"""The API's reads, each in a read transaction of its own.

Every function here takes the :class:`~chorus.db.engine.Database`, opens one
:meth:`~chorus.db.engine.Database.read` transaction (one consistent snapshot,
so a page, its count and its version always agree) and returns domain values
or a :class:`Page`. The reads of playlist headers and pages may be answered by
a read replica under the rule of :mod:`chorus.db.replicas`; the others read
the primary. The resolvers call these and open no transaction themselves.

Pages are keyset pages in list order (:mod:`chorus.db.listing`,
:func:`chorus.db.repository.entries_page`): ``size`` items after or before an
exclusive keyset position, whether items lie beyond them on either side, and
the count of the whole connection. Sizes and positions come already checked
(:mod:`chorus.graphql.schema.common.arguments`).

Raises (every function):
    DatabaseUnavailable: the database cannot be reached or lost the connection.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import follows, history_reads, listing, repository
from chorus.db.engine import Database
from chorus.db.history_reads import AtVersion, NotKept, TooHeavy
from chorus.db.replicas import read_fresh
from chorus.domain.follows import Follow, Target, TargetKind
from chorus.domain.model import Entry, Member, Playlist, Role
from chorus.domain.ports import SortKey
from chorus.domain.version_history import Window

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a connection.

    Attributes:
        items: the page, in list order.
        has_next: items follow the last of ``items``.
        has_previous: items precede the first of ``items``.
        total: items in the whole connection, not only this page.
    """

    items: Sequence[T]
    has_next: bool
    has_previous: bool
    total: int


@dataclass(frozen=True, slots=True)
class EntriesPage(Page[Entry]):
    version: int = 0
    """The playlist version the page (and ``total``) was read at."""


async def playlists_by_id(
    db: Database, playlist_ids: Collection[str], *, min_version: int | None = None
) -> dict[str, Playlist]:
    """Playlist headers by id, deleted ones included; unknown ids are absent.

    From a replica when it holds each at least as new as known (:mod:`chorus.db.replicas`).

    Args:
        min_version: the client's ``minVersion``: a replica may answer only at
            this version or newer.
    """
    ids = list(dict.fromkeys(playlist_ids))

    async def read(conn: AsyncConnection) -> dict[str, Playlist]:
        return await listing.get_playlists(conn, ids)

    return await read_fresh(db, ids, read, _header_versions, min_version=min_version)


def _header_versions(headers: dict[str, Playlist]) -> dict[str, int]:
    return {pid: header.version for pid, header in headers.items()}


async def head_and_first_entries(
    db: Database, playlist_id: str, count: int
) -> tuple[Playlist, Sequence[Entry]] | None:
    """A playlist's header and its first ``count`` live entries, read together (a snapshot's rows).

    Returns:
        ``(header, entries)`` at the header's version; ``None`` when there is no such playlist.
    """
    async with db.read() as conn:
        header = (await listing.get_playlists(conn, [playlist_id])).get(playlist_id)
        if header is None:
            return None
        return header, await repository.entries_page(conn, playlist_id, limit=count)


async def roles_of(db: Database, user_id: str, playlist_ids: Collection[str]) -> dict[str, Role]:
    """The roles ``user_id`` holds in these playlists; playlists they are not in are absent."""
    async with db.read() as conn:
        return await listing.get_roles(conn, user_id, playlist_ids)


async def member_roles(db: Database, playlist_id: str) -> dict[str, Role]:
    """Every member of a playlist and their role, by user id."""
    async with db.read() as conn:
        return {m.user_id: m.role for m in await repository.get_members(conn, playlist_id)}


async def media_in(db: Database, playlist_id: str, media_ids: Collection[str]) -> set[str]:
    """Which of ``media_ids`` have a live entry in the playlist (``ix_playlist_entry_media``)."""
    async with db.read() as conn:
        return await listing.media_in(conn, playlist_id, media_ids)


async def follower_counts(db: Database, targets: Collection[Target]) -> dict[Target, int]:
    """Followers of each target; targets nobody follows are absent."""
    async with db.read() as conn:
        return await follows.follower_counts(conn, targets)


async def following_page(
    db: Database,
    follower_id: str,
    kind: TargetKind | None,
    *,
    after: tuple[datetime, str, str] | None,
    size: int,
) -> Page[Follow]:
    """The follower's follows of ``kind`` (any: ``None``), newest first."""
    async with db.read() as conn:
        items, total = await follows.following_page(
            conn, follower_id, kind, after=after, limit=size + 1
        )
    return Page(items[:size], len(items) > size, after is not None, total)


async def live_entry(db: Database, playlist_id: str, entry_id: str) -> Entry | None:
    """The entry if it is live in the playlist, else ``None`` (a tombstone too)."""
    async with db.read() as conn:
        found = await repository.get_entries(conn, playlist_id, [entry_id])
    entry = found.get(entry_id)
    return entry if entry is not None and entry.live else None


async def entries_page(
    db: Database,
    playlist_id: str,
    *,
    size: int,
    after: SortKey | None,
    before: SortKey | None,
    from_end: bool,
    min_version: int | None = None,
) -> EntriesPage | None:
    """A page of live entries strictly between two keyset positions.

    Args:
        size: entries wanted (``>= 0``).
        after, before: exclusive ``(position_key, entry_id)`` bounds, or ``None``;
            the position of an entry removed since still pages from where it stood.
        from_end: the ``size`` entries nearest ``before`` (Relay ``last``)
            rather than nearest ``after`` (``first``).
        min_version: a replica may answer only at this version or newer (the
            header the caller read); :mod:`chorus.db.replicas`.

    Returns:
        The page with the playlist's live entry count and version it was read
        at; ``None`` when there is no such playlist.
    """

    async def read(conn: AsyncConnection) -> EntriesPage | None:
        header = await repository.get_playlist(conn, playlist_id)
        if header is None:
            return None
        return await _entries_in(
            conn, header, size=size, after=after, before=before, from_end=from_end
        )

    def versions(page: EntriesPage | None) -> dict[str, int]:
        return {} if page is None else {playlist_id: page.version}

    return await read_fresh(db, [playlist_id], read, versions, min_version=min_version)


async def playlist_and_first_page(
    db: Database, playlist_id: str, size: int, *, min_version: int | None = None
) -> tuple[Playlist, EntriesPage] | None:
    """A playlist's header and its first ``size`` live entries in one read transaction.

    The page is at the header's version: a query for a playlist and its first
    page pays one transaction and cannot see an edit between the two.

    Args:
        min_version: the client's ``minVersion``: a replica may answer only
            at this version or newer (:mod:`chorus.db.replicas`).

    Returns:
        ``None`` when there is no such playlist (deleted ones are returned).
    """

    def versions(found: tuple[Playlist, EntriesPage] | None) -> dict[str, int]:
        return {} if found is None else {playlist_id: found[0].version}

    return await read_fresh(
        db,
        [playlist_id],
        partial(
            _playlist_and_first_page,
            playlist_id=playlist_id,
            size=size,
            one=db.is_postgres,
            direct=db.direct_reads,
        ),
        versions,
        min_version=min_version,
        one_statement=db.is_postgres,
    )


async def _playlist_and_first_page(
    conn: AsyncConnection, *, playlist_id: str, size: int, one: bool, direct: bool
) -> tuple[Playlist, EntriesPage] | None:
    if one:
        # One statement (header joined to its first entries), no transaction:
        # one round trip where a transaction of two reads took four.
        found = await repository.header_and_first_entries(
            conn, playlist_id, limit=size + 1, direct=direct
        )
        if found is None:
            return None
        head, rows = found
        more = len(rows) > size
        entries = rows[:size] if more else rows
        return head, EntriesPage(entries, more, False, head.entry_count, head.version)
    header = await repository.get_playlist(conn, playlist_id)
    if header is None:
        return None
    page = await _entries_in(conn, header, size=size, after=None, before=None, from_end=False)
    return header, page


async def _entries_in(
    conn: AsyncConnection,
    header: Playlist,
    *,
    size: int,
    after: SortKey | None,
    before: SortKey | None,
    from_end: bool,
) -> EntriesPage:
    """:func:`entries_page` inside a read transaction that has read ``header``."""
    playlist_id = header.id
    rows = await repository.entries_page(
        conn, playlist_id, after=after, before=before, limit=size + 1, from_end=from_end
    )
    more = len(rows) > size
    rows = (rows[1:] if from_end else rows[:-1]) if more else rows
    # The far side: is anything at or beyond the cursor we came from?
    if from_end:
        beyond = before is not None and await repository.any_live(
            conn, playlist_id, at_or_after=before
        )
        has_next, has_previous = beyond, more
    else:
        beyond = after is not None and await repository.any_live(
            conn, playlist_id, at_or_before=after
        )
        has_next, has_previous = more, beyond
    return EntriesPage(rows, has_next, has_previous, header.entry_count, header.version)


async def playlist_at(
    db: Database, playlist_id: str, version: int, *, max_entries: int | None = None
) -> AtVersion | NotKept | TooHeavy | None:
    """The playlist at an older ``version`` (:func:`chorus.db.history_reads.rewound_at`).

    Returns:
        ``None`` when there is no such playlist; :class:`~chorus.db.history_reads.NotKept`
        when ``version`` is above the head or below the log floor;
        :class:`~chorus.db.history_reads.TooHeavy` when the versions to undo hold
        more than ``max_entries`` entries of changes.
    """
    async with db.read() as conn:
        return await history_reads.rewound_at(conn, playlist_id, version, max_entries=max_entries)


async def entries_page_at(
    db: Database,
    playlist_id: str,
    at: AtVersion,
    *,
    size: int,
    after: SortKey | None,
    before: SortKey | None,
    from_end: bool,
    max_entries: int | None = None,
) -> EntriesPage | NotKept | TooHeavy | None:
    """A page of the entries live at ``at``'s version, as :func:`entries_page` pages the head.

    ``at`` comes from :func:`playlist_at`; when its anchor moved since (a
    commit passed the head it started from, compaction took its checkpoint)
    the rewind is read again in this transaction.

    Returns:
        The page with the count and version of ``at``; :class:`~chorus.db.history_reads.NotKept`
        when compaction took the version meanwhile; ``None``: no such playlist.
    """
    version = at.rewound.playlist.version
    async with db.read() as conn:
        if not await history_reads.anchor_holds(conn, playlist_id, at.anchor):
            # Within what the first rewind was allowed: the request paid for that.
            again = await history_reads.rewound_at(
                conn, playlist_id, version, max_entries=max_entries
            )
            if not isinstance(again, AtVersion):
                return again
            at = again
        rows = await history_reads.window(
            conn, playlist_id, at, Window(after, before), limit=size + 1, from_end=from_end
        )
        more = len(rows) > size
        rows = (rows[1:] if from_end else rows[:-1]) if more else rows
        # The far side, as entries_page: is anything at or beyond the cursor we came from?
        if from_end:
            beyond = before is not None and bool(
                await history_reads.window(
                    conn, playlist_id, at, Window(after=before, inclusive=True), limit=1
                )
            )
            has_next, has_previous = beyond, more
        else:
            beyond = after is not None and bool(
                await history_reads.window(
                    conn, playlist_id, at, Window(before=after, inclusive=True), limit=1
                )
            )
            has_next, has_previous = more, beyond
    return EntriesPage(rows, has_next, has_previous, at.rewound.playlist.entry_count, version)


async def members_page(
    db: Database, playlist_id: str, *, size: int, after_user: str | None
) -> Page[Member]:
    """Members ordered by user id, the first ``size`` strictly after ``after_user``.

    ``has_previous`` is whether a position was given (members before it may be gone).
    """
    async with db.read() as conn:
        rows = await listing.members_page(conn, playlist_id, after_user=after_user, limit=size + 1)
        total = await listing.count_members(conn, playlist_id)
    return Page(rows[:size], len(rows) > size, after_user is not None, total)
