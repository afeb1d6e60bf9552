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
from chorus.resolvers.ratelimit import RateLimiter, Unlimited
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
    """Live event fanout of this process. The composition root always builds one;
    ``None`` only in tests that build a process without live events (a
    subscription there is ``SERVICE_UNAVAILABLE``)."""
    rate_limiter: RateLimiter = field(default_factory=Unlimited)
    """Mutations per user per minute; :class:`Unlimited` when off."""
    query_budget: RateLimiter = field(default_factory=Unlimited)
    """Query cost points per user per minute (:mod:`chorus.graphql.guards.cost`);
    :class:`Unlimited` when off (the response cache serves only then)."""
    snapshots: SnapshotCache | None = None
    """Redis snapshots of PUBLIC playlists; ``None`` in the embedded profile, which has
    no Redis. Read only through :func:`chorus.resolvers.snapshots.snapshot_reader`,
    which turns ``None`` into ``NoSnapshots`` (every read is SQL)."""
    responses: ResponseCache | None = None
    """Whole answers by exact version; ``None`` when ``CHORUS_RESPONSE_CACHE`` is off.
    Read only through :mod:`chorus.resolvers.cached_answers`."""
    heads: Heads | None = None
    """The head versions answers are checked against; set whenever ``responses`` is
    (and read, like it, only through :mod:`chorus.resolvers.cached_answers`)."""
    follows: FollowStore | None = None
    """Follows and unfollows. The composition root always builds one; ``None`` only in
    tests that build a process without the feed (a follow there is ``SERVICE_UNAVAILABLE``)."""
    feed_limits: FeedLimits = DEFAULT_FEED_LIMITS
    durations: Durations = field(default_factory=Durations)
    """``Playlist.totalDurationMs`` by playlist version (:mod:`chorus.resolvers.playlist_lists`)."""
    presence: Presence | None = None
    """Who has which playlist open (:mod:`chorus.subscriptions.presence`). Both profiles
    build one; ``None`` only in tests that build a process without it (``setPresence``
    there is ``SERVICE_UNAVAILABLE``; a subscription just declares no presence)."""
