"""Reads: a visible playlist, pages of its entries and members, its history, search.

Page arguments follow the Relay connection spec: ``first``/``after`` page
forward, ``last``/``before`` backward, and both bounds together page inside a
window. A page size above the maximum is an error, never a silent clamp.

In the full profile a PUBLIC playlist may be answered from its Redis snapshot
(DESIGN §8): :func:`visible_playlist` takes the header from a snapshot at the
head version (and ``>= minVersion``) without touching SQL, and records it in
the request's loaders; :func:`entries_page` then serves the *first* page of
that same playlist object from the snapshot, with its count and version.
Every other read (later pages, ``last``, members, the viewer's role, …) is
SQL. A snapshot holds exactly what SQL returns at its version, so the answer
is the same either way.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from chorus.caches.snapshot import Snapshot
from chorus.catalog.protocol import CatalogUnavailable, MediaPage
from chorus.db import listing, repository
from chorus.domain.model import Entry, Member, Playlist, Visibility, role_can_read
from chorus.domain.ports import SortKey
from chorus.resolvers.context import RequestContext
from chorus.resolvers.errors import BadUserInput, ServiceUnavailable
from chorus.subscriptions.replay import ReplayPage, replay

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a connection, in list order."""

    items: Sequence[T]
    has_next: bool
    has_previous: bool
    total: int


@dataclass(frozen=True, slots=True)
class EntriesPage(Page[Entry]):
    version: int = 0
    """The playlist version the page was read at."""


def page_size(ctx: RequestContext, first: int | None, last: int | None) -> tuple[int, bool]:
    """``(size, from_end)`` of a page request.

    Raises:
        BadUserInput: both ``first`` and ``last``, a negative size, or one
            above the maximum.
    """
    limits = ctx.services.limits
    if first is not None and last is not None:
        raise BadUserInput("give first or last, not both")
    size = first if first is not None else last
    if size is None:
        return limits.page_size_default, False
    if size < 0 or size > limits.page_size_max:
        name = "first" if first is not None else "last"
        raise BadUserInput(f"{name} must be between 0 and {limits.page_size_max}")
    return size, last is not None


async def visible_playlist(
    ctx: RequestContext, playlist_id: str, min_version: int | None = None
) -> Playlist | None:
    """The playlist if the viewer may see it, else ``None`` (no existence leak).

    A PUBLIC playlist's current snapshot answers without SQL when there is one.

    Raises:
        Unauthenticated: no valid token.
        BadUserInput: ``min_version`` is newer than the playlist's version.
    """
    ctx.viewer()
    snapshot = await _current_snapshot(ctx, playlist_id, min_version)
    if snapshot is not None:
        ctx.loaders.served[playlist_id] = snapshot
        return snapshot.playlist
    playlist = await ctx.loaders.playlist.load(playlist_id)
    if playlist is None:
        return None
    role = await ctx.loaders.role.load(playlist_id)
    if not role_can_read(role, playlist):
        return None
    if min_version is not None and playlist.version < min_version:
        raise BadUserInput(
            f"version {min_version} does not exist yet; the playlist is at {playlist.version}"
        )
    return playlist


async def _current_snapshot(
    ctx: RequestContext, playlist_id: str, min_version: int | None
) -> Snapshot | None:
    """The snapshot to answer with, or ``None`` for SQL.

    Only a PUBLIC playlist's: every viewer may read it, so no role query is
    needed to decide visibility (``viewerRole`` still loads the role). Once a
    request reads a playlist from SQL it keeps doing so, so its later reads
    of that playlist agree with the first.
    """
    if ctx.services.snapshots is None or playlist_id in ctx.loaders.sql_only:
        return None
    snapshot = await ctx.loaders.snapshot.load((playlist_id, min_version))
    if (
        snapshot is None
        or snapshot.playlist.visibility is not Visibility.PUBLIC
        or snapshot.playlist.deleted
    ):
        ctx.loaders.sql_only.add(playlist_id)
        return None
    return snapshot


def _snapshot_page(
    ctx: RequestContext, playlist: Playlist, size: int, *, first_page: bool
) -> EntriesPage | None:
    """The first page from the snapshot ``playlist`` was served from, if it holds it."""
    snapshot = ctx.loaders.served.get(playlist.id)
    cache = ctx.services.snapshots
    if not first_page or snapshot is None or cache is None or snapshot.playlist != playlist:
        return None
    if size > cache.page_size and snapshot.has_more:
        return None
    page = snapshot.first_page(size)
    if page is None:
        return None
    items, has_next = page
    return EntriesPage(items, has_next, False, playlist.entry_count, snapshot.version)


