"""The ``Playlist`` type: its header, and its entries, members and history as it pages them.

Each paging field checks its arguments (:mod:`chorus.graphql.schema.common.arguments`),
makes one read (:mod:`chorus.resolvers.queries`) and renders the page
(:mod:`chorus.graphql.schema.common.connections`, :mod:`chorus.graphql.schema.history.changes`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry.types.nodes import convert_arguments

from chorus.db.pages import EntriesPage
from chorus.domain.follows import Target, TargetKind
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Playlist as PlaylistRecord
from chorus.domain.version_history import CHECKPOINT_EVERY
from chorus.graphql.execution.plans import field_plan
from chorus.graphql.schema.common import arguments, ids, selections
from chorus.graphql.schema.common.connections import Connection, PlaylistEntryConnection
from chorus.graphql.schema.common.entries import entry_connection
from chorus.graphql.schema.common.entry_rows import connection_plan
from chorus.graphql.schema.common.types import (
    ChorusInfo,
    Node,
    Role,
    User,
    Visibility,
    header_fields,
)
from chorus.graphql.schema.history.at_version import PlaylistAtVersion
from chorus.graphql.schema.history.changes import PlaylistChangeBatch
from chorus.graphql.schema.members.members import PlaylistMember, members_connection
from chorus.graphql.schema.presence.presence import PlaylistPresence
from chorus.resolvers import playlist_lists, presence, queries
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import BadUserInput


async def _head_page(
    record: PlaylistRecord, context: RequestContext, asked: dict[str, Any]
) -> EntriesPage:
    """The page of the head's entries ``Playlist.entries`` reads (its resolver and its
    field plan, :mod:`chorus.graphql.schema.common.entry_rows`); ``asked``: its
    arguments by GraphQL name, absent or ``None`` when not given.

    Raises:
        BadUserInput: see :func:`chorus.graphql.schema.common.arguments.entries_request`.
    """
    request = arguments.entries_request(
        context.services.limits,
        asked.get("first"),
        asked.get("after"),
        asked.get("last"),
        asked.get("before"),
    )
    return await context.reads.entries_page(
        record,
        size=request.size,
        from_end=request.from_end,
        after=request.after,
        before=request.before,
    )


def first_page_asked(info: ChorusInfo) -> int | None:
    """The size of the first page of ``entries`` a ``playlist`` field asks, if it asks just one.

    ``None`` — read the header alone — unless the field selects exactly one
    ``entries`` (directly or in a fragment) whose only argument is a valid
    ``first``, or none. Anything else (a cursor, ``last``, two pages, a bad
    size) is left to :meth:`Playlist.entries`, which reads or refuses it.
    """
    raw = info._raw_info
    asked = selections.fields_at(raw, ("entries",))  # a fragment's fields are the playlist's
    if len(asked) != 1 or {a.name.value for a in asked[0].arguments or ()} - {"first"}:
        return None
    first = convert_arguments(raw, asked[0].arguments).get("first")
    if isinstance(first, str):  # strawberry gives a literal as its source text
        first = int(first) if first.isdigit() and len(first) < 10 else -1
    if first is not None and not isinstance(first, int):
        return None
    try:
        size, _ = arguments.page_size(info.context.services.limits, first)
    except BadUserInput:
        return None
    return size


@strawberry.type(description="An ordered list of media that several people edit at once.")
class Playlist(Node):
    id: strawberry.ID
    record: strawberry.Private[PlaylistRecord]
    title: str
    description: str | None
    visibility: Visibility  # type: ignore[valid-type]
    collaborative: bool = strawberry.field(description="False: only the owner edits.")
    version: int = strawberry.field(
        description="Starts at 0, +1 per accepted mutation; the version this object was read at."
    )
    entry_count: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_record(cls, p: PlaylistRecord) -> Playlist:
        return cls(id=strawberry.ID(ids.playlist_global_id(p.id)), record=p, **header_fields(p))

    @strawberry.field
    def owner(self) -> User:
        return User(id=strawberry.ID(self.record.owner_id))

    @strawberry.field(description="Users following this playlist.")
    async def follower_count(self, info: ChorusInfo) -> int:
        target = Target(TargetKind.PLAYLIST, self.record.id)
        return await info.context.reads.loaders.follower_count.load(target)

    @strawberry.field(
        description="The sum of the live entries' catalog durations, in milliseconds (a whole "
        "number; a Float because GraphQL's Int stops at 2^31 - 1 ms, under 25 days, which "
        "a long playlist passes); media the catalog does not know, or knows without a "
        "duration, count 0; null while the catalog does not answer. Computed once per "
        "version (catalog changes show within CHORUS_MEDIA_FRESHNESS_S)."
    )
    async def total_duration_ms(self, info: ChorusInfo) -> float | None:
        total = await playlist_lists.total_duration_ms(info.context, self.record)
        return None if total is None else float(total)

    @strawberry.field(description="The viewer's role; null when not a member.")
    async def viewer_role(self, info: ChorusInfo) -> Role | None:  # type: ignore[valid-type]
        info.context.reads.record.depends_on_viewer()
        return await info.context.reads.role(self.record.id)

    @strawberry.field(
        description="Entries in list order, as a Relay connection over the "
        "keyset (positionKey, id). A cursor stays valid while the list changes: "
        "the cursor of an entry removed since pages from where it stood."
    )
    @field_plan(connection_plan(lambda source, context, a: _head_page(source.record, context, a)))
    async def entries(
        self,
        info: ChorusInfo,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> PlaylistEntryConnection:
        asked = {"first": first, "after": after, "last": last, "before": before}
        page = await _head_page(self.record, info.context, asked)
        return await entry_connection(info, self.record.id, page)

    @strawberry.field(
        description="The playlist as it was at an older `version` (0 … `version`): its "
        "details and entries then, rebuilt from the mutation log (each read undoes at "
        f"most {CHECKPOINT_EVERY} versions and one group commit, from the next checkpoint). "
        "Access is `playlist`'s, today. Below the oldest "
        "version the log keeps (`chorus compact`): an error with `extensions.code` "
        "HISTORY_COMPACTED and `oldestVersion`, `currentVersion`; out of range: "
        "BAD_USER_INPUT. Never kept in the response cache."
    )
    async def at_version(self, info: ChorusInfo, version: int) -> PlaylistAtVersion | None:
        found = await queries.playlist_at(info.context, self.record, version)
        at = arguments.check_at_version(version, found)
        return None if at is None else PlaylistAtVersion.from_at(at)

    @strawberry.field(
        description="Who has the playlist open right now: live and short-lived (an entry goes "
        "when its subscription ends, or within CHORUS_PRESENCE_TTL_S × 4/3 when its server "
        "dies or its setPresence is not repeated); never cached. null with a "
        "SERVICE_UNAVAILABLE error when presence cannot be read (Redis down)."
    )
    async def presence(self, info: ChorusInfo) -> PlaylistPresence | None:
        found = await presence.playlist_presence(info.context, self.record)
        return PlaylistPresence.from_listing(self.record.id, found)

    @strawberry.field(description="Members ordered by user id.")
    async def members(
        self, info: ChorusInfo, first: int | None = None, after: str | None = None
    ) -> Connection[PlaylistMember]:
        return await members_connection(info, self.record, first, after)

    @strawberry.field(
        description="Sync: what happened after sinceVersion, oldest first (at most `first` "
        f"versions, default {DEFAULT_LIMITS.page_size_default}, "
        f"max {DEFAULT_LIMITS.page_size_max}). Each list of entries selected in a version "
        "(an EntriesAdded's, an EntriesMoved's) counts at 100 entries in the query cost: "
        "with the default CHORUS_MAX_QUERY_COST (10,000) page 50 versions or fewer "
        "selecting one such list, 49 or fewer selecting two (docs/limits.md)."
    )
    async def changes(
        self, info: ChorusInfo, since_version: int, first: int | None = None
    ) -> PlaylistChangeBatch:
        size, _ = arguments.page_size(info.context.services.limits, first)
        batch = await queries.changes(
            info.context, self.record, since_version=since_version, size=size
        )
        batch = arguments.check_since_version(since_version, batch, self.record)
        return PlaylistChangeBatch.from_batch(batch)
