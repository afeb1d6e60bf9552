"""The leaf object types of the schema: users, media, entries, and the enums.

None of them reads anything but the request's DataLoaders; the types that
page (``Playlist``, ``Viewer``) are in :mod:`chorus.graphql.schema.playlists.playlist` and
:mod:`chorus.graphql.schema.query`, their connections in
:mod:`chorus.graphql.schema.common.connections`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, cast

import strawberry
from strawberry.types import Info
from strawberry.types.lazy_type import LazyType

from chorus.catalog.protocol import Media as MediaRecord
from chorus.domain import positions
from chorus.domain.follows import Target, TargetKind
from chorus.domain.model import Entry
from chorus.domain.model import Playlist as PlaylistRecord
from chorus.domain.model import Role as RoleEnum
from chorus.domain.model import Visibility as VisibilityEnum
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext

Role = strawberry.enum(
    RoleEnum,
    name="Role",
    description="OWNER: everything. EDITOR: entries, title and description while the "
    "playlist is collaborative. VIEWER: read only.",
)
Visibility = strawberry.enum(
    VisibilityEnum,
    name="Visibility",
    description="PUBLIC: readable by every authenticated user. PRIVATE: members only.",
)

_LISTS = "chorus.graphql.schema.search.playlist_connection"
"""Where ``User.playlists``' types are: above this module, which they use (``Playlist.owner``)."""

_PLAYLIST_CONNECTION: LazyType[Any, Any] = LazyType("PlaylistConnection", _LISTS)

if TYPE_CHECKING:
    from chorus.graphql.schema.search.playlist_connection import PlaylistConnection, PlaylistOrder

ChorusInfo = Info[RequestContext, None]


def header_fields(p: PlaylistRecord) -> dict[str, Any]:
    """The header of ``p`` as keyword arguments of ``Playlist`` and ``PlaylistAtVersion``.

    ``version``, ``title``, ``description``, ``visibility``, ``collaborative``,
    ``entry_count``, ``created_at`` and ``updated_at``, as the record has them.
    """
    return {
        "version": p.version,
        "title": p.title,
        "description": p.description,
        "visibility": p.visibility,
        "collaborative": p.collaborative,
        "entry_count": p.entry_count,
        "created_at": p.created_at,
        "updated_at": p.updated_at,
    }


@strawberry.interface(description="An object with a global ID (Relay object identification).")
class Node:
    id: strawberry.ID = strawberry.field(description="Opaque global ID; `node(id:)` finds it.")


@strawberry.type(description="A user: the `sub` of a valid token. Any user id may be a member.")
class User:
    id: strawberry.ID = strawberry.field(description="The user id (the token's `sub`), as is.")

    @strawberry.field(description="Users following this user.")
    async def follower_count(self, info: ChorusInfo) -> int:
        return await info.context.reads.loaders.follower_count.load(
            Target(TargetKind.USER, self.id)
        )

    @strawberry.field(
        description="Playlists this user owns that the viewer may read: the PUBLIC ones and "
        "those shared with the viewer (a member); never another PRIVATE one. The viewer's "
        "own: all of them. Default order: CREATED_AT, newest first; `first`/`after` or "
        "`last`/`before`."
    )
    async def playlists(
        self,
        info: ChorusInfo,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        order_by: Annotated[PlaylistOrder, strawberry.lazy(_LISTS)] | None = None,
    ) -> Annotated[PlaylistConnection, strawberry.lazy(_LISTS)]:
        # Resolved as the annotations are (strawberry.lazy), not imported: a
        # playlist connection holds playlists, whose owner is a User.
        connection = cast(type[PlaylistConnection], _PLAYLIST_CONNECTION.resolve_type())
        return await connection.of_user(info, self.id, first, after, last, before, order_by)


@strawberry.type(description="Media metadata from the catalog.")
class Media:
    id: str
    title: str
    artists: list[str]
    album: str | None
    duration_ms: int | None = strawberry.field(description="Duration in milliseconds.")
    available: bool

    @strawberry.field(
        description="Whether the media is in the viewer's Liked Songs (one query per request "
        "for every media asked)."
    )
    def viewer_has_liked(self, info: ChorusInfo) -> bool:
        info.context.viewer()
        # The viewer's own: an answer (or a live event) holding it is not shared.
        info.context.reads.record.depends_on_viewer()
        if self.liked is not None:
            return self.liked
        # Awaited by graphql-core, as PlaylistEntry.media's load is.
        return cast(bool, info.context.reads.loaders.liked.load(self.id))

    liked: strawberry.Private[bool | None] = None
    """The viewer's ``viewerHasLiked``, when the page that made this fetched it (else ``None``)."""

    @classmethod
    def from_record(cls, m: MediaRecord, liked: bool | None = None) -> Media:
        """``m`` as the API shows it; ``liked``: the viewer's like, when fetched with its page."""
        return cls(
            id=m.id,
            title=m.title,
            artists=list(m.artists),
            album=m.album,
            duration_ms=m.duration_ms,
            available=m.available,
            liked=liked,
        )


class Unfetched:
    """The media of an entry not fetched with its page (loaded on demand)."""


UNFETCHED = Unfetched()


@strawberry.type(description="One entry of a playlist: a media reference at a position.")
class PlaylistEntry(Node):
    id: strawberry.ID
    entry_id: strawberry.Private[str]
    position_key: str = strawberry.field(
        description="Fractional position; entries are ordered by (positionKey, id) compared "
        f"bytewise. At most {positions.MAX_LENGTH} characters."
    )
    media_id: str
    added_at: datetime
    added_by_id: strawberry.Private[str]

    @classmethod
    def from_record(
        cls, playlist_id: str, e: Entry, media: Media | Unfetched | None = UNFETCHED
    ) -> PlaylistEntry:
        """The entry ``e`` of ``playlist_id``; ``media`` when it was fetched with its page."""
        return cls(
            id=strawberry.ID(ids.entry_global_id(playlist_id, e.entry_id)),
            entry_id=e.entry_id,
            position_key=e.position_key,
            media_id=e.media_id,
            added_at=e.added_at,
            added_by_id=e.added_by,
            prefetched=media,
        )

    @strawberry.field
    def added_by(self) -> User:
        return User(id=strawberry.ID(self.added_by_id))

    prefetched: strawberry.Private[Media | Unfetched | None] = UNFETCHED
    """The media, when the page that made this entry fetched all its media at once."""

    @strawberry.field(description="Null when the catalog does not know the media or is down.")
    def media(self, info: ChorusInfo) -> Media | None:
        if not isinstance(self.prefetched, Unfetched):
            return self.prefetched
        # graphql-core awaits what a resolver returns when it is awaitable: an
        # entry nobody prefetched loads its media through the request's
        # DataLoader, and a prefetched page costs no coroutine per entry.
        return cast(Media | None, self._load_media(info))

    async def _load_media(self, info: ChorusInfo) -> Media | None:
        record = await info.context.reads.loaders.media.load(self.media_id)
        return Media.from_record(record) if record else None
