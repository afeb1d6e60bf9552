"""The Query root: ``node``, ``playlist``, ``viewer`` (and its playlists), ``searchMedia``.

Each field checks its arguments (:mod:`chorus.graphql.schema.common.arguments`), makes one
read (:mod:`chorus.resolvers.queries`) and renders the result.
"""

from __future__ import annotations

import strawberry

from chorus.domain.validation import is_user_id
from chorus.graphql.schema.common import arguments, ids
from chorus.graphql.schema.common.connections import Connection, connection, page_info
from chorus.graphql.schema.common.types import ChorusInfo, Media, Node, PlaylistEntry, User
from chorus.graphql.schema.follows.follows import (
    FeedConnection,
    FollowConnection,
    FollowEdge,
    FollowTargetKind,
    feed_edge,
)
from chorus.graphql.schema.playlists.playlist import Playlist, first_page_asked
from chorus.graphql.schema.search import playlist_connection
from chorus.graphql.schema.search.playlist_connection import PlaylistConnection, PlaylistOrder
from chorus.resolvers import follows, queries


def _search_cursor(hit: queries.SearchHit) -> str:
    return ids.search_cursor(hit.position)


def _search_node(hit: queries.SearchHit) -> Media:
    return Media.from_record(hit.media)


@strawberry.type(description="The authenticated user and what they can reach.")
class Viewer:
    user: User

    @strawberry.field(
        description="Playlists the viewer owns or is a member of (not Liked Songs), in "
        "`orderBy` (default: CREATED_AT, newest first); `first`/`after` or `last`/`before`."
    )
    async def playlists(
        self,
        info: ChorusInfo,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        order_by: PlaylistOrder | None = None,
    ) -> PlaylistConnection:
        return await playlist_connection.viewer_playlists(
            info, first, after, last, before, order_by
        )

    @strawberry.field(
        description="The viewer's Liked Songs: a PRIVATE playlist only they see, made on "
        "first use, newest like first. `likeMedia` / `unlikeMedia` change it; its title, "
        "visibility and members never change and it cannot be deleted."
    )
    async def liked_songs(self, info: ChorusInfo) -> Playlist:
        return Playlist.from_record(await queries.liked_songs(info.context))

    @strawberry.field(description="What the viewer follows, newest follow first; kind: only those.")
    async def following(
        self,
        info: ChorusInfo,
        kind: FollowTargetKind | None = None,  # type: ignore[valid-type]
        first: int | None = None,
        after: str | None = None,
    ) -> FollowConnection:
        position = arguments.following_position(after)
        size, _ = arguments.page_size(info.context.services.limits, first)
        page = await follows.following(info.context, kind, size=size, after=position)
        edges = [FollowEdge.from_record(f) for f in page.items]
        return FollowConnection(
            edges=edges,
            page_info=page_info(edges, has_next=page.has_next, has_previous=page.has_previous),
            total_count=page.total,
        )

    @strawberry.field(
        description="What happened in what the viewer follows since they followed it, "
        "newest first: versions of followed playlists and playlists created by followed "
        "users, kept CHORUS_FEED_RETENTION_DAYS days; only what the viewer may read now."
    )
    async def feed(
        self, info: ChorusInfo, first: int | None = None, after: str | None = None
    ) -> FeedConnection:
        position = arguments.feed_position(after)
        info.context.viewer()
        size = arguments.feed_page_size(info.context.services.feed_limits, first)
        page = await follows.feed_page(info.context, size=size, before=position)
        edges = [feed_edge(item) for item in page.items]
        return FeedConnection(
            edges=edges,
            page_info=page_info(edges, has_next=page.has_next, has_previous=position is not None),
        )


@strawberry.type
class Query:
    @strawberry.field(description="Any object by its global ID; null when missing or not visible.")
    async def node(self, info: ChorusInfo, id: strawberry.ID) -> Node | None:
        info.context.viewer()
        found = arguments.node_key(id)
        if found is None:
            return None
        type_name, key = found
        if type_name == ids.PLAYLIST and len(key) == 1:
            record = await queries.visible_playlist(info.context, key[0])
            return Playlist.from_record(record) if record else None
        if type_name == ids.PLAYLIST_ENTRY and len(key) == 2:
            record = await queries.visible_playlist(info.context, key[0])
            entry = await queries.live_entry(info.context, record, key[1]) if record else None
            return PlaylistEntry.from_record(key[0], entry) if entry else None
        return None

    @strawberry.field(
        description="A playlist, or null when missing or not visible to the viewer. "
        "minVersion: never answer with an older version (an error when it does not exist yet)."
    )
    async def playlist(
        self, info: ChorusInfo, id: strawberry.ID, min_version: int | None = None
    ) -> Playlist | None:
        info.context.viewer()
        playlist_id = arguments.playlist_key(id)
        if playlist_id is None:
            return None
        record = await queries.visible_playlist(
            info.context, playlist_id, min_version, first_page=first_page_asked(info)
        )
        arguments.check_min_version(min_version, record)
        return Playlist.from_record(record) if record else None

    @strawberry.field(description="The authenticated user.")
    def viewer(self, info: ChorusInfo) -> Viewer:
        info.context.reads.record.depends_on_viewer()
        return Viewer(user=User(id=strawberry.ID(info.context.viewer())))

    @strawberry.field(
        description="A user by id (the token's `sub`, as `User.id` gives it): any "
        "well-formed id is a user; null for a malformed one."
    )
    def user(self, info: ChorusInfo, id: strawberry.ID) -> User | None:
        info.context.viewer()
        return User(id=id) if is_user_id(id) else None

    @strawberry.field(description=playlist_connection.SEARCH_DESCRIPTION)
    async def search_playlists(
        self,
        info: ChorusInfo,
        query: str,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> PlaylistConnection:
        return await playlist_connection.search_playlists(info, query, first, after, last, before)

    @strawberry.field(
        description="Catalog media whose title, artists or album contain the "
        "query, case-insensitively."
    )
    async def search_media(
        self, info: ChorusInfo, query: str, first: int | None = None, after: str | None = None
    ) -> Connection[Media]:
        offset = arguments.search_offset(after)
        # In this order: a bad cursor, then a missing token, then a bad first or query.
        info.context.viewer()
        size, _ = arguments.page_size(info.context.services.limits, first)
        text = arguments.search_query(query)
        page = await queries.search_media(info.context, text, size=size, offset=offset)
        return connection(page, _search_node, _search_cursor)
