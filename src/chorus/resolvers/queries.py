"""Reads: a visible playlist, pages of its entries and members, its history, search.

Each function takes the request context and arguments :mod:`chorus.graphql`
has already checked and decoded (:mod:`chorus.graphql.schema.common.arguments`): page
sizes, keyset positions, offsets. It makes one read and returns domain values
or a page; none refuses an argument. A playlist's header and first page are
asked of the request's :class:`~chorus.resolvers.read_source.ReadSource`,
which chooses snapshot, memo, DataLoader or SQL; the other reads go through
:mod:`chorus.db.pages`, each in its own read transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from chorus.catalog.protocol import CatalogUnavailable, Media
from chorus.db import pages
from chorus.db.history_reads import AtVersion, NotKept, TooHeavy
from chorus.db.pages import EntriesPage, Page
from chorus.domain.changes import entries_in
from chorus.domain.model import Entry, Member, Playlist, Visibility, role_can_read
from chorus.domain.ports import SortKey
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import (
    CATALOG_UNAVAILABLE,
    HISTORY_ENTRIES_PER_REQUEST,
    REWIND_ENTRIES_FREE,
    REWIND_ENTRIES_PER_POINT,
    REWIND_ENTRIES_PER_REQUEST,
    ServiceUnavailable,
    TooMuchHistory,
)
from chorus.subscriptions.catchup import CatchUpPage, read_since


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result and where it stands in the whole result list."""

    position: int
    """0-based, across pages: the keyset of its cursor."""
    media: Media


async def visible_playlist(
    ctx: RequestContext,
    playlist_id: str,
    min_version: int | None = None,
    *,
    first_page: int | None = None,
) -> Playlist | None:
    """The playlist if the viewer may see it, else ``None`` (no existence leak).

    Args:
        playlist_id: the playlist.
        min_version: only a snapshot at least this new may answer; an older
            playlist read from SQL is returned all the same, and the caller
            refuses it (:func:`chorus.graphql.schema.common.arguments.check_min_version`).
        first_page: the size of the first page of entries the query asks
            with it: header and page are read in one transaction, and the
            read source's ``entries_page`` answers from what was read.

    Raises:
        Unauthenticated: no valid token.
    """
    ctx.viewer()
    playlist = await ctx.reads.playlist(playlist_id, min_version, first_page=first_page)
    if playlist is None:
        return None
    if playlist.visibility is Visibility.PUBLIC and not playlist.deleted:
        return playlist  # every viewer may read it: the role is not needed to decide
    role = await ctx.reads.role(playlist_id)
    return playlist if role_can_read(role, playlist) else None


async def liked_songs(ctx: RequestContext) -> Playlist:
    """The viewer's Liked Songs, committing its version 0 on first use.

    Raises:
        Unauthenticated: no valid token.
    """
    playlist_id = await ctx.services.store.ensure_liked_songs(ctx.viewer())
    playlist = await visible_playlist(ctx, playlist_id)
    if playlist is None:  # the owner always sees it; only a broken row could hide it
        raise RuntimeError(f"Liked Songs {playlist_id} is not visible to its owner")
    return playlist


async def live_entry(ctx: RequestContext, playlist: Playlist, entry_id: str) -> Entry | None:
    """A live entry of a visible playlist, or ``None``."""
    ctx.reads.record.refuse("an entry read by id does not name its version")
    return await pages.live_entry(ctx.services.db, playlist.id, entry_id)


HISTORY_UNCACHED = "history depends on retention, not only on the version"
"""Why a read of the log (``changes``, ``atVersion``) is never kept in the response cache."""


