"""``Playlist.atVersion``: a playlist as it was at an older version.

The header comes from the rewind :func:`chorus.resolvers.queries.playlist_at`
read (:mod:`chorus.domain.version_history`); ``entries`` pages the list of that
version with the head's connection, cursors and checks
(:mod:`chorus.graphql.schema.common.entries`), reusing the rewind while its anchor holds.
"""

from __future__ import annotations

from datetime import datetime

import strawberry

from chorus.db.history_reads import AtVersion
from chorus.db.pages import EntriesPage
from chorus.graphql.schema.common import arguments
from chorus.graphql.schema.common.connections import PlaylistEntryConnection
from chorus.graphql.schema.common.entries import entry_connection
from chorus.graphql.schema.common.types import ChorusInfo, User, Visibility, header_fields
from chorus.resolvers import queries


@strawberry.type(
    description="A playlist as it was at an older version, rebuilt from the mutation log: "
    "its details then and its entries then, paged like `Playlist.entries` (same cursors). "
    "Members are not part of history: who may read it is decided by today's access."
)
class PlaylistAtVersion:
    at: strawberry.Private[AtVersion]
    version: int = strawberry.field(description="The version asked for.")
    title: str
    description: str | None
    visibility: Visibility  # type: ignore[valid-type]
    collaborative: bool
    entry_count: int = strawberry.field(description="Live entries at this version.")
    created_at: datetime
    updated_at: datetime = strawberry.field(description="When this version committed.")

    @classmethod
    def from_at(cls, at: AtVersion) -> PlaylistAtVersion:
        return cls(at=at, **header_fields(at.rewound.playlist))

    @strawberry.field
    def owner(self) -> User:
        return User(id=strawberry.ID(self.at.rewound.playlist.owner_id))

    @strawberry.field(
        description="Entries live at this version in list order, as `Playlist.entries` "
        "pages the head: the keyset (positionKey, id), the same cursors, `version` "
        "this version and `totalCount` its live entries."
    )
    async def entries(
        self,
        info: ChorusInfo,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> PlaylistEntryConnection:
        asked = arguments.entries_request(info.context.services.limits, first, after, last, before)
        found = await queries.entries_page_at(
            info.context,
            self.at,
            size=asked.size,
            from_end=asked.from_end,
            after=asked.after,
            before=asked.before,
        )
        page = arguments.check_at_version(self.version, found)
        if page is None:  # the playlist is gone (never, while rows are only soft-deleted)
            page = EntriesPage((), False, False, 0, self.version)
        return await entry_connection(info, self.at.rewound.playlist.id, page)