async def live_entry(ctx: RequestContext, playlist: Playlist, entry_id: str) -> Entry | None:
    """A live entry of a visible playlist, or ``None``."""
    async with ctx.services.db.read() as conn:
        found = await repository.get_entries(conn, playlist.id, [entry_id])
    entry = found.get(entry_id)
    return entry if entry is not None and entry.live else None


async def entries_page(
    ctx: RequestContext,
    playlist: Playlist,
    *,
    first: int | None,
    after: SortKey | None,
    last: int | None,
    before: SortKey | None,
) -> EntriesPage:
    """A keyset page of live entries, read with the version and count it belongs to."""
    size, from_end = page_size(ctx, first, last)
    first_page = after is None and before is None and not from_end
    cached = _snapshot_page(ctx, playlist, size, first_page=first_page)
    if cached is not None:
        return cached
    async with ctx.services.db.read() as conn:
        header = await repository.get_playlist(conn, playlist.id)
        if header is None:
            return EntriesPage((), False, False, 0, playlist.version)
        rows = await repository.entries_page(
            conn, playlist.id, after=after, before=before, limit=size + 1, from_end=from_end
        )
        more = len(rows) > size
        rows = (rows[1:] if from_end else rows[:-1]) if more else rows
        # The far side: is anything at or beyond the cursor we came from?
        if from_end:
            beyond = before is not None and await repository.any_live(
                conn, playlist.id, at_or_after=before
            )
            has_next, has_previous = beyond, more
        else:
            beyond = after is not None and await repository.any_live(
                conn, playlist.id, at_or_before=after
            )
            has_next, has_previous = more, beyond
    return EntriesPage(rows, has_next, has_previous, header.entry_count, header.version)


async def members_page(
    ctx: RequestContext, playlist: Playlist, *, first: int | None, after: str | None
) -> Page[Member]:
    size, _ = page_size(ctx, first, None)
    async with ctx.services.db.read() as conn:
        rows = await listing.members_page(conn, playlist.id, after_user=after, limit=size + 1)
        total = await listing.count_members(conn, playlist.id)
    return Page(rows[:size], len(rows) > size, after is not None, total)


async def viewer_playlists(
    ctx: RequestContext, *, first: int | None, after: tuple[datetime, str] | None
) -> Page[Playlist]:
    viewer = ctx.viewer()
    size, _ = page_size(ctx, first, None)
    async with ctx.services.db.read() as conn:
        rows = await listing.playlists_of(conn, viewer, after=after, limit=size + 1)
        total = await listing.count_playlists_of(conn, viewer)
    return Page(rows[:size], len(rows) > size, after is not None, total)


async def changes(
    ctx: RequestContext, playlist: Playlist, *, since_version: int, first: int | None
) -> ReplayPage:
    """The log after ``since_version`` (the subscriptions' replay path), or a resync.

    Raises:
        BadUserInput: ``since_version`` is negative or in the future.
    """
    size, _ = page_size(ctx, first, None)
    async with ctx.services.db.read() as conn:
        page = await replay(conn, playlist.id, since_version, limit=max(size, 1))
    if page is None or not 0 <= since_version <= page.current_version:
        current = page.current_version if page else playlist.version
        raise BadUserInput(f"sinceVersion must be between 0 and {current}")
    if size == 0:
        return dataclasses.replace(page, versions=[], has_more=bool(page.versions))
    return page


async def search_media(
    ctx: RequestContext, query: str, *, first: int | None, offset: int
) -> MediaPage:
    """A page of catalog search results.

    Raises:
        BadUserInput: a query longer than 200 characters, or holding a control
            character or a lone surrogate (no catalog can match those).
        ServiceUnavailable: the catalog does not answer.
    """
    ctx.viewer()
    size, _ = page_size(ctx, first, None)
    if len(query) > 200:
        raise BadUserInput("query must be at most 200 characters")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in query):
        raise BadUserInput("query must not contain control characters")
    try:
        # The catalog pages at least one item; ``first: 0`` still wants the total.
        page = await ctx.services.catalog.search(query, offset=offset, limit=max(size, 1))
    except CatalogUnavailable:
        raise ServiceUnavailable("the media catalog is not available; try again") from None
    return MediaPage(page.items[:size], page.total, page.offset)
