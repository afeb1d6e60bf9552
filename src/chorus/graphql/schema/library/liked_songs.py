"""The viewer's library in the schema: ``likeMedia`` and ``unlikeMedia``.

Liked Songs is a PRIVATE playlist per user, made on first use, newest like
first; ``viewer.likedSongs`` reads it as a ``Playlist``
(:mod:`chorus.graphql.schema.query`) and ``Media.viewerHasLiked`` tells
whether a media is in it (:mod:`chorus.graphql.schema.common.types`).
"""

from __future__ import annotations

import strawberry

from chorus.graphql.schema.common.payloads import MutationPayload


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


@strawberry.type(description="`playlist` is the viewer's Liked Songs.")
class LikeMediaPayload(MutationPayload):
    pass


@strawberry.type(description="`playlist` is the viewer's Liked Songs.")
class UnlikeMediaPayload(MutationPayload):
    pass
