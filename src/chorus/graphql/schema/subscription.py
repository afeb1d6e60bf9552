"""``playlistEvents``: replay from a version, then live (DESIGN §6)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncGenerator
from typing import Annotated

import strawberry

from chorus.graphql.execution.delivery import CURRENT_SINK, SharedEvent, group_key
from chorus.graphql.schema.common import arguments
from chorus.graphql.schema.common.types import ChorusInfo
from chorus.graphql.schema.follows.follows import FeedItem
from chorus.graphql.schema.history.changes import PlaylistChanged
from chorus.graphql.schema.presence.presence import PresenceEvent, presence_event
from chorus.resolvers import follows, presence, subscriptions
from chorus.subscriptions.feed import FeedResync
from chorus.subscriptions.stream import Resync


@strawberry.type(
    description="The stream skipped ahead: read the playlist again, then apply the "
    "versions that follow currentVersion. reason: 'retention' (the log no longer "
    "reaches sinceVersion + 1), 'too far behind' (sinceVersion was more than the "
    "subscriber lag limit behind at subscribe) or 'slow consumer' (fell that far behind "
    "while live)."
)
class ResyncRequired:
    playlist_id: strawberry.ID
    current_version: int
    reason: str


PlaylistEvent = Annotated[PlaylistChanged | ResyncRequired, strawberry.union("PlaylistEvent")]


@strawberry.type(
    description="Feed items may be missing since the last one: read viewer.feed again, then "
    "go on with the items that follow. reason: 'events lost' (live events were lost on the "
    "way, e.g. the event bus was away) or 'slow consumer' (the subscription fell more than "
    "the subscriber lag limit behind)."
)
class FeedResyncRequired:
    reason: str


FeedEvent = Annotated[FeedItem | FeedResyncRequired, strawberry.union("FeedEvent")]


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="Versions sinceVersion+1, +2, … of a playlist, in order, each once: "
        "first from the log, then live. Losing access ends the stream with an error "
        "whose extensions.code is FORBIDDEN."
    )
    async def playlist_events(
        self, info: ChorusInfo, playlist_id: strawberry.ID, since_version: int
    ) -> AsyncGenerator[PlaylistEvent, None]:
        pid = arguments.input_playlist_id(playlist_id)
        # When strawberry closes this generator (the client completed or left),
        # the stream must leave the hub then, in the operation's task: an
        # abandoned `async for` would leave that to the garbage collector.
        raw = info._raw_info
        group = group_key(pid, raw.operation, raw.fragments, info.variable_values)
        # The hub may write the group's versions to this socket without this
        # generator (graphql/websocket/socket_sink.py); those never come through here.
        events = subscriptions.playlist_events(
            info.context, pid, since_version, group=group, sink=CURRENT_SINK.get()
        )
        hub = info.context.services.hub
        if hub is not None:
            hub.groups.enter(group)
        try:
            async with contextlib.aclosing(events):
                async for item in events:
                    if isinstance(item, Resync):
                        yield ResyncRequired(
                            playlist_id=playlist_id,
                            current_version=item.current_version,
                            reason=item.reason,
                        )
                    else:
                        # Executed once for the group (graphql/execution/delivery.py).
                        yield SharedEvent(  # type: ignore[misc]
                            functools.partial(PlaylistChanged.from_version, item),
                            group,
                            item.version,
                            item.committed_at.timestamp(),
                        )
        finally:
            if hub is not None:
                hub.groups.leave(group)

    @strawberry.subscription(
        description="Who has a playlist open, live: first the whole PlaylistPresence, then "
        "a PresenceChanged for each change (joins, leaves, state changes; those that come "
        "together in one message). The viewer must be able to read the playlist (else "
        "NOT_FOUND); losing access ends it with FORBIDDEN. Watching does not make the "
        "viewer present: a playlistEvents subscription does."
    )
    async def playlist_presence(
        self, info: ChorusInfo, playlist_id: strawberry.ID
    ) -> AsyncGenerator[PresenceEvent, None]:
        pid = arguments.input_playlist_id(playlist_id)
        items = presence.presence_events(info.context, pid)
        async with contextlib.aclosing(items):
            async for item in items:
                yield presence_event(item)

    @strawberry.subscription(
        description="The viewer's feed, live: each new version of a playlist the viewer "
        "follows and may read, once, or a FeedResyncRequired where some may be missing; a "
        "follow or unfollow counts from when it is made. Playlists created by followed users "
        "are in viewer.feed only. One user's subscriptions in a process weigh the playlists "
        "they follow each; past CHORUS_FEED_LIVE_WEIGHT_MAX: LIMIT_EXCEEDED."
    )
    async def feed_events(self, info: ChorusInfo) -> AsyncGenerator[FeedEvent, None]:
        items = follows.feed_events(info.context)
        async with contextlib.aclosing(items):
            async for item in items:
                if isinstance(item, FeedResync):
                    yield FeedResyncRequired(reason=item.reason)
                else:
                    yield FeedItem.from_record(item)
