"""Relay connections: ``PageInfo``, edges, connections, and the functions that build them.

Every connection of the schema is a :class:`Connection` of its node type;
strawberry names ``Connection[Playlist]`` ``PlaylistConnection`` and its
edges ``PlaylistEdge``. ``Playlist.entries`` also tells the version its page
was read at (:class:`PlaylistEntryConnection`).

:func:`edges_and_page_info` turns a page — any value with ``items``,
``has_next``, ``has_previous`` and ``total`` (:class:`PageLike`), as the
resolvers return — into edges, each with its cursor, and their ``PageInfo``;
:func:`connection` wraps them in a :class:`Connection`. Cursor formats are in
:mod:`chorus.graphql.schema.common.ids`; decoding cursor arguments is
:mod:`chorus.graphql.schema.common.arguments`' business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

import strawberry

from chorus.graphql.schema.common.types import PlaylistEntry

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
N = TypeVar("N")


class PageLike(Protocol[T_co]):
    """A page of items in list order, as :mod:`chorus.resolvers.queries` returns them."""

    @property
    def items(self) -> Sequence[T_co]: ...

    @property
    def has_next(self) -> bool: ...

    @property
    def has_previous(self) -> bool: ...

    @property
    def total(self) -> int: ...


@strawberry.type(description="Relay page information.")
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type
class Edge(Generic[N]):
    cursor: str
    node: N


@strawberry.type
class Connection(Generic[N]):
    edges: list[Edge[N]]
    page_info: PageInfo
    total_count: int


@strawberry.type(description="A page of entries in list order.")
class PlaylistEntryConnection(Connection[PlaylistEntry]):
    total_count: int = strawberry.field(description="Live entries in the whole playlist.")
    version: int = strawberry.field(description="The playlist version this page was read at.")


class _Cursored(Protocol):
    @property
    def cursor(self) -> str: ...


def page_info(edges: Sequence[_Cursored], *, has_next: bool, has_previous: bool) -> PageInfo:
    """The ``PageInfo`` of edges built by hand (connections with their own edge types)."""
    return PageInfo(
        has_next_page=has_next,
        has_previous_page=has_previous,
        start_cursor=edges[0].cursor if edges else None,
        end_cursor=edges[-1].cursor if edges else None,
    )


def edges_and_page_info(
    page: PageLike[T], node: Callable[[T], N], cursor: Callable[[T], str]
) -> tuple[list[Edge[N]], PageInfo]:
    """The edges of a page, in its order, and the ``PageInfo`` that goes with them.

    Args:
        page: the items and whether more lie on either side of them.
        node: the GraphQL node of an item.
        cursor: the cursor of an item (:mod:`chorus.graphql.schema.common.ids`).

    Returns:
        ``(edges, page_info)``; ``startCursor`` and ``endCursor`` are the
        first and last edge's cursors, ``null`` on an empty page.
    """
    edges = [Edge(cursor=cursor(item), node=node(item)) for item in page.items]
    return edges, page_info(edges, has_next=page.has_next, has_previous=page.has_previous)


def connection(
    page: PageLike[T], node: Callable[[T], N], cursor: Callable[[T], str]
) -> Connection[N]:
    """The connection of a page: :func:`edges_and_page_info` and the page's ``total``."""
    edges, page_info = edges_and_page_info(page, node, cursor)
    return Connection(edges=edges, page_info=page_info, total_count=page.total)
