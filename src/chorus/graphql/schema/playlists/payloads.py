"""The payloads of the edits of a playlist, and what they tell of the entries.

Each is a :class:`~chorus.graphql.schema.common.payloads.MutationPayload`;
the helpers render the entries a committed add or move placed and the ids a
move or remove skipped or removed (``applyOperations``' results use them too).
"""

from __future__ import annotations

from collections.abc import Sequence

import strawberry

from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.payloads import MutationPayload
from chorus.graphql.schema.common.types import PlaylistEntry
from chorus.resolvers.mutations import CommandOutcome


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
class RevertPlaylistPayload(MutationPayload):
    pass


@strawberry.type
class DeletePlaylistPayload(MutationPayload):
    pass
