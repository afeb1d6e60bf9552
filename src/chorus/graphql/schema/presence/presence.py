"""Presence in the schema: ``Playlist.presence``, ``setPresence``, ``playlistPresence``.

Presence is live and short-lived (docs/semantics.md, "Presence"): it has no
version, is never kept in the response cache, and goes nowhere near the log.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import strawberry

from chorus.domain.presence import Listing, UserPresence
from chorus.domain.presence import PresenceState as PresenceStateEnum
from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.types import User
from chorus.graphql.schema.common.user_error import UserError, user_errors
from chorus.resolvers.presence import PresenceOutcome
from chorus.subscriptions.presence_stream import PresenceItem, PresenceSnapshot

PresenceState = strawberry.enum(
    PresenceStateEnum,
    name="PresenceState",
    description="VIEWING: has the playlist open (a live playlistEvents subscription, or "
    "setPresence). EDITING: said so with setPresence.",
)


@strawberry.type(description="One present member: over all their sessions, EDITING wins.")
class PresenceEntry:
    user: User
    state: PresenceState  # type: ignore[valid-type]
    since: datetime = strawberry.field(
        description="When the user entered this state (the earliest of their sessions in it)."
    )

    @classmethod
    def from_record(cls, p: UserPresence) -> PresenceEntry:
        return cls(
            user=User(id=strawberry.ID(p.user_id)),
            state=p.state,
            since=datetime.fromtimestamp(p.since, UTC),
        )


@strawberry.type(
    description="Who has the playlist open now. Members are listed by id; on a PUBLIC "
    "playlist every other present user is only counted (othersCount). Live: never cached."
)
class PlaylistPresence:
    playlist_id: strawberry.ID
    entries: list[PresenceEntry] = strawberry.field(
        description="Present members, longest present first."
    )
    others_count: int = strawberry.field(
        description="Present users who are not members (PUBLIC playlists; else 0)."
    )

    @classmethod
    def from_listing(cls, playlist_id: str, found: Listing) -> PlaylistPresence:
        return cls(
            playlist_id=strawberry.ID(ids.playlist_global_id(playlist_id)),
            entries=[PresenceEntry.from_record(p) for p in found.entries],
            others_count=found.others_count,
        )


@strawberry.type(
    description="What changed since the previous message of playlistPresence: members who "
    "joined or changed state (entries, as now), members no longer present (left), and the "
    "count of others now. Changes that come together are sent together."
)
class PresenceChanged:
    playlist_id: strawberry.ID
    entries: list[PresenceEntry]
    left: list[User]
    others_count: int


PresenceEvent = Annotated[PlaylistPresence | PresenceChanged, strawberry.union("PresenceEvent")]


def presence_event(item: PresenceItem) -> PlaylistPresence | PresenceChanged:
    if isinstance(item, PresenceSnapshot):
        return PlaylistPresence.from_listing(item.playlist_id, item.listing)
    return PresenceChanged(
        playlist_id=strawberry.ID(ids.playlist_global_id(item.playlist_id)),
        entries=[PresenceEntry.from_record(p) for p in item.entries],
        left=[User(id=strawberry.ID(u)) for u in item.left],
        others_count=item.others_count,
    )


@strawberry.input(
    description="Declare the viewer's state on a playlist it may read. The declaration "
    "lasts CHORUS_PRESENCE_TTL_S seconds (expiresInSeconds): repeat it every third of that "
    "to stay. state null withdraws it."
)
class SetPresenceInput:
    playlist_id: strawberry.ID
    state: PresenceState | None  # type: ignore[valid-type]


@strawberry.type(description="What setPresence declared.")
class SetPresencePayload:
    state: PresenceState | None  # type: ignore[valid-type]
    expires_in_seconds: float = strawberry.field(
        description="How long the declaration lasts unless repeated (0 when withdrawn or refused)."
    )
    user_errors: list[UserError]

    @classmethod
    def from_outcome(cls, outcome: PresenceOutcome) -> SetPresencePayload:
        return cls(
            state=outcome.value.state,
            expires_in_seconds=outcome.value.expires_in_s,
            user_errors=user_errors(outcome),
        )
