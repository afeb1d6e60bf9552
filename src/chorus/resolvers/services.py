"""The long-lived parts of a process that every request's resolvers use.

Built once by the composition root (:mod:`chorus.bootstrap`); each request's
:class:`~chorus.resolvers.context.RequestContext` holds the one instance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chorus.caches.heads import Heads
from chorus.caches.reader import SnapshotCache
from chorus.caches.responses import ResponseCache
from chorus.catalog.protocol import Catalog
from chorus.db.engine import Database
from chorus.db.follows import FollowStore
from chorus.db.store import PlaylistStore
from chorus.domain.follows import DEFAULT_FEED_LIMITS, FeedLimits
from chorus.domain.limits import Limits
from chorus.resolvers.durations import Durations
from chorus.resolvers.ratelimit import RateLimiter
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.presence import Presence


@dataclass(frozen=True, slots=True)
class Services:
    """Long-lived parts, shared by all requests of the process."""

    db: Database
    store: PlaylistStore
    catalog: Catalog
    limits: Limits
    hub: Hub | None = None
    """Live event fanout of this process; ``None`` where subscriptions are off."""
    rate_limiter: RateLimiter | None = None
    """Mutations per user per minute; ``None``: unlimited."""
    query_budget: RateLimiter | None = None
    """Query cost points per user per minute (:mod:`chorus.graphql.guards.cost`); None: no limit."""
    snapshots: SnapshotCache | None = None
    """Redis snapshots of PUBLIC playlists (full profile); ``None``: every read is SQL."""
    responses: ResponseCache | None = None
    """Whole answers by exact version (:mod:`chorus.resolvers.cached_answers`); ``None``: off."""
    heads: Heads | None = None
    """The head versions answers are checked against; set whenever ``responses`` is."""
    follows: FollowStore | None = None
    """Follows and unfollows; ``None``: a process without the feed (some tests)."""
    feed_limits: FeedLimits = DEFAULT_FEED_LIMITS
    durations: Durations = field(default_factory=Durations)
    """``Playlist.totalDurationMs`` by playlist version (:mod:`chorus.resolvers.playlist_lists`)."""
    presence: Presence | None = None
    """Who has which playlist open (:mod:`chorus.subscriptions.presence`); ``None``: off."""
