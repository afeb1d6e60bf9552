"""``applyOperations``: its inputs, its payload, and the input turned into a domain batch.

Each operation is exactly one of the existing edits (a ``@oneOf`` input:
``addEntries``, ``moveEntries``, ``removeEntries``, ``updatePlaylist``) with
the fields of that mutation's input, less the batch's own ``playlistId`` and
``baseVersion``. An add may name its new entries with ``clientEntryIds``;
later operations use them wherever an entry id goes (``after``, ``before``,
``entryIds``). See docs/api.md "Offline edits".
"""

from __future__ import annotations

from typing import Any

import strawberry

from chorus.domain import batch as domain
from chorus.domain import commands as cmd
from chorus.domain.commands import Placement
from chorus.domain.errors import (
    AnchorNotFound,
    InvalidInput,
    LimitExceeded,
    NotFound,
)
from chorus.domain.limits import Limits
from chorus.graphql.schema.common import arguments, ids
from chorus.graphql.schema.common.payloads import outcome_fields
from chorus.graphql.schema.common.types import ChorusInfo, PlaylistEntry, Visibility
from chorus.graphql.schema.common.user_error import UserError, user_errors
from chorus.graphql.schema.playlists.inputs import update_command
from chorus.graphql.schema.playlists.payloads import placed_entries, skipped_ids
from chorus.graphql.schema.playlists.playlist import Playlist
from chorus.resolvers import queries
from chorus.resolvers.batch import BatchOutcome
from chorus.resolvers.mutations import CommandOutcome, outcome_of

_ENTRY_ID = (
    "an entry id of this playlist or a clientEntryId declared by an earlier addEntries "
    "of this batch"
)


@strawberry.input(description="addEntries inside a batch.")
class AddEntriesOperation:
    operation_id: strawberry.ID
    media_ids: list[str]
    after: strawberry.ID | None = strawberry.field(default=None, description=f"{_ENTRY_ID}.")
    before: strawberry.ID | None = strawberry.field(default=None, description=f"{_ENTRY_ID}.")
    client_entry_ids: list[str] | None = strawberry.field(
        default=None,
        description="Temporary ids of the new entries, one per media id, in order, unique in "
        "the batch; later operations of the batch may use them as entry ids.",
    )


@strawberry.input(description="moveEntries inside a batch.")
class MoveEntriesOperation:
    operation_id: strawberry.ID
    entry_ids: list[strawberry.ID] = strawberry.field(description=f"Each {_ENTRY_ID}.")
    after: strawberry.ID | None = None
    before: strawberry.ID | None = None


@strawberry.input(description="removeEntries inside a batch.")
class RemoveEntriesOperation:
    operation_id: strawberry.ID
    entry_ids: list[strawberry.ID] = strawberry.field(description=f"Each {_ENTRY_ID}.")


@strawberry.input(description="updatePlaylist inside a batch: fields left out stay as they are.")
class UpdatePlaylistOperation:
    operation_id: strawberry.ID
    title: str | None = strawberry.UNSET
    description: str | None = strawberry.UNSET
    visibility: Visibility | None = strawberry.UNSET  # type: ignore[valid-type]
    collaborative: bool | None = strawberry.UNSET


@strawberry.input(one_of=True, description="Exactly one edit.")
class BatchOperationInput:
    add_entries: AddEntriesOperation | None = strawberry.UNSET
    move_entries: MoveEntriesOperation | None = strawberry.UNSET
    remove_entries: RemoveEntriesOperation | None = strawberry.UNSET
    update_playlist: UpdatePlaylistOperation | None = strawberry.UNSET


@strawberry.input(
    description="Edits made offline against baseVersion, applied in order, each rebased like "
    "its mutation. atomic: all in one version, or none."
)
class ApplyOperationsInput:
    playlist_id: strawberry.ID
    base_version: int
    operations: list[BatchOperationInput]
    atomic: bool = strawberry.field(
        default=False,
        description="One version holding every change, or nothing committed; false: each "
        "operation commits its own version and a refused one does not stop the others.",
    )


@strawberry.type(description="What one operation of a batch did.")
class BatchOperationPayload:
    operation_id: strawberry.ID
    version: int | None = strawberry.field(description="The version committed; null on error.")
    replayed: bool = strawberry.field(
        description="The stored result of an earlier commit of this operationId."
    )
    rebased: bool
    entries: list[PlaylistEntry] = strawberry.field(
        description="An add's new entries (in the order of its clientEntryIds), a move's "
        "moved ones, as placed."
    )
    skipped_entry_ids: list[strawberry.ID]
    user_errors: list[UserError]

    @classmethod
    def of(cls, outcome: CommandOutcome) -> BatchOperationPayload:
        return cls(
            **outcome_fields(outcome),
            entries=placed_entries(outcome),
            skipped_entry_ids=skipped_ids(outcome),
        )


