"""A page of entries as a ``PlaylistEntryConnection``: the head's and an older version's alike.

``Playlist.entries`` and ``PlaylistAtVersion.entries`` render their pages
here, so both give the same edges, cursors and ``PageInfo`` for the same
entries: a cursor of one pages the other. A plan running ``Playlist.entries``
writes the same connection straight from the page's rows
(:mod:`chorus.graphql.schema.common.entry_rows`): what this module reads and
makes, it must read and make too.
"""

from __future__ import annotations

from chorus.db.pages import EntriesPage
from chorus.domain.model import Entry
from chorus.graphql.execution import loop_turns
from chorus.graphql.schema.common import ids, selections
from chorus.graphql.schema.common.connections import PlaylistEntryConnection, edges_and_page_info
from chorus.graphql.schema.common.types import UNFETCHED, ChorusInfo, Media, PlaylistEntry
from chorus.resolvers import queries


def entry_cursor(e: Entry) -> str:
    """The cursor of an entry: its keyset ``(positionKey, id)``."""
    return ids.entry_cursor(e.position_key, e.entry_id)


MEDIA_PATH = ("entries", "edges", "node", "media")
LIKED_PATH = (*MEDIA_PATH, "viewerHasLiked")


def _selects(info: ChorusInfo, path: tuple[str, ...]) -> bool:
    """Whether this ``entries`` field selects ``path`` (from ``entries``; fragments included)."""
    raw = info._raw_info
    return raw.field_name == path[0] and bool(selections.fields_at(raw, path[1:]))


async def entry_connection(
    info: ChorusInfo, playlist_id: str, page: EntriesPage
) -> PlaylistEntryConnection:
    """The connection of ``page``, its media fetched in one catalog batch when selected.

    So is the viewer's ``viewerHasLiked`` of that media, when selected and
    there is a viewer: one query for the page, where a resolver per media
    made a coroutine each, all woken at once by one batch (2,400 of them held
    the event loop ~60 ms in one turn, bench/hostile.py's wide read).
    """
    media: dict[str, Media | None] = {}
    if _selects(info, MEDIA_PATH):
        # One batched catalog call for the page, and no coroutine per entry.
        found = await queries.media_of(info.context, page.items)
        liked: dict[str, bool] = {}
        if info.context.identity.viewer_id is not None and _selects(info, LIKED_PATH):
            known = [i for i, m in found.items() if m]
            liked = dict(
                zip(known, await info.context.reads.loaders.liked.load_many(known), strict=True)
            )
        media = {i: Media.from_record(m, liked.get(i)) if m else None for i, m in found.items()}
    # One batch woke every page of the document at once; completing each
    # (~100 µs an entry) is shared out over the loop's turns.
    await loop_turns.share()
    edges, page_info = edges_and_page_info(
        page,
        lambda e: PlaylistEntry.from_record(playlist_id, e, media.get(e.media_id, UNFETCHED)),
        entry_cursor,
    )
    return PlaylistEntryConnection(
        edges=edges, page_info=page_info, total_count=page.total, version=page.version
    )
