"""The Mutation root: each field maps its input to one domain command.

Inputs and payloads are in their feature's package (``playlists/``, ``members/``,
``library/``, ``follows/``, ``presence/``); IDs and nulls of an input are checked in
:mod:`chorus.graphql.schema.common.arguments`; the command runs in
:mod:`chorus.resolvers.mutations`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import strawberry

from chorus.domain import commands as cmd
from chorus.domain.errors import DomainError
from chorus.domain.follows import Target, TargetKind
from chorus.graphql.schema.common import arguments
from chorus.graphql.schema.common.inputs import PlaylistEditInput
from chorus.graphql.schema.common.payloads import MutationPayload, common_fields
from chorus.graphql.schema.common.types import ChorusInfo
from chorus.graphql.schema.follows.follows import FollowInput, FollowPayload, UnfollowInput
from chorus.graphql.schema.library.liked_songs import (
    LikeMediaInput,
    LikeMediaPayload,
    UnlikeMediaInput,
    UnlikeMediaPayload,
)
from chorus.graphql.schema.members.members import (
    RemoveMemberInput,
    RemoveMemberPayload,
    SetMemberRoleInput,
    SetMemberRolePayload,
)
from chorus.graphql.schema.playlists.batch import (
    ApplyOperationsInput,
    ApplyOperationsPayload,
    build_batch,
)
from chorus.graphql.schema.playlists.inputs import (
    AddEntriesInput,
    CreatePlaylistInput,
    DeletePlaylistInput,
    MoveEntriesInput,
    RemoveEntriesInput,
    RevertPlaylistInput,
    UpdatePlaylistInput,
    update_command,
)
from chorus.graphql.schema.playlists.payloads import (
    AddEntriesPayload,
    CreatePlaylistPayload,
    DeletePlaylistPayload,
    MoveEntriesPayload,
    RemoveEntriesPayload,
    RevertPlaylistPayload,
    UpdatePlaylistPayload,
    placed_entries,
    removed_ids,
    skipped_ids,
)
from chorus.graphql.schema.presence.presence import SetPresenceInput, SetPresencePayload
from chorus.resolvers import batch, follows, mutations, presence
from chorus.resolvers.admission import MutationOutcome
from chorus.resolvers.mutations import CommandOutcome as Outcome

In = TypeVar("In", bound=PlaylistEditInput)
Command = TypeVar("Command", bound=cmd.PlaylistCommand)
Payload = TypeVar("Payload", bound=MutationPayload)


# --- each input to its command: the playlist id decoded, the operation id as given ---------


def _add_entries(i: AddEntriesInput, pid: str) -> cmd.AddEntries:
    placement = arguments.placement(i.after, i.before, pid)
    return cmd.AddEntries(
        pid, i.operation_id, i.base_version, tuple(i.media_ids), placement, i.strict
    )


def _move_entries(i: MoveEntriesInput, pid: str) -> cmd.MoveEntries:
    entry_ids = arguments.input_entry_ids(i.entry_ids, pid)
    placement = arguments.placement(i.after, i.before, pid)
    return cmd.MoveEntries(pid, i.operation_id, i.base_version, entry_ids, placement, i.strict)


def _remove_entries(i: RemoveEntriesInput, pid: str) -> cmd.RemoveEntries:
    entry_ids = arguments.input_entry_ids(i.entry_ids, pid)
    return cmd.RemoveEntries(pid, i.operation_id, i.base_version, entry_ids, i.strict)


def _update_playlist(i: UpdatePlaylistInput, pid: str) -> cmd.UpdatePlaylist:
    return update_command(i, pid, i.base_version, strict=i.strict)


def _set_member_role(i: SetMemberRoleInput, pid: str) -> cmd.SetMemberRole:
    return cmd.SetMemberRole(pid, i.operation_id, i.base_version, i.user_id, i.role, i.strict)


def _remove_member(i: RemoveMemberInput, pid: str) -> cmd.RemoveMember:
    return cmd.RemoveMember(pid, i.operation_id, i.base_version, i.user_id, i.strict)


def _revert_playlist(i: RevertPlaylistInput, pid: str) -> cmd.RevertPlaylist:
    return cmd.RevertPlaylist(pid, i.operation_id, i.base_version, i.to_version, i.strict)


def _delete_playlist(i: DeletePlaylistInput, pid: str) -> cmd.DeletePlaylist:
    return cmd.DeletePlaylist(pid, i.operation_id, i.base_version, i.strict)


async def _run(info: ChorusInfo, input: In, to_command: Callable[[In, str], Command]) -> Outcome:
    """Decode ``input.playlist_id``, turn ``input`` into its command and execute it.

    Raises:
        Unauthenticated: no valid token, checked first: a caller without one
            learns nothing of its arguments (a malformed id is not ``NOT_FOUND``).
    """
    info.context.viewer()
    try:
        command = to_command(input, arguments.input_playlist_id(input.playlist_id))
    except DomainError as error:
        return MutationOutcome(None, error, input.operation_id)
    return await mutations.execute(info.context, command)


async def _edit(
    info: ChorusInfo, input: In, to_command: Callable[[In, str], Command], payload: type[Payload]
) -> Payload:
    """:func:`_run`, answered with a payload of the :class:`MutationPayload` fields alone."""
    return payload(**common_fields(await _run(info, input, to_command)))


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Create a playlist owned by the viewer (version 0).")
    async def create_playlist(
        self, info: ChorusInfo, input: CreatePlaylistInput
    ) -> CreatePlaylistPayload:
        info.context.viewer()  # before the input is looked at, as every mutation
        command = cmd.CreatePlaylist(
            input.operation_id,
            input.title,
            input.description,
            input.visibility,
            input.collaborative,
        )
        result = await mutations.execute(info.context, command)
        return CreatePlaylistPayload(**common_fields(result))

    @strawberry.mutation
    async def add_entries(self, info: ChorusInfo, input: AddEntriesInput) -> AddEntriesPayload:
        result = await _run(info, input, _add_entries)
        return AddEntriesPayload(**common_fields(result), entries=placed_entries(result))

    @strawberry.mutation
    async def move_entries(self, info: ChorusInfo, input: MoveEntriesInput) -> MoveEntriesPayload:
        result = await _run(info, input, _move_entries)
        return MoveEntriesPayload(
            **common_fields(result),
            entries=placed_entries(result),
            skipped_entry_ids=skipped_ids(result),
        )

    @strawberry.mutation
    async def remove_entries(
        self, info: ChorusInfo, input: RemoveEntriesInput
    ) -> RemoveEntriesPayload:
        result = await _run(info, input, _remove_entries)
        return RemoveEntriesPayload(
            **common_fields(result),
            skipped_entry_ids=skipped_ids(result),
            removed_entry_ids=removed_ids(result),
        )

    @strawberry.mutation
    async def update_playlist(
        self, info: ChorusInfo, input: UpdatePlaylistInput
    ) -> UpdatePlaylistPayload:
        return await _edit(info, input, _update_playlist, UpdatePlaylistPayload)

    @strawberry.mutation
    async def set_member_role(
        self, info: ChorusInfo, input: SetMemberRoleInput
    ) -> SetMemberRolePayload:
        return await _edit(info, input, _set_member_role, SetMemberRolePayload)

    @strawberry.mutation
    async def remove_member(
        self, info: ChorusInfo, input: RemoveMemberInput
    ) -> RemoveMemberPayload:
        return await _edit(info, input, _remove_member, RemoveMemberPayload)

    @strawberry.mutation
    async def revert_playlist(
        self, info: ChorusInfo, input: RevertPlaylistInput
    ) -> RevertPlaylistPayload:
        return await _edit(info, input, _revert_playlist, RevertPlaylistPayload)

    @strawberry.mutation
    async def delete_playlist(
        self, info: ChorusInfo, input: DeletePlaylistInput
    ) -> DeletePlaylistPayload:
        return await _edit(info, input, _delete_playlist, DeletePlaylistPayload)

    @strawberry.mutation(
        description="Apply edits made offline against baseVersion, in order, each rebased "
        "like its own mutation; adds may name their entries with clientEntryIds for later "
        "operations. A retry with the same operationIds replays what committed and applies "
        "the rest (docs/api.md, Offline edits)."
    )
    async def apply_operations(
        self, info: ChorusInfo, input: ApplyOperationsInput
    ) -> ApplyOperationsPayload:
        info.context.viewer()
        try:
            built = build_batch(input, info.context.services.limits)
        except DomainError as error:
            return ApplyOperationsPayload.of(input, MutationOutcome(None, error))
        result = await batch.apply_operations(info.context, built)
        return ApplyOperationsPayload.of(input, result)

    @strawberry.mutation(
        description="Put a media at the top of the viewer's Liked Songs (made on first use)."
    )
    async def like_media(self, info: ChorusInfo, input: LikeMediaInput) -> LikeMediaPayload:
        result = await mutations.like(info.context, input.operation_id, input.media_id, like=True)
        return LikeMediaPayload(**common_fields(result))

    @strawberry.mutation(description="Take a media out of the viewer's Liked Songs.")
    async def unlike_media(self, info: ChorusInfo, input: UnlikeMediaInput) -> UnlikeMediaPayload:
        result = await mutations.like(info.context, input.operation_id, input.media_id, like=False)
        return UnlikeMediaPayload(**common_fields(result))

    @strawberry.mutation(
        description="Follow a playlist or a user; following again changes nothing. A PRIVATE "
        "playlist needs read access; a user follows at most CHORUS_MAX_FOLLOWS_PER_USER targets."
    )
    async def follow(self, info: ChorusInfo, input: FollowInput) -> FollowPayload:
        return await _follow(info, input.kind, input.target_id, on=True)

    @strawberry.mutation(
        description="Say what the viewer is doing on a playlist it may read (EDITING, "
        "VIEWING; null: withdraw). Not a playlist version: no operationId, nothing logged. "
        "Lasts expiresInSeconds unless repeated; a playlistEvents subscription makes the "
        "viewer VIEWING by itself. Not visible: NOT_FOUND."
    )
    async def set_presence(self, info: ChorusInfo, input: SetPresenceInput) -> SetPresencePayload:
        info.context.viewer()
        try:
            pid = arguments.input_playlist_id(input.playlist_id)
        except DomainError as error:
            return SetPresencePayload.from_outcome(MutationOutcome(presence.NOTHING, error))
        outcome = await presence.set_presence(info.context, pid, input.state)
        return SetPresencePayload.from_outcome(outcome)

    @strawberry.mutation(description="Stop following; unfollowing again changes nothing.")
    async def unfollow(self, info: ChorusInfo, input: UnfollowInput) -> FollowPayload:
        return await _follow(info, input.kind, input.target_id, on=False)


async def _follow(info: ChorusInfo, kind: TargetKind, target_id: str, *, on: bool) -> FollowPayload:
    info.context.viewer()
    try:
        target = arguments.follow_target(kind, target_id)
    except DomainError as error:
        unknown = follows.FollowState(Target(kind, target_id), following=False)
        return FollowPayload.from_outcome(MutationOutcome(unknown, error))
    return FollowPayload.from_outcome(await follows.follow(info.context, target, on=on))
