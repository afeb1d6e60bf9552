"""Follows and the feed in the schema: targets, ``viewer.following``, ``viewer.feed``.

A follow's target is a ``Playlist`` (by its global ID) or a ``User`` (by the
user id, as ``User.id`` gives it). The feed is thin: an item names a playlist
version, and the playlist, its title and the version's changes are read
when the feed is read.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated

import strawberry

from chorus.domain.follows import FeedItem as FeedItemRecord
from chorus.domain.follows import Follow as FollowRecord
from chorus.domain.follows import Target
from chorus.domain.follows import TargetKind as TargetKindEnum
from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.connections import PageInfo
from chorus.graphql.schema.common.types import ChorusInfo, User
from chorus.graphql.schema.common.user_error import UserError, user_errors
from chorus.graphql.schema.history.changes import PlaylistChange, change_type
from chorus.graphql.schema.playlists.playlist import Playlist
from chorus.resolvers import queries
from chorus.resolvers.follows import FollowOutcome, feed_item_changes

FollowTargetKind = strawberry.enum(
    TargetKindEnum,
    name="FollowTargetKind",
    description="PLAYLIST: every version of it reaches the feed. USER: playlists they create.",
)

FollowTarget = Annotated[Playlist | User, strawberry.union("FollowTarget")]


async def _target(info: ChorusInfo, target: Target) -> Playlist | User | None:
    if target.kind is TargetKindEnum.USER:
        return User(id=strawberry.ID(target.id))
    record = await queries.visible_playlist(info.context, target.id)
    return Playlist.from_record(record) if record else None


@strawberry.input(
    description="What to follow: kind PLAYLIST with a playlist's global ID, or USER with "
    "a user id. A PRIVATE playlist needs read access."
)
class FollowInput:
    kind: FollowTargetKind  # type: ignore[valid-type]
    target_id: strawberry.ID


@strawberry.input(description="What to stop following (as in FollowInput).")
class UnfollowInput:
    kind: FollowTargetKind  # type: ignore[valid-type]
    target_id: strawberry.ID


@strawberry.type(
    description="What a follow or unfollow did. Both are idempotent: asking again "
    "changes nothing (changed: false)."
)
class FollowPayload:
    following: bool = strawberry.field(description="Whether the viewer follows the target now.")
    changed: bool = strawberry.field(description="False when it already was so.")
    user_errors: list[UserError]
    target_record: strawberry.Private[Target]

    @strawberry.field(description="The target; null when it is not visible to the viewer.")
    async def target(self, info: ChorusInfo) -> FollowTarget | None:
        return await _target(info, self.target_record)

    @classmethod
    def from_outcome(cls, outcome: FollowOutcome) -> FollowPayload:
        return cls(
            following=outcome.value.following,
            changed=outcome.value.changed,
            user_errors=user_errors(outcome),
            target_record=outcome.value.target,
        )


@strawberry.type
class FollowEdge:
    cursor: str
    followed_at: datetime = strawberry.field(description="When the viewer followed it.")
    record: strawberry.Private[Target]

    @strawberry.field(description="Null for a playlist the viewer can no longer see.")
    async def node(self, info: ChorusInfo) -> FollowTarget | None:
        return await _target(info, self.record)

    @classmethod
    def from_record(cls, f: FollowRecord) -> FollowEdge:
        return cls(
            cursor=ids.follow_cursor(f.created_at, f.target.kind.value, f.target.id),
            followed_at=f.created_at,
            record=f.target,
        )


@strawberry.type(description="What the viewer follows, newest follow first.")
class FollowConnection:
    edges: list[FollowEdge]
    page_info: PageInfo
    total_count: int


@strawberry.enum(description="What a feed item tells.")
class FeedItemKind(Enum):
    PLAYLIST_CREATED = "PLAYLIST_CREATED"
    PLAYLIST_CHANGED = "PLAYLIST_CHANGED"


@strawberry.type(
    description="One version of a followed playlist (or version 0 of a playlist a "
    "followed user created): open the playlist at `version` to see it."
)
class FeedItem:
    version: int
    actor: User = strawberry.field(description="Who committed the version.")
    happened_at: datetime = strawberry.field(description="When it was committed.")
    kind: FeedItemKind
    record: strawberry.Private[FeedItemRecord]

    @classmethod
    def from_record(cls, item: FeedItemRecord) -> FeedItem:
        return cls(
            version=item.version,
            actor=User(id=strawberry.ID(item.actor_id)),
            happened_at=item.happened_at,
            kind=FeedItemKind.PLAYLIST_CREATED
            if item.version == 0
            else FeedItemKind.PLAYLIST_CHANGED,
            record=item,
        )

    @strawberry.field(description="The playlist as it is now; null when no longer visible.")
    async def playlist(self, info: ChorusInfo) -> Playlist | None:
        record = await queries.visible_playlist(info.context, self.record.playlist_id)
        return Playlist.from_record(record) if record else None

    @strawberry.field(
        description="What the version changed, from the log (empty once the log is compacted). "
        "Charged as `Playlist.changes` charges a version: its entries beyond 100 add to "
        "`actualQueryCost`; past the request's budget of history, null with a "
        "LIMIT_EXCEEDED error naming how to read it (the rest of the page is answered)."
    )
    async def changes(self, info: ChorusInfo) -> list[PlaylistChange] | None:
        record = self.record
        found = await feed_item_changes(info.context, record.playlist_id, record.version)
        rendered = (change_type(self.record.playlist_id, c) for c in found)
        return [c for c in rendered if c is not None]


@strawberry.type
class FeedEdge:
    cursor: str
    node: FeedItem


@strawberry.type(
    description="The viewer's feed, newest first. No totalCount: counting it would read "
    "every followed target's log."
)
class FeedConnection:
    edges: list[FeedEdge]
    page_info: PageInfo


def feed_edge(item: FeedItemRecord) -> FeedEdge:
    return FeedEdge(
        cursor=ids.feed_cursor(item.happened_at, item.playlist_id, item.version),
        node=FeedItem.from_record(item),
    )
