"""Finding playlists in GraphQL: orders, ``PlaylistConnection``, a user's lists, the title search.

``Viewer.playlists`` (in :mod:`chorus.graphql.schema.query`), ``User.playlists``
(:mod:`chorus.graphql.schema.common.types`) and ``Query.searchPlaylists`` page a
:class:`PlaylistConnection` with keyset cursors that carry their order
(:func:`chorus.graphql.schema.common.ids.ordered_playlist_cursor`); the fields here check
their arguments (:mod:`chorus.graphql.schema.search.playlist_orders`), make one read
(:mod:`chorus.resolvers.playlist_lists`) and render the page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import strawberry

from chorus.catalog.protocol import MAX_SEARCH_QUERY_LENGTH
from chorus.db.pages import Page
from chorus.domain.model import Playlist as PlaylistRecord
from chorus.domain.playlist_search import (
    Direction,
    OrderField,
    PlaylistKey,
    PlaylistWindow,
    title_key,
)
from chorus.domain.playlist_search import PlaylistOrder as Order
from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.connections import Connection, edges_and_page_info
from chorus.graphql.schema.common.types import ChorusInfo
from chorus.graphql.schema.playlists.playlist import Playlist
from chorus.graphql.schema.search import playlist_orders as playlist_arguments
from chorus.resolvers import playlist_lists

PlaylistOrderField = strawberry.enum(
    OrderField,
    name="PlaylistOrderField",
    description="CREATED_AT, UPDATED_AT (the last committed version), TITLE (case-folded, "
    "white space runs as one space); ties are broken by the playlist id.",
)
OrderDirection = strawberry.enum(Direction, name="OrderDirection")


@strawberry.input(
    description="The order of a list of playlists. Without `direction`: TITLE A→Z, "
    "times newest first. A cursor belongs to the order it was read in: with another "
    "order it is BAD_USER_INPUT."
)
class PlaylistOrder:
    field: PlaylistOrderField = OrderField.CREATED_AT  # type: ignore[valid-type]
    direction: OrderDirection | None = None  # type: ignore[valid-type]


@strawberry.type(description="A page of playlists in the order asked.")
class PlaylistConnection(Connection[Playlist]):
    total_count: int = strawberry.field(description="Playlists in the whole list.")

    @classmethod
    async def of_user(
        cls,
        info: ChorusInfo,
        owner_id: str,
        first: int | None,
        after: str | None,
        last: int | None,
        before: str | None,
        order_by: PlaylistOrder | None,
    ) -> PlaylistConnection:
        """``User.playlists`` (:func:`user_playlists`), reached from ``User`` as a lazy type."""
        return await user_playlists(info, owner_id, first, after, last, before, order_by)


def _order(order_by: PlaylistOrder | None) -> Order:
    if order_by is None:
        return playlist_arguments.playlist_order(None, None)
    return playlist_arguments.playlist_order(order_by.field, order_by.direction)


def playlist_connection(page: Page[PlaylistRecord], order: Order) -> PlaylistConnection:
    """The connection of a page of playlists in ``order``, each edge's cursor of that order."""

    def cursor(p: PlaylistRecord) -> str:
        value: datetime | str
        if order.field is OrderField.TITLE:
            value = title_key(p.title)
        elif order.field is OrderField.UPDATED_AT:
            value = p.updated_at
        else:
            value = p.created_at
        return ids.ordered_playlist_cursor(PlaylistKey(order, value, p.id))

    edges, info = edges_and_page_info(page, Playlist.from_record, cursor)
    return PlaylistConnection(edges=edges, page_info=info, total_count=page.total)


_Read = Callable[[PlaylistWindow], Awaitable[Page[PlaylistRecord]]]
"""One read of a list of playlists: the page of a checked window."""


async def _paged(
    info: ChorusInfo,
    order: Order,
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
    read: _Read,
) -> PlaylistConnection:
    """Check the Relay arguments in ``order``, ``read`` that window and render the page."""
    window = playlist_arguments.playlists_request(
        info.context.services.limits, order, first, after, last, before
    )
    return playlist_connection(await read(window), order)


async def viewer_playlists(
    info: ChorusInfo,
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
    order_by: PlaylistOrder | None,
) -> PlaylistConnection:
    """``Viewer.playlists``: see its description."""

    async def read(window: PlaylistWindow) -> Page[PlaylistRecord]:
        return await playlist_lists.viewer_playlists(info.context, window)

    return await _paged(info, _order(order_by), first, after, last, before, read)


async def user_playlists(
    info: ChorusInfo,
    owner_id: str,
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
    order_by: PlaylistOrder | None,
) -> PlaylistConnection:
    """``User.playlists``: see its description."""

    async def read(window: PlaylistWindow) -> Page[PlaylistRecord]:
        return await playlist_lists.user_playlists(info.context, owner_id, window)

    return await _paged(info, _order(order_by), first, after, last, before, read)


SEARCH_DESCRIPTION = (
    "PUBLIC playlists whose title starts with `query`, ignoring case (Unicode case "
    "folding) and runs of white space; every character is literal (`%` and `_` too). "
    "Ordered by the case-folded title, then id (the cursors are those of "
    "`orderBy: {field: TITLE, direction: ASC}`). An empty query lists every PUBLIC "
    f"playlist. At most {MAX_SEARCH_QUERY_LENGTH} characters, no control characters."
)


async def search_playlists(
    info: ChorusInfo,
    query: str,
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
) -> PlaylistConnection:
    """``Query.searchPlaylists``: see :data:`SEARCH_DESCRIPTION`."""

    async def read(window: PlaylistWindow) -> Page[PlaylistRecord]:
        # In this order: a bad cursor or size, then a missing token, then a bad query.
        info.context.viewer()
        key = playlist_arguments.title_query(query)
        return await playlist_lists.search_playlists(info.context, key, window)

    order = playlist_arguments.playlist_order(OrderField.TITLE, Direction.ASC)
    return await _paged(info, order, first, after, last, before, read)
