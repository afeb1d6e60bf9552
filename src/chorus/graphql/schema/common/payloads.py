"""What every mutation on a playlist returns: the ``MutationPayload`` interface.

Every payload has ``operationId``, ``version``, ``replayed``, ``rebased``,
``playlist`` and ``userErrors`` (DESIGN §5). Expected failures are
``userErrors`` with an :class:`ErrorCode`; the payload's ``version`` is then
null and nothing was committed. The features' payloads (``playlists/``,
``members/``, ``library/``) implement it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, cast

import strawberry
from strawberry.types.lazy_type import LazyType

from chorus.graphql.schema.common.types import ChorusInfo
from chorus.graphql.schema.common.user_error import UserError, user_errors
from chorus.resolvers import queries
from chorus.resolvers.mutations import CommandOutcome
from chorus.resolvers.request_errors import PayloadReadRefused

_PLAYLIST = "chorus.graphql.schema.playlists.playlist"
"""Where ``Playlist`` is: above this module, as every feature's payload is."""

_PLAYLIST_TYPE: LazyType[Any, Any] = LazyType("Playlist", _PLAYLIST)

if TYPE_CHECKING:
    from chorus.graphql.schema.playlists.playlist import Playlist


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
    async def playlist(
        self, info: ChorusInfo
    ) -> Annotated[Playlist, strawberry.lazy(_PLAYLIST)] | None:
        if self.playlist_id is None:
            return None
        budget = info.context.reads.budget
        if budget.payload_reads_refused:
            raise PayloadReadRefused(
                "the payload's read is over your query budget (CHORUS_QUERY_COST_PER_MINUTE); "
                "the edit's own answer is in the other fields",
                budget.payload_retry_after_ms,
            )
        record = await queries.visible_playlist(info.context, self.playlist_id)
        # Resolved as the annotation is (strawberry.lazy), not imported: a
        # playlist's features (members, …) sit below it and return payloads.
        playlist = cast(type[Playlist], _PLAYLIST_TYPE.resolve_type())
        return playlist.from_record(record) if record else None


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
