"""Mutation payloads and user errors.

Every payload has ``operationId``, ``version``, ``replayed``, ``rebased``,
``playlist`` and ``userErrors`` (DESIGN §5). Expected failures are
``userErrors`` with an :class:`ErrorCode`; the payload's ``version`` is then
null and nothing was committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import strawberry

from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.types import ChorusInfo, PlaylistEntry
from chorus.graphql.schema.common.user_error import UserError, user_errors
from chorus.graphql.schema.playlists.playlist import Playlist
from chorus.resolvers import queries
from chorus.resolvers.mutations import CommandOutcome
from chorus.resolvers.request_errors import PayloadReadRefused


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
        if info.context.reads.budget.payload_reads_refused:
            raise PayloadReadRefused(
                "the payload's read is over your query budget (CHORUS_QUERY_COST_PER_MINUTE); "
                "the edit's own answer is in the other fields"
            )
        record = await queries.visible_playlist(info.context, self.playlist_id)
        return Playlist.from_record(record) if record else None


def outcome_fields(outcome: CommandOutcome) -> dict[str, Any]:
    """What a command did, as keyword arguments: ``operationId``, ``version``, ``replayed``,
    ``rebased``, ``userErrors`` (of a payload, or of one operation of a batch)."""
    committed = outcome.value
    return {
        "operation_id": strawberry.ID(outcome.operation_id or ""),
        "version": committed.outcome.version if committed else None,
        "replayed": committed.replayed if committed else False,
        "rebased": committed.outcome.rebased if committed else False,
        "user_errors": user_errors(outcome),
    }


def common_fields(outcome: CommandOutcome) -> dict[str, Any]:
    """The :class:`MutationPayload` fields of an outcome, as keyword arguments of any payload."""
    return {**outcome_fields(outcome), "playlist_id": outcome.playlist_id}


def placed_entries(outcome: CommandOutcome) -> list[PlaylistEntry]:
    """The entries a committed add or move placed, in list order; none on an error."""
    if outcome.value is None:
        return []
    done = outcome.value.outcome
    return [PlaylistEntry.from_record(done.playlist_id, e) for e in done.entries]


def entry_global_ids(playlist_id: str, entry_ids: Sequence[str]) -> list[strawberry.ID]:
    """The global IDs of ``entry_ids`` of a playlist."""
    return [strawberry.ID(ids.entry_global_id(playlist_id, e)) for e in entry_ids]


def removed_ids(outcome: CommandOutcome) -> list[strawberry.ID]:
    """Global IDs of the entries a committed remove made tombstones; none on an error."""
    if outcome.value is None:
        return []
    done = outcome.value.outcome
    return entry_global_ids(done.playlist_id, done.removed_entry_ids)


def skipped_ids(outcome: CommandOutcome) -> list[strawberry.ID]:
    """Global IDs of the targets a committed move or remove skipped; none on an error."""
    if outcome.value is None:
        return []
    done = outcome.value.outcome
    return entry_global_ids(done.playlist_id, done.skipped_entry_ids)


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
    removed_entry_ids: list[strawberry.ID] = strawberry.field(
        description="Global IDs of the entries this commit removed, in the order given (the "
        "targets minus skippedEntryIds); the same on a replay. Empty on an error. Relay's "
        "`@deleteRecord` on this field drops them from the store."
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


@strawberry.type(description="`playlist` is the viewer's Liked Songs.")
class LikeMediaPayload(MutationPayload):
    pass


@strawberry.type(description="`playlist` is the viewer's Liked Songs.")
class UnlikeMediaPayload(MutationPayload):
    pass
