"""A page of entries as a ``PlaylistEntryConnection``: the head's and an older version's alike.

``Playlist.entries`` and ``PlaylistAtVersion.entries`` render their pages
here, so both give the same edges, cursors and ``PageInfo`` for the same
entries: a cursor of one pages the other.
"""

from __future__ import annotations

from strawberry.types.nodes import SelectedField, Selection

from chorus.db.pages import EntriesPage
from chorus.domain.model import Entry
from chorus.graphql import ids
from chorus.graphql.connections import PlaylistEntryConnection, edges_and_page_info
from chorus.graphql.types import UNFETCHED, ChorusInfo, Media, PlaylistEntry
from chorus.resolvers import queries


def entry_cursor(e: Entry) -> str:
    """The cursor of an entry: its keyset ``(positionKey, id)``."""
    return ids.entry_cursor(e.position_key, e.entry_id)


def _selects_entry_media(info: ChorusInfo) -> bool:
    """Whether this ``entries`` field selects ``edges { node { media } }`` (fragments included)."""
    pending: list[Selection] = list(info.selected_fields)
    path = ("entries", "edges", "node", "media")
    depth_of: dict[int, int] = {id(s): 0 for s in pending}
    while pending:
        selection = pending.pop()
        depth = depth_of[id(selection)]
        if isinstance(selection, SelectedField):
            if selection.name != path[depth]:
                continue
            if depth == len(path) - 1:
                return True
            depth += 1
        for child in selection.selections:
            depth_of[id(child)] = depth
            pending.append(child)
    return False


async def entry_connection(
    info: ChorusInfo, playlist_id: str, page: EntriesPage
) -> PlaylistEntryConnection:
    """The connection of ``page``, its media fetched in one catalog batch when selected."""
    media: dict[str, Media | None] = {}
    if _selects_entry_media(info):
        # One batched catalog call for the page, and no coroutine per entry.
        found = await queries.media_of(info.context, page.items)
        media = {i: Media.from_record(m) if m else None for i, m in found.items()}
    edges, page_info = edges_and_page_info(
        page,
        lambda e: PlaylistEntry.from_record(playlist_id, e, media.get(e.media_id, UNFETCHED)),
        entry_cursor,
    )
    return PlaylistEntryConnection(
        edges=edges, page_info=page_info, total_count=page.total, version=page.version
    )
