"""The argument checks of the lists of playlists: orders, their cursors, the title query.

The rule of :mod:`chorus.graphql.schema.common.arguments` holds here too (a field checks
every argument before its one resolver); these live apart only to keep that
module short. A refusal is ``BAD_USER_INPUT``.
"""

from __future__ import annotations

from chorus.domain.limits import Limits
from chorus.domain.playlist_search import (
    Direction,
    OrderField,
    PlaylistKey,
    PlaylistOrder,
    PlaylistWindow,
    title_key,
)
from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.arguments import NOT_A_CURSOR, page_size, search_query
from chorus.resolvers.request_errors import BadUserInput


def playlists_request(
    limits: Limits,
    order: PlaylistOrder,
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
) -> PlaylistWindow:
    """The Relay arguments of a list of playlists (``viewer``'s, a user's, a search), checked.

    Raises:
        BadUserInput: a cursor that is not a playlist cursor, or one of
            another order (``orderBy`` differs from the one it was read with);
            and see :func:`page_size`.
    """
    after_key = _playlist_key(after, "after", order)
    before_key = _playlist_key(before, "before", order)
    size, from_end = page_size(limits, first, last)
    return PlaylistWindow(order, size, from_end, after_key, before_key)


def _playlist_key(cursor: str | None, name: str, order: PlaylistOrder) -> PlaylistKey | None:
    if cursor is None:
        return None
    try:
        key = ids.decode_ordered_playlist_cursor(cursor)
    except ids.MalformedId:
        raise BadUserInput(NOT_A_CURSOR.format(name)) from None
    if key.order != order:
        raise BadUserInput(
            f"{name} is a cursor of orderBy {{field: {key.order.field.value}, direction: "
            f"{key.order.direction.value}}}, not of {{field: {order.field.value}, "
            f"direction: {order.direction.value}}}: page with the order it was read in"
        )
    return key


def playlist_order(field: OrderField | None, direction: Direction | None) -> PlaylistOrder:
    """The order an ``orderBy`` asks: ``CREATED_AT`` without a field, and the field's default
    direction without one (titles A→Z, times newest first)."""
    return PlaylistOrder.of(field or OrderField.CREATED_AT, direction)


def title_query(query: str) -> str:
    """The title key a ``searchPlaylists`` query looks for (its ``title_key``).

    Raises:
        BadUserInput: as :func:`~chorus.graphql.schema.common.arguments.search_query`
            (same bound, characters).
    """
    return title_key(search_query(query))
