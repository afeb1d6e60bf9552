"""Finding playlists: the viewer's and a user's lists, the PUBLIC title search, total durations.

Arguments come checked (:mod:`chorus.graphql.schema.search.playlist_orders`). None of
the lists is kept in the response cache: a list of many playlists is named
by no one playlist's version (a playlist created, shared or renamed changes
it without moving any version the answer read), so each refuses its answer
(:class:`~chorus.resolvers.reads.ReadSet`). ``Playlist.totalDurationMs`` is
named by its playlist's version and the catalog's freshness, and is kept.
"""

from __future__ import annotations

from chorus.catalog.protocol import CatalogUnavailable
from chorus.db import playlist_list_reads
from chorus.db.pages import Page
from chorus.domain.model import Playlist
from chorus.domain.playlist_search import PlaylistWindow
from chorus.resolvers.context import RequestContext

LISTS_UNCACHED = "a list of playlists is named by no playlist's version"
"""Why an answer holding `viewer.playlists`, `User.playlists` or `searchPlaylists` is not kept."""


async def viewer_playlists(ctx: RequestContext, window: PlaylistWindow) -> Page[Playlist]:
    """The ``window`` of the viewer's playlists (owned or a member of).

    Raises:
        Unauthenticated: no valid token.
    """
    viewer = ctx.viewer()
    ctx.reads.record.refuse(LISTS_UNCACHED)
    return await playlist_list_reads.viewer_playlists(ctx.services.db, viewer, window)


async def user_playlists(
    ctx: RequestContext, owner_id: str, window: PlaylistWindow
) -> Page[Playlist]:
    """The ``window`` of ``owner_id``'s playlists the viewer may read (PUBLIC, or shared).

    Raises:
        Unauthenticated: no valid token.
    """
    viewer = ctx.viewer()
    ctx.reads.record.refuse(LISTS_UNCACHED)
    ctx.reads.record.depends_on_viewer()
    return await playlist_list_reads.user_playlists(ctx.services.db, owner_id, viewer, window)


async def search_playlists(ctx: RequestContext, key: str, window: PlaylistWindow) -> Page[Playlist]:
    """The ``window`` of PUBLIC playlists whose title key starts with ``key`` (by title key, id).

    Raises:
        Unauthenticated: no valid token.
    """
    ctx.viewer()
    ctx.reads.record.refuse(LISTS_UNCACHED)
    return await playlist_list_reads.search_public(ctx.services.db, key, window)


async def total_duration_ms(ctx: RequestContext, playlist: Playlist) -> int | None:
    """The sum of the catalog durations of a visible playlist's live entries, in milliseconds.

    A media the catalog does not know, or knows without a duration, counts
    0; a media in the list twice counts twice. Read at the head: when that is
    past ``playlist.version`` (an edit committed between), the answer names
    both versions and is not cached (:data:`~chorus.resolvers.reads.RACED`).

    Returns:
        The total; ``None`` when the catalog does not answer (then the answer
        is not cached) or the playlist is gone.
    """
    durations = ctx.services.durations
    ctx.reads.record.read_media()
    known = durations.get(playlist.id, playlist.version)
    if known is not None:
        ctx.reads.record.version(playlist.id, playlist.version)
        return known
    found = await playlist_list_reads.media_counts(ctx.services.db, playlist.id)
    if found is None:
        ctx.reads.record.refuse("a playlist deleted while it was read")
        return None
    version, counts = found
    ctx.reads.record.version(playlist.id, version)
    try:
        media = await ctx.services.catalog.get_many(list(counts))
    except CatalogUnavailable:
        ctx.reads.record.refuse("the catalog did not answer")
        return None
    total = 0
    for media_id, count in counts.items():
        m = media.get(media_id)
        total += count * (m.duration_ms or 0 if m is not None else 0)
    durations.put(playlist.id, version, total)
    return total
