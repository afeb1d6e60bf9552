"""Versions as clients see them: ``PlaylistChanged`` and its ``PlaylistChange`` union.

The same types serve ``Playlist.changes`` (sync) and the ``playlistEvents``
subscription. Applying the changes of versions ``v+1 … n`` to the entries at
``v`` gives exactly ``Playlist.entries`` at ``n``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry

from chorus.domain import changes as domain
from chorus.domain.committed import CommittedVersion
from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.types import PlaylistEntry, Role, User, Visibility
from chorus.subscriptions.catchup import CatchUpPage


@strawberry.type(description="Entries added at this version, in list order, as committed.")
class EntriesAdded:
    entries: list[PlaylistEntry]


@strawberry.type(description="Entries whose positionKey changed (a move, or a rebalance).")
class EntriesMoved:
    entries: list[PlaylistEntry]


@strawberry.type(description="Entries removed at this version.")
class EntriesRemoved:
    entry_ids: list[strawberry.ID]


@strawberry.type(description="The playlist's details after this version.")
class DetailsUpdated:
    title: str
    description: str | None
    visibility: Visibility  # type: ignore[valid-type]
    collaborative: bool


@strawberry.type(description="A member's role changed; role null means removed.")
class MembersChanged:
    user: User
    role: Role | None  # type: ignore[valid-type]


@strawberry.type(description="The playlist was deleted; no version follows.")
class PlaylistDeleted:
    deleted_at: datetime


PlaylistChange = Annotated[
    EntriesAdded
    | EntriesRemoved
    | EntriesMoved
    | DetailsUpdated
    | MembersChanged
    | PlaylistDeleted,
    strawberry.union("PlaylistChange"),
]


@strawberry.type(description="One committed version of a playlist.")
class PlaylistChanged:
    playlist_id: strawberry.ID
    version: int
    operation_id: strawberry.ID
    actor: User
    committed_at: datetime
    changes: list[PlaylistChange]

    @classmethod
    def from_version(cls, v: CommittedVersion) -> PlaylistChanged:
        """The GraphQL form of a committed version (its creation change left out)."""
        return cls(
            playlist_id=strawberry.ID(ids.playlist_global_id(v.playlist_id)),
            version=v.version,
            operation_id=strawberry.ID(v.operation_id),
            actor=User(id=strawberry.ID(v.actor_id)),
            committed_at=v.committed_at,
            changes=[c for c in (change_type(v.playlist_id, c) for c in v.changes) if c],
        )


def change_type(playlist_id: str, change: domain.Change) -> PlaylistChange | None:
    """The GraphQL form of a canonical change (``None`` for version 0's creation)."""
    match change:
        case domain.EntriesAdded():
            return EntriesAdded(
                entries=[PlaylistEntry.from_record(playlist_id, e) for e in change.entries]
            )
        case domain.EntriesMoved():
            return EntriesMoved(
                entries=[PlaylistEntry.from_record(playlist_id, m.entry) for m in change.moves]
            )
        case domain.EntriesRemoved():
            return EntriesRemoved(
                entry_ids=[
                    strawberry.ID(ids.entry_global_id(playlist_id, e.entry_id))
                    for e in change.entries
                ]
            )
        case domain.DetailsUpdated():
            d = change.details
            return DetailsUpdated(
                title=d.title,
                description=d.description,
                visibility=d.visibility,
                collaborative=d.collaborative,
            )
        case domain.MembersChanged():
            return MembersChanged(user=User(id=strawberry.ID(change.user_id)), role=change.role)
        case domain.PlaylistDeleted():
            return PlaylistDeleted(deleted_at=change.deleted_at)
        case domain.PlaylistCreated():
            return None


@strawberry.type(description="What happened after sinceVersion.")
class PlaylistChangeBatch:
    since_version: int
    current_version: int
    versions: list[PlaylistChanged] = strawberry.field(
        description="Versions sinceVersion+1, +2, … in order."
    )
    has_more: bool = strawberry.field(
        description="More versions follow; ask again from the last one."
    )
    resync_required: bool = strawberry.field(
        description="The log no longer reaches sinceVersion+1 (retention): read "
        "`entries` again, then sync from its `version`."
    )

    @classmethod
    def from_batch(cls, batch: CatchUpPage) -> PlaylistChangeBatch:
        """The GraphQL form of a page of the catch-up path."""
        return cls(
            since_version=batch.since_version,
            current_version=batch.current_version,
            versions=[PlaylistChanged.from_version(v) for v in batch.versions],
            has_more=batch.has_more,
            resync_required=batch.resync,
        )
