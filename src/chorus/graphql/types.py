"""Object types of the schema: nodes, users, media, entries, members and their connections."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.types import Info

from chorus.catalog.protocol import Media as MediaRecord
from chorus.domain.model import Entry, Member
from chorus.domain.model import Playlist as PlaylistRecord
from chorus.domain.model import Role as RoleEnum
from chorus.domain.model import Visibility as VisibilityEnum
from chorus.graphql import ids
from chorus.resolvers import queries
from chorus.resolvers.context import RequestContext
from chorus.resolvers.errors import BadUserInput

if TYPE_CHECKING:
    from chorus.graphql.history import PlaylistChangeBatch

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

ChorusInfo = Info[RequestContext, None]


@strawberry.interface(description="An object with a global ID (Relay object identification).")
class Node:
    id: strawberry.ID = strawberry.field(description="Opaque global ID; `node(id:)` finds it.")


@strawberry.type(description="A user: the `sub` of a valid token. Any user id may be a member.")
class User:
    id: strawberry.ID = strawberry.field(description="The user id (the token's `sub`), as is.")


@strawberry.type(description="Media metadata from the catalog.")
class Media:
    id: str
    title: str
    artists: list[str]
    album: str | None
    duration_ms: int | None = strawberry.field(description="Duration in milliseconds.")
    available: bool

    @classmethod
    def from_record(cls, m: MediaRecord) -> Media:
        return cls(
            id=m.id,
            title=m.title,
            artists=list(m.artists),
            album=m.album,
            duration_ms=m.duration_ms,
            available=m.available,
        )


@strawberry.type(description="Relay page information.")
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type(description="One entry of a playlist: a media reference at a position.")
class PlaylistEntry(Node):
    id: strawberry.ID
    entry_id: strawberry.Private[str]
    position_key: str = strawberry.field(
        description="Fractional position; entries are ordered by (positionKey, id) compared "
        "bytewise. At most 32 characters."
    )
    media_id: str
    added_at: datetime
    added_by_id: strawberry.Private[str]

    @classmethod
    def from_record(cls, playlist_id: str, e: Entry) -> PlaylistEntry:
        return cls(
            id=strawberry.ID(ids.to_global_id("PlaylistEntry", playlist_id, e.entry_id)),
            entry_id=e.entry_id,
            position_key=e.position_key,
            media_id=e.media_id,
            added_at=e.added_at,
            added_by_id=e.added_by,
        )

    @strawberry.field
    def added_by(self) -> User:
        return User(id=strawberry.ID(self.added_by_id))

    @strawberry.field(description="Null when the catalog does not know the media or is down.")
    async def media(self, info: ChorusInfo) -> Media | None:
        record = await info.context.loaders.media.load(self.media_id)
        return Media.from_record(record) if record else None


@strawberry.type
class PlaylistEntryEdge:
    cursor: str
    node: PlaylistEntry


@strawberry.type(description="A page of entries in list order.")
class PlaylistEntryConnection:
    edges: list[PlaylistEntryEdge]
    page_info: PageInfo
    total_count: int = strawberry.field(description="Live entries in the whole playlist.")
    version: int = strawberry.field(description="The playlist version this page was read at.")


@strawberry.type
class PlaylistMember:
    user: User
    role: Role  # type: ignore[valid-type]


@strawberry.type
class PlaylistMemberEdge:
    cursor: str
    node: PlaylistMember


@strawberry.type
class PlaylistMemberConnection:
    edges: list[PlaylistMemberEdge]
    page_info: PageInfo
    total_count: int


def _page_info(cursors: list[str], page: queries.Page[object]) -> PageInfo:
    return PageInfo(
        has_next_page=page.has_next,
        has_previous_page=page.has_previous,
        start_cursor=cursors[0] if cursors else None,
        end_cursor=cursors[-1] if cursors else None,
    )


def _entry_position(cursor: str | None, name: str) -> tuple[str, str] | None:
    if cursor is None:
        return None
    try:
        return ids.decode_entry_cursor(cursor)
    except ids.MalformedId:
        raise BadUserInput(f"{name} is not a cursor of this connection") from None


def _member_position(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        return ids.decode_cursor("m", cursor)
    except ids.MalformedId:
        raise BadUserInput("after is not a cursor of this connection") from None


@strawberry.type(description="An ordered list of media that several people edit at once.")
class Playlist(Node):
    id: strawberry.ID
    record: strawberry.Private[PlaylistRecord]
    title: str
    description: str | None
    visibility: Visibility  # type: ignore[valid-type]
    collaborative: bool = strawberry.field(description="False: only the owner edits.")
    version: int = strawberry.field(
        description="Starts at 0, +1 per accepted mutation; the version this object was read at."
    )
    entry_count: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_record(cls, p: PlaylistRecord) -> Playlist:
        return cls(
            id=strawberry.ID(ids.to_global_id("Playlist", p.id)),
            record=p,
            title=p.title,
            description=p.description,
            visibility=p.visibility,
            collaborative=p.collaborative,
            version=p.version,
            entry_count=p.entry_count,
            created_at=p.created_at,
            updated_at=p.updated_at,
        )

    @strawberry.field
    def owner(self) -> User:
        return User(id=strawberry.ID(self.record.owner_id))

    @strawberry.field(description="The viewer's role; null when not a member.")
    async def viewer_role(self, info: ChorusInfo) -> Role | None:  # type: ignore[valid-type]
        return await info.context.loaders.role.load(self.record.id)

    @strawberry.field(
        description="Entries in list order, as a Relay connection over the "
        "keyset (positionKey, id). A cursor stays valid while the list changes: "
        "the cursor of an entry removed since pages from where it stood."
    )
    async def entries(
        self,
        info: ChorusInfo,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> PlaylistEntryConnection:
        page = await queries.entries_page(
            info.context,
            self.record,
            first=first,
            after=_entry_position(after, "after"),
            last=last,
            before=_entry_position(before, "before"),
        )
        edges = [
            PlaylistEntryEdge(
                cursor=ids.entry_cursor(e.position_key, e.entry_id),
                node=PlaylistEntry.from_record(self.record.id, e),
            )
            for e in page.items
        ]
        return PlaylistEntryConnection(
            edges=edges,
            page_info=_page_info([e.cursor for e in edges], page),  # type: ignore[arg-type]
            total_count=page.total,
            version=page.version,
        )

    @strawberry.field(description="Members ordered by user id.")
    async def members(
        self, info: ChorusInfo, first: int | None = None, after: str | None = None
    ) -> PlaylistMemberConnection:
        page = await queries.members_page(
            info.context, self.record, first=first, after=_member_position(after)
        )
        edges = [_member_edge(m) for m in page.items]
        return PlaylistMemberConnection(
            edges=edges,
            page_info=_page_info([e.cursor for e in edges], page),  # type: ignore[arg-type]
            total_count=page.total,
        )

    @strawberry.field(
        description="Sync: what happened after sinceVersion, oldest first "
        "(at most `first` versions, default 50, max 100)."
    )
    async def changes(
        self, info: ChorusInfo, since_version: int, first: int | None = None
    ) -> Annotated[PlaylistChangeBatch, strawberry.lazy("chorus.graphql.history")]:
        from chorus.graphql.history import PlaylistChangeBatch

        batch = await queries.changes(
            info.context, self.record, since_version=since_version, first=first
        )
        return PlaylistChangeBatch.from_batch(batch)


def _member_edge(m: Member) -> PlaylistMemberEdge:
    return PlaylistMemberEdge(
        cursor=ids.cursor("m", m.user_id),
        node=PlaylistMember(user=User(id=strawberry.ID(m.user_id)), role=m.role),
    )
