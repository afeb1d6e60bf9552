"""Members in the schema: ``Playlist.members``, ``setMemberRole``, ``removeMember``.

A member is a user id with a :class:`Role` on one playlist; the owner is one
(docs/semantics.md, "Members and roles"). The fields that change members are playlist
mutations: their payloads are :class:`MutationPayload` and their commands
take ``baseVersion`` and ``strict`` as every edit does.
"""

from __future__ import annotations

import strawberry

from chorus.domain.model import Member
from chorus.domain.model import Playlist as PlaylistRecord
from chorus.graphql.schema.common import arguments, ids
from chorus.graphql.schema.common.connections import Connection, connection
from chorus.graphql.schema.common.inputs import PlaylistEditInput
from chorus.graphql.schema.common.payloads import MutationPayload
from chorus.graphql.schema.common.types import ChorusInfo, Role, User
from chorus.resolvers import queries


@strawberry.type
class PlaylistMember:
    user: User
    role: Role  # type: ignore[valid-type]

    @classmethod
    def from_record(cls, m: Member) -> PlaylistMember:
        return cls(user=User(id=strawberry.ID(m.user_id)), role=m.role)


def _member_cursor(m: Member) -> str:
    return ids.member_cursor(m.user_id)


async def members_connection(
    info: ChorusInfo, playlist: PlaylistRecord, first: int | None, after: str | None
) -> Connection[PlaylistMember]:
    """``Playlist.members``: ``first`` members of ``playlist`` after the cursor ``after``.

    Raises:
        BadUserInput: a bad cursor or page size (:mod:`chorus.graphql.schema.common.arguments`).
    """
    after_user = arguments.member_position(after)
    size, _ = arguments.page_size(info.context.services.limits, first)
    page = await queries.members_page(info.context, playlist, size=size, after=after_user)
    return connection(page, PlaylistMember.from_record, _member_cursor)


@strawberry.input(description="Grant EDITOR or VIEWER to any user id (owner only).")
class SetMemberRoleInput(PlaylistEditInput):
    user_id: strawberry.ID
    role: Role  # type: ignore[valid-type]
    strict: bool = False


@strawberry.input(description="The owner removes a member; a member may remove themselves.")
class RemoveMemberInput(PlaylistEditInput):
    user_id: strawberry.ID
    strict: bool = False


@strawberry.type
class SetMemberRolePayload(MutationPayload):
    pass


@strawberry.type
class RemoveMemberPayload(MutationPayload):
    pass
