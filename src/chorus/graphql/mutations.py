"""Mutations: inputs, payloads, and the mapping from input to domain command.

Every playlist input has ``playlistId``, ``operationId``, ``baseVersion`` and
``strict``; every payload has ``operationId``, ``version``, ``replayed``,
``rebased``, ``playlist`` and ``userErrors`` (DESIGN §5). Expected failures
are ``userErrors`` with an :class:`ErrorCode`; the payload's ``version`` is
then null and nothing was committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import strawberry

from chorus.domain import commands as cmd
from chorus.domain.errors import (
    AnchorNotFound,
    DomainError,
    InvalidInput,
    NotFound,
    VersionConflict,
)
from chorus.domain.errors import ErrorCode as ErrorCodeEnum
from chorus.domain.model import Visibility as VisibilityEnum
from chorus.graphql import ids
from chorus.graphql.types import ChorusInfo, Playlist, PlaylistEntry, Role, Visibility
from chorus.resolvers import mutations, queries
from chorus.resolvers.mutations import MutationResult

ErrorCode = strawberry.enum(ErrorCodeEnum, name="ErrorCode", description="Why a mutation failed.")


@strawberry.type(description="An expected failure; nothing was committed.")
class UserError:
    code: ErrorCode  # type: ignore[valid-type]
    message: str
    field: list[str] | None = strawberry.field(description="Path of the input field at fault.")
    current_version: int | None = strawberry.field(
        default=None, description="With VERSION_CONFLICT: the playlist's version now."
    )

    @classmethod
    def from_error(cls, error: DomainError) -> UserError:
        current = error.current_version if isinstance(error, VersionConflict) else None
        field = ["input", *error.field] if error.field else None
        return cls(code=error.code, message=error.message, field=field, current_version=current)


@strawberry.interface(description="What every mutation returns.")
class MutationPayload:
    operation_id: strawberry.ID
    version: int | None = strawberry.field(description="The version committed; null on error.")
    replayed: bool = strawberry.field(
        description="True when this is the stored result of an earlier commit of this "
        "operationId; nothing new was committed."
    )
    rebased: bool = strawberry.field(
        description="True when baseVersion was older than the version the command was applied to."
    )
    user_errors: list[UserError]
    playlist_id: strawberry.Private[str | None]

    @strawberry.field(description="The playlist after the mutation, if visible.")
    async def playlist(self, info: ChorusInfo) -> Playlist | None:
        if self.playlist_id is None:
            return None
        record = await queries.visible_playlist(info.context, self.playlist_id)
        return Playlist.from_record(record) if record else None


def _common(result: MutationResult) -> dict[str, Any]:
    committed = result.committed
    return {
        "operation_id": strawberry.ID(result.operation_id),
        "version": committed.outcome.version if committed else None,
        "replayed": committed.replayed if committed else False,
        "rebased": committed.outcome.rebased if committed else False,
        "user_errors": [UserError.from_error(result.error)] if result.error else [],
        "playlist_id": result.playlist_id,
    }


def _entries(result: MutationResult) -> list[PlaylistEntry]:
    if result.committed is None:
        return []
    outcome = result.committed.outcome
    return [PlaylistEntry.from_record(outcome.playlist_id, e) for e in outcome.entries]


def _skipped(result: MutationResult) -> list[strawberry.ID]:
    if result.committed is None:
        return []
    outcome = result.committed.outcome
    return [
        strawberry.ID(ids.to_global_id("PlaylistEntry", outcome.playlist_id, e))
        for e in outcome.skipped_entry_ids
    ]


# --- inputs ------------------------------------------------------------------


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


# --- payloads ----------------------------------------------------------------


@strawberry.type
class CreatePlaylistPayload(MutationPayload):
    pass


@strawberry.type
class AddEntriesPayload(MutationPayload):
    entries: list[PlaylistEntry] = strawberry.field(description="The new entries, as placed.")


@strawberry.type
class MoveEntriesPayload(MutationPayload):
    entries: list[PlaylistEntry] = strawberry.field(description="The moved entries, as placed.")
    skipped_entry_ids: list[strawberry.ID] = strawberry.field(
        description="Targets already removed by someone else; not moved."
    )


@strawberry.type
class RemoveEntriesPayload(MutationPayload):
    skipped_entry_ids: list[strawberry.ID] = strawberry.field(
        description="Targets that were already removed."
    )


@strawberry.type
class UpdatePlaylistPayload(MutationPayload):
    pass


@strawberry.type
class SetMemberRolePayload(MutationPayload):
    pass


@strawberry.type
class RemoveMemberPayload(MutationPayload):
    pass


@strawberry.type
class RevertPlaylistPayload(MutationPayload):
    pass


@strawberry.type
class DeletePlaylistPayload(MutationPayload):
    pass


# --- input → command ---------------------------------------------------------


def _playlist_id(value: str) -> str:
    try:
        return ids.playlist_id(value)
    except ids.MalformedId:
        raise NotFound("playlist not found", field=("playlistId",)) from None


def _entry_ids(value: list[strawberry.ID], playlist_id: str) -> tuple[str, ...]:
    out = []
    for i, global_id in enumerate(value):
        try:
            out.append(ids.entry_id(global_id, playlist_id))
        except ids.MalformedId:
            raise NotFound(
                f"entry {global_id!r} is not in this playlist", field=("entryIds", str(i))
            ) from None
    return tuple(out)


def _placement(after: str | None, before: str | None, playlist_id: str) -> cmd.Placement:
    def anchor(value: str | None, name: str) -> str | None:
        if value is None:
            return None
        try:
            return ids.entry_id(value, playlist_id)
        except ids.MalformedId:
            raise AnchorNotFound(
                f"{name} is not an entry of this playlist", field=(name,)
            ) from None

    return cmd.Placement(after=anchor(after, "after"), before=anchor(before, "before"))


def _unset(value: Any) -> Any:
    return cmd.UNSET if value is strawberry.UNSET else value


def _update(i: UpdatePlaylistInput, pid: str) -> cmd.UpdatePlaylist:
    for name in ("title", "visibility", "collaborative"):
        if getattr(i, name) is None:
            raise InvalidInput(f"{name} cannot be null", field=(name,))
    return cmd.UpdatePlaylist(
        pid,
        i.operation_id,
        i.base_version,
        _unset(i.title),
        _unset(i.description),
        _unset(i.visibility),
        _unset(i.collaborative),
        i.strict,
    )


async def _run(
    info: ChorusInfo, raw_playlist_id: str, operation_id: str, build: Callable[[str], Any]
) -> MutationResult:
    try:
        command = build(_playlist_id(raw_playlist_id))
    except DomainError as error:
        return MutationResult(operation_id, error=error)
    return await mutations.execute(info.context, command)


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Create a playlist owned by the viewer (version 0).")
    async def create_playlist(
        self, info: ChorusInfo, input: CreatePlaylistInput
    ) -> CreatePlaylistPayload:
        command = cmd.CreatePlaylist(
            input.operation_id,
            input.title,
            input.description,
            input.visibility,
            input.collaborative,
        )
        result = await mutations.create_playlist(info.context, command)
        return CreatePlaylistPayload(**_common(result))

    @strawberry.mutation
    async def add_entries(self, info: ChorusInfo, input: AddEntriesInput) -> AddEntriesPayload:
        result = await _run(
            info,
            input.playlist_id,
            input.operation_id,
            lambda pid: cmd.AddEntries(
                pid,
                input.operation_id,
                input.base_version,
                tuple(input.media_ids),
                _placement(input.after, input.before, pid),
                input.strict,
            ),
        )
        return AddEntriesPayload(**_common(result), entries=_entries(result))

    @strawberry.mutation
    async def move_entries(self, info: ChorusInfo, input: MoveEntriesInput) -> MoveEntriesPayload:
        result = await _run(
            info,
            input.playlist_id,
            input.operation_id,
            lambda pid: cmd.MoveEntries(
                pid,
                input.operation_id,
                input.base_version,
                _entry_ids(input.entry_ids, pid),
                _placement(input.after, input.before, pid),
                input.strict,
            ),
        )
        return MoveEntriesPayload(
            **_common(result), entries=_entries(result), skipped_entry_ids=_skipped(result)
        )

    @strawberry.mutation
    async def remove_entries(
        self, info: ChorusInfo, input: RemoveEntriesInput
    ) -> RemoveEntriesPayload:
        result = await _run(
            info,
            input.playlist_id,
            input.operation_id,
            lambda pid: cmd.RemoveEntries(
                pid,
                input.operation_id,
                input.base_version,
                _entry_ids(input.entry_ids, pid),
                input.strict,
            ),
        )
        return RemoveEntriesPayload(**_common(result), skipped_entry_ids=_skipped(result))

    @strawberry.mutation
    async def update_playlist(
        self, info: ChorusInfo, input: UpdatePlaylistInput
    ) -> UpdatePlaylistPayload:
        result = await _run(
            info, input.playlist_id, input.operation_id, lambda pid: _update(input, pid)
        )
        return UpdatePlaylistPayload(**_common(result))

    @strawberry.mutation
    async def set_member_role(
        self, info: ChorusInfo, input: SetMemberRoleInput
    ) -> SetMemberRolePayload:
        result = await _run(
            info,
            input.playlist_id,
            input.operation_id,
            lambda pid: cmd.SetMemberRole(
                pid,
                input.operation_id,
                input.base_version,
                input.user_id,
                input.role,
                input.strict,
            ),
        )
        return SetMemberRolePayload(**_common(result))

    @strawberry.mutation
    async def remove_member(
        self, info: ChorusInfo, input: RemoveMemberInput
    ) -> RemoveMemberPayload:
        result = await _run(
            info,
            input.playlist_id,
            input.operation_id,
            lambda pid: cmd.RemoveMember(
                pid,
                input.operation_id,
                input.base_version,
                input.user_id,
                input.strict,
            ),
        )
        return RemoveMemberPayload(**_common(result))

    @strawberry.mutation
    async def revert_playlist(
        self, info: ChorusInfo, input: RevertPlaylistInput
    ) -> RevertPlaylistPayload:
        result = await _run(
            info,
            input.playlist_id,
            input.operation_id,
            lambda pid: cmd.RevertPlaylist(
                pid,
                input.operation_id,
                input.base_version,
                input.to_version,
                input.strict,
            ),
        )
        return RevertPlaylistPayload(**_common(result))

    @strawberry.mutation
    async def delete_playlist(
        self, info: ChorusInfo, input: DeletePlaylistInput
    ) -> DeletePlaylistPayload:
        result = await _run(
            info,
            input.playlist_id,
            input.operation_id,
            lambda pid: cmd.DeletePlaylist(
                pid,
                input.operation_id,
                input.base_version,
                input.strict,
            ),
        )
        return DeletePlaylistPayload(**_common(result))