async def playlist_at(
    ctx: RequestContext, playlist: Playlist, version: int
) -> AtVersion | NotKept | None:
    """A visible playlist as it was at ``version``, rewound from its nearest anchor.

    Returns:
        The header and rewind at ``version``; :class:`~chorus.db.history_reads.NotKept`
        when ``version`` is out of range or below the log floor (not checked
        here: :func:`chorus.graphql.schema.common.arguments.check_at_version`); ``None``
        when the playlist is gone.
    """
    ctx.reads.record.refuse(HISTORY_UNCACHED)
    key = (playlist.id, version)
    budget = ctx.reads.budget
    async with budget.rewinding:
        if (kept := budget.rewinds.get(key)) is not None:
            return kept
        left = REWIND_ENTRIES_PER_REQUEST - budget.rewound_entries
        if budget.cost_allowance is not None:
            points = max(0, budget.cost_allowance - budget.extra_cost)
            left = min(left, REWIND_ENTRIES_FREE + REWIND_ENTRIES_PER_POINT * points)
        found = await pages.playlist_at(ctx.services.db, playlist.id, version, max_entries=left)
        if isinstance(found, TooHeavy):
            raise _too_heavy(version, found)
        if isinstance(found, AtVersion):
            budget.rewinds[key] = found
            budget.rewound_entries += found.entries
            beyond = max(0, found.entries - REWIND_ENTRIES_FREE)
            budget.extra_cost += -(-beyond // REWIND_ENTRIES_PER_POINT)
        return found


def _too_heavy(version: int, heavy: TooHeavy) -> TooMuchHistory:
    if heavy.entries > REWIND_ENTRIES_PER_REQUEST:
        return TooMuchHistory(
            f"version {version} is rebuilt by undoing {heavy.entries} entries of changes, "
            f"more than one request may ({REWIND_ENTRIES_PER_REQUEST}): read that part of "
            "the history through changes"
        )
    return TooMuchHistory(
        f"version {version} is rebuilt by undoing {heavy.entries} entries of changes, more "
        f"than what this request's query cost leaves ({heavy.allowed}): ask for it in a "
        "request of its own or with fewer fields"
    )


async def entries_page_at(
    ctx: RequestContext,
    at: AtVersion,
    *,
    size: int,
    from_end: bool,
    after: SortKey | None,
    before: SortKey | None,
) -> EntriesPage | NotKept | None:
    """A keyset page of the entries live at ``at``'s version, with its count and version."""
    ctx.reads.record.refuse(HISTORY_UNCACHED)
    found = await pages.entries_page_at(
        ctx.services.db,
        at.rewound.playlist.id,
        at,
        size=size,
        after=after,
        before=before,
        from_end=from_end,
        max_entries=max(at.entries, REWIND_ENTRIES_FREE),
    )
    if isinstance(found, TooHeavy):
        raise _too_heavy(at.rewound.playlist.version, found)
    return found


async def media_of(ctx: RequestContext, entries: Sequence[Entry]) -> dict[str, Media | None]:
    """The media of these entries by media id, in one catalog batch (``None``: unknown, down)."""
    ids = list(dict.fromkeys(e.media_id for e in entries))
    found = await ctx.reads.loaders.media.load_page(ids)
    return dict(zip(ids, found, strict=True))


async def members_page(
    ctx: RequestContext, playlist: Playlist, *, size: int, after: str | None
) -> Page[Member]:
    """Members of a visible playlist by user id, after the user id ``after``."""
    ctx.reads.record.refuse("a members page does not name its version")
    return await pages.members_page(ctx.services.db, playlist.id, size=size, after_user=after)


async def changes(
    ctx: RequestContext, playlist: Playlist, *, since_version: int, size: int
) -> CatchUpPage | None:
    """Up to ``size`` versions after ``since_version`` (the subscriptions' catch-up path).

    Returns:
        The page, or a resync when the log no longer reaches that far; ``None``
        when the playlist is gone. ``since_version`` is not checked against the
        current version here (:func:`chorus.graphql.schema.common.arguments.check_since_version`).
    """
    ctx.reads.record.refuse(HISTORY_UNCACHED)
    page = await read_since(ctx.services.db, playlist.id, since_version, limit=max(size, 1))
    if page is not None and size == 0:
        return dataclasses.replace(page, versions=[], has_more=bool(page.versions))
    return _within_history_budget(ctx, page) if page is not None else None


def _within_history_budget(ctx: RequestContext, page: CatchUpPage) -> CatchUpPage:
    """``page`` cut before the version that would take the request past its history budget.

    Two bounds: at most :data:`HISTORY_ENTRIES_PER_REQUEST` entries of history
    per request, and the query cost limit. The query cost counts a version's
    entries at the largest page size; a batch or a revert may hold up to
    ``max_batch_entries``, and what a version holds beyond that page size is
    charged to the request as it is read (``ctx.reads.budget.extra_cost``), within what the
    limit leaves (``ctx.reads.budget.cost_allowance``).

    Raises:
        TooMuchHistory: the request's earlier fields spent the whole budget.
    """
    kept = 0
    for committed in page.versions:
        if not charge_history(ctx, entries_in(committed.changes)):
            break
        kept += 1
    if kept == len(page.versions):
        return page
    if kept == 0:
        raise TooMuchHistory(TOO_MUCH_HISTORY)
    return dataclasses.replace(page, versions=page.versions[:kept], has_more=True)


TOO_MUCH_HISTORY = (
    f"this request reads more than {HISTORY_ENTRIES_PER_REQUEST} entries of history "
    "or more than its query cost allows; ask for fewer fields of changes, or page "
    "on in another request"
)


def charge_history(ctx: RequestContext, entries: int) -> bool:
    """Charge a version of ``entries`` entries read from the log, if the request may read it.

    The query cost counts a version's entries at the largest page size; what
    it holds beyond is charged to ``ctx.reads.budget.extra_cost``, within what the query
    cost limit leaves, and at most :data:`HISTORY_ENTRIES_PER_REQUEST` entries
    are read in all. The first version of a request always goes (a batch or a
    revert holds at most ``max_batch_entries``), so a sync makes progress.

    Returns:
        Whether it was charged (``False``: over the budget, nothing charged).
    """
    extra = max(0, entries - ctx.services.limits.page_size_max)
    budget = ctx.reads.budget
    allowance = budget.cost_allowance
    over = budget.history_entries + entries > HISTORY_ENTRIES_PER_REQUEST or (
        allowance is not None and budget.extra_cost + extra > allowance
    )
    if over and (budget.history_entries or budget.extra_cost):
        return False
    budget.history_entries += entries
    budget.extra_cost += extra
    return True


async def search_media(
    ctx: RequestContext, query: str, *, size: int, offset: int
) -> Page[SearchHit]:
    """A page of catalog search results from ``offset`` on.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: the catalog does not answer.
    """
    ctx.viewer()
    ctx.reads.record.refuse("search results have no version")
    try:
        # The catalog pages at least one item; ``first: 0`` still wants the total.
        found = await ctx.services.catalog.search(query, offset=offset, limit=max(size, 1))
    except CatalogUnavailable:
        raise ServiceUnavailable(CATALOG_UNAVAILABLE) from None
    items = found.items[:size]
    return Page(
        [SearchHit(found.offset + i, m) for i, m in enumerate(items)],
        has_next=found.offset + len(items) < found.total,
        has_previous=found.offset > 0,
        total=found.total,
    )