@strawberry.type
class ApplyOperationsPayload:
    results: list[BatchOperationPayload] = strawberry.field(
        description="One per operation, in order; empty when the batch was refused whole."
    )
    version: int | None = strawberry.field(
        description="The playlist's version once the batch was applied: its last commit, or "
        "the version it found when nothing committed; null when refused whole."
    )
    user_errors: list[UserError] = strawberry.field(
        description="Why the batch was refused whole (nothing applied): malformed, over a "
        "limit, rate limited. Each operation's own errors are in its result."
    )
    playlist_id: strawberry.Private[str | None]

    @strawberry.field(description="The playlist after the batch, if visible.")
    async def playlist(self, info: ChorusInfo) -> Playlist | None:
        if self.playlist_id is None:
            return None
        record = await queries.visible_playlist(info.context, self.playlist_id)
        return Playlist.from_record(record) if record else None

    @classmethod
    def of(cls, input: ApplyOperationsInput, outcome: BatchOutcome) -> ApplyOperationsPayload:
        if outcome.value is None:
            return cls(results=[], version=None, user_errors=user_errors(outcome), playlist_id=None)
        answers = outcome.value.answers
        results = [
            BatchOperationPayload.of(outcome_of(_operation_id(op), a))
            for op, a in zip(input.operations, answers, strict=True)
        ]
        return cls(
            results=results,
            version=outcome.value.version,
            user_errors=[],
            playlist_id=outcome.playlist_id,
        )


def _operation_id(op: BatchOperationInput) -> str:
    (chosen,) = _chosen(op)
    return str(chosen.operation_id)


def _chosen(op: BatchOperationInput) -> list[Any]:
    values = (op.add_entries, op.move_entries, op.remove_entries, op.update_playlist)
    return [v for v in values if v is not None and v is not strawberry.UNSET]


class _Builder:
    """Turns the operations into domain ones, telling temporary ids from entry ids."""

    def __init__(self, playlist_id: str, base_version: int) -> None:
        self.playlist_id = playlist_id
        self.base_version = base_version
        self.declared: set[str] = set()
        self.temporaries: set[str] = set()

    def entry(self, value: str, at: tuple[str, ...], *, anchor: bool) -> str:
        if value in self.declared:
            self.temporaries.add(value)
            return value
        try:
            return ids.entry_id(value, self.playlist_id)
        except ids.MalformedId:
            error = AnchorNotFound if anchor else NotFound
            raise error(f"{value!r} is not {_ENTRY_ID}", field=at) from None

    def placement(self, op: Any, at: tuple[str, ...]) -> Placement:
        after = None if op.after is None else self.entry(op.after, (*at, "after"), anchor=True)
        before = None if op.before is None else self.entry(op.before, (*at, "before"), anchor=True)
        return Placement(after=after, before=before)

    def entry_ids(self, values: list[strawberry.ID], at: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(
            self.entry(v, (*at, "entryIds", str(i)), anchor=False) for i, v in enumerate(values)
        )

    def operation(self, index: int, op: BatchOperationInput) -> domain.Operation:
        chosen = _chosen(op)
        if len(chosen) != 1:  # graphql-core enforces @oneOf; this guards the Python caller
            raise InvalidInput("give exactly one edit", field=("operations", str(index)))
        self.temporaries = set()
        value = chosen[0]
        pid, base, opid = self.playlist_id, self.base_version, value.operation_id
        match value:
            case AddEntriesOperation():
                at = ("operations", str(index), "addEntries")
                command: domain.BatchCommand = cmd.AddEntries(
                    pid, opid, base, tuple(value.media_ids), self.placement(value, at)
                )
                client_ids = tuple(value.client_entry_ids or ())
                if value.client_entry_ids is not None and len(client_ids) != len(value.media_ids):
                    raise InvalidInput(
                        f"clientEntryIds must have one id per media id ({len(value.media_ids)})",
                        field=(*at, "clientEntryIds"),
                    )
                self._declare(client_ids, at)
                return domain.Operation(command, client_ids, frozenset(self.temporaries))
            case MoveEntriesOperation():
                at = ("operations", str(index), "moveEntries")
                entry_ids = self.entry_ids(value.entry_ids, at)
                command = cmd.MoveEntries(pid, opid, base, entry_ids, self.placement(value, at))
            case RemoveEntriesOperation():
                at = ("operations", str(index), "removeEntries")
                command = cmd.RemoveEntries(pid, opid, base, self.entry_ids(value.entry_ids, at))
            case UpdatePlaylistOperation():
                command = update_command(value, pid, base)
        return domain.Operation(command, temporaries=frozenset(self.temporaries))

    def _declare(self, client_ids: tuple[str, ...], at: tuple[str, ...]) -> None:
        for j, client_id in enumerate(client_ids):
            try:
                ids.entry_id(client_id, self.playlist_id)
            except ids.MalformedId:
                continue
            raise InvalidInput(
                "a clientEntryId must not be an entry id", field=(*at, "clientEntryIds", str(j))
            )
        # After the placement: an add cannot anchor on its own new entries.
        self.declared.update(client_ids)


def build_batch(input: ApplyOperationsInput, limits: Limits) -> domain.Batch:
    """The domain batch of ``input``.

    Raises:
        LimitExceeded: more than ``limits.max_batch_operations`` operations
            (before any is read).
        NotFound: ``playlistId`` is not a playlist's, or a target is neither an
            entry id nor an earlier clientEntryId (field ``operations.<i>.<kind>.entryIds.<j>``).
        AnchorNotFound: likewise for ``after`` / ``before``.
        InvalidInput: a null that cannot be, a clientEntryId that is an entry id.
    """
    if len(input.operations) > limits.max_batch_operations:
        raise LimitExceeded(
            f"at most {limits.max_batch_operations} operations per batch", field=("operations",)
        )
    pid = arguments.input_playlist_id(input.playlist_id)
    builder = _Builder(pid, input.base_version)
    operations = tuple(builder.operation(i, op) for i, op in enumerate(input.operations))
    return domain.Batch(pid, input.base_version, operations, input.atomic)
