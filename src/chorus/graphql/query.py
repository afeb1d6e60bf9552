"""The Query root: ``node``, ``playlist``, ``viewer`` (and its playlists), ``searchMedia``.

Each field checks its arguments (:mod:`chorus.graphql.arguments`), makes one
read (:mod:`chorus.resolvers.queries`) and renders the result.
"""

from __future__ import annotations

import strawberry

from chorus.domain.model import Playlist as PlaylistRecord
from chorus.graphql import arguments, ids
from chorus.graphql.connections import Connection, connection
from chorus.graphql.playlist import Playlist
from chorus.graphql.types import ChorusInfo, Media, Node, PlaylistEntry, User
from chorus.resolvers import queries


def _playlist_cursor(p: PlaylistRecord) -> str:
    return ids.playlist_cursor(p.created_at, p.id)


def _search_cursor(hit: queries.SearchHit) -> str:
    return ids.search_cursor(hit.position)


def _search_node(hit: queries.SearchHit) -> Media:
    return Media.from_record(hit.media)


@strawberry.type(description="The authenticated user and what they can reach.")
class Viewer:
    user: User

    @strawberry.field(description="Playlists the viewer owns or is a member of, newest first.")
    async def playlists(
        self, info: ChorusInfo, first: int | None = None, after: str | None = None
    ) -> Connection[Playlist]:
        position = arguments.playlist_position(after)
        size, _ = arguments.page_size(info.context.services.limits, first)
        page = await queries.viewer_playlists(info.context, size=size, after=position)
        return connection(page, Playlist.from_record, _playlist_cursor)

    @strawberry.field(
        description="The viewer's Liked Songs: a PRIVATE playlist only they see, made on "
        "first use, newest like first. `likeMedia` / `unlikeMedia` change it; its title, "
        "visibility and members never change and it cannot be deleted."
    )
    async def liked_songs(self, info: ChorusInfo) -> Playlist:
        return Playlist.from_record(await queries.liked_songs(info.context))


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
        record = await queries.visible_playlist(info.context, playlist_id, min_version)
        arguments.check_min_version(min_version, record)
        return Playlist.from_record(record) if record else None

    @strawberry.field(description="The authenticated user.")
    def viewer(self, info: ChorusInfo) -> Viewer:
        return Viewer(user=User(id=strawberry.ID(info.context.viewer())))

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
