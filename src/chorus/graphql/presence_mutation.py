"""``setPresence``'s input and payload (apart from :mod:`chorus.graphql.presence`, which
``Playlist`` imports: the payload's ``UserError`` imports ``Playlist``)."""

from __future__ import annotations

import strawberry

from chorus.graphql.payloads import UserError
from chorus.graphql.presence import PresenceState
from chorus.resolvers.presence import PresenceOutcome


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
            state=outcome.state,
            expires_in_seconds=outcome.expires_in_s,
            user_errors=[UserError.from_error(outcome.error)] if outcome.error else [],
        )
