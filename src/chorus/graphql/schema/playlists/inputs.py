"""Mutation inputs. Every playlist input has ``playlistId``, ``operationId``,
``baseVersion`` and ``strict`` (DESIGN §5)."""

from __future__ import annotations

import strawberry

from chorus.domain.model import Visibility as VisibilityEnum
from chorus.graphql.schema.common.types import Role, Visibility


@strawberry.input
class CreatePlaylistInput:
    operation_id: strawberry.ID
    title: str
    description: str | None = None
    visibility: Visibility = VisibilityEnum.PRIVATE  # type: ignore[valid-type]
    collaborative: bool = False


@strawberry.input(
    description="Add media contiguously, in the order given, after or before an "
    "entry; neither appends."
)
class AddEntriesInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    media_ids: list[str]
    after: strawberry.ID | None = None
    before: strawberry.ID | None = None
    strict: bool = strawberry.field(
        default=False, description="Compare-and-set: refuse unless baseVersion is current."
    )


@strawberry.input(
    description="Move entries contiguously, in the order given, after or before "
    "an entry; neither moves them to the end."
)
class MoveEntriesInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    entry_ids: list[strawberry.ID]
    after: strawberry.ID | None = None
    before: strawberry.ID | None = None
    strict: bool = False


@strawberry.input
class RemoveEntriesInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    entry_ids: list[strawberry.ID]
    strict: bool = False


@strawberry.input(description="Fields left out stay as they are; description null clears it.")
class UpdatePlaylistInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    title: str | None = strawberry.UNSET
    description: str | None = strawberry.UNSET
    visibility: Visibility | None = strawberry.UNSET  # type: ignore[valid-type]
    collaborative: bool | None = strawberry.UNSET
    strict: bool = False


@strawberry.input(description="Grant EDITOR or VIEWER to any user id (owner only).")
class SetMemberRoleInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    user_id: strawberry.ID
    role: Role  # type: ignore[valid-type]
    strict: bool = False


@strawberry.input(description="The owner removes a member; a member may remove themselves.")
class RemoveMemberInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    user_id: strawberry.ID
    strict: bool = False


@strawberry.input(
    description="Commit a new version whose entries, title and description "
    "equal those of toVersion. Members and visibility are not reverted."
)
class RevertPlaylistInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    to_version: int
    strict: bool = False


@strawberry.input
class DeletePlaylistInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
    strict: bool = False


@strawberry.input(
    description="Like a media: it goes to the top of the viewer's Liked Songs. Liking a "
    "media already there commits a version that changes nothing."
)
class LikeMediaInput:
    operation_id: strawberry.ID
    media_id: str


@strawberry.input(
    description="Take a media out of the viewer's Liked Songs; a version that changes "
    "nothing when it is not there."
)
class UnlikeMediaInput:
    operation_id: strawberry.ID
    media_id: str
