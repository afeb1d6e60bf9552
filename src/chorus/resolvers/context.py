"""What every resolver gets: the services of the process and the request's viewer.

:class:`Services` is built once by the composition root (``chorus.app``);
:class:`RequestContext` once per request (and per subscription event), with
fresh DataLoaders so nothing is cached across requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime

from strawberry.dataloader import DataLoader

from chorus.caches.heads import Heads
from chorus.caches.reader import SnapshotCache
from chorus.caches.responses import ResponseCache
from chorus.caches.snapshot import Snapshot
from chorus.catalog.protocol import Catalog, CatalogUnavailable, Media
from chorus.db import feed, pages
from chorus.db.engine import Database
from chorus.db.follows import FollowStore
from chorus.db.history import AtVersion
from chorus.db.pages import EntriesPage
from chorus.db.store import PlaylistStore
from chorus.domain.changes import Change
from chorus.domain.follows import DEFAULT_FEED_LIMITS, FeedLimits, Target
from chorus.domain.limits import Limits
from chorus.domain.model import Playlist, Role
from chorus.resolvers.durations import Durations
from chorus.resolvers.errors import Unauthenticated, no_viewer
from chorus.resolvers.ratelimit import RateLimiter
from chorus.resolvers.reads import ReadSet
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
    """Whole answers by exact version (:mod:`chorus.resolvers.responses`); ``None``: off."""
    heads: Heads | None = None
    """The head versions answers are checked against; set whenever ``responses`` is."""
    follows: FollowStore | None = None
    """Follows and unfollows; ``None``: a process without the feed (some tests)."""
    feed_limits: FeedLimits = DEFAULT_FEED_LIMITS
    durations: Durations = field(default_factory=Durations)
    """``Playlist.totalDurationMs`` by playlist version (:mod:`chorus.resolvers.finding`)."""
    presence: Presence | None = None
    """Who has which playlist open (:mod:`chorus.subscriptions.presence`); ``None``: off."""


class Loaders:
    """Per-request DataLoaders: one batched query or catalog call per kind of key.

    The batch functions are methods of a :class:`_Batches`, not of this
    object: a DataLoader holding a bound method of the object that holds the
    DataLoader is a reference cycle, and then every value a request loaded
    (a feed page's changes: tens of MB) outlived the request until a full
    collection, which a serving process makes rare (``cli.process.GC_THRESHOLDS``).
    """

    def __init__(self, services: Services, viewer_id: str | None, reads: ReadSet) -> None:
        batches = _Batches(services, viewer_id, reads)
        self.playlist = DataLoader[str, Playlist | None](batches.playlists)
        self.role = DataLoader[str, Role | None](batches.roles)
        self.media = DataLoader[str, Media | None](batches.media)
        self.liked = DataLoader[str, bool](batches.liked)
        """Whether the viewer's Liked Songs holds a media id (one query per batch)."""
        self.follower_count = DataLoader[Target, int](batches.follower_counts)
        """Followers of a playlist or user (one query per batch)."""
        self.feed_changes = DataLoader[tuple[str, int], tuple[Change, ...]](batches.feed_changes)
        """The changes of a feed item's version, from the log (one query per page)."""
        self.snapshot = DataLoader[tuple[str, int | None], Snapshot | None](batches.snapshots)
        """A playlist's current snapshot at ``>= min_version`` (``None``: read SQL)."""
        self.first_pages: dict[str, tuple[Playlist, int, EntriesPage]] = {}
        """Playlist id → a header, a first page size and the page read with it (one transaction)."""
        self.served: dict[str, Snapshot] = {}
        """Snapshots whose header this request answered with; their first page goes with them."""
        self.sql_only: set[str] = set()
        """Playlists this request reads from SQL alone (it read or changed them there)."""
        self.changed: set[str] = set()
        """Playlists this request committed a change to (the projector snapshots those)."""

    def forget(self, playlist_id: str) -> None:
        """Drop what this request cached about a playlist (after it committed a change).

        The rest of the request reads that playlist from SQL: the snapshot
        predates the commit even if the head version was not raised yet.
        """
        for loader in (self.playlist, self.role):
            with contextlib.suppress(KeyError):
                loader.clear(playlist_id)
        self.liked.clear_all()  # a like or unlike may have changed any answer
        self.sql_only.add(playlist_id)
        self.changed.add(playlist_id)
        self.served.pop(playlist_id, None)
        self.first_pages.pop(playlist_id, None)


class _Batches:
    """The batch functions of one request's :class:`Loaders` (and nothing that holds them)."""

    def __init__(self, services: Services, viewer_id: str | None, reads: ReadSet) -> None:
        self._services = services
        self._viewer_id = viewer_id
        self._reads = reads

    async def playlists(self, ids: list[str]) -> list[Playlist | None]:
        found = await pages.playlists_by_id(self._services.db, ids)
        return [found.get(i) for i in ids]

    async def roles(self, playlist_ids: list[str]) -> list[Role | None]:
        if self._viewer_id is None:
            return [None] * len(playlist_ids)
        found = await pages.roles_of(self._services.db, self._viewer_id, playlist_ids)
        return [found.get(i) for i in playlist_ids]

    async def liked(self, media_ids: list[str]) -> list[bool]:
        if self._viewer_id is None or not self._services.store.keeps_liked_songs:
            return [False] * len(media_ids)
        # Not created yet reads as an empty playlist: no row, no entries.
        playlist_id = self._services.store.liked_songs_id(self._viewer_id)
        liked = await pages.media_in(self._services.db, playlist_id, media_ids)
        return [m in liked for m in media_ids]

    async def follower_counts(self, targets: list[Target]) -> list[int]:
        found = await pages.follower_counts(self._services.db, targets)
        return [found.get(t, 0) for t in targets]

    async def feed_changes(self, keys: list[tuple[str, int]]) -> list[tuple[Change, ...]]:
        found = await feed.changes_at(self._services.db, keys)
        return [found.get(k, ()) for k in keys]

    async def snapshots(self, keys: list[tuple[str, int | None]]) -> list[Snapshot | None]:
        cache = self._services.snapshots
        if cache is None:
            return [None] * len(keys)
        return list(await asyncio.gather(*(cache.get(pid, least) for pid, least in keys)))

    async def media(self, media_ids: list[str]) -> list[Media | None]:
        # A failing catalog must not fail the request: entries come back
        # with media null (DESIGN §8).
        self._reads.read_media()
        try:
            found = await self._services.catalog.get_many(media_ids)
        except CatalogUnavailable:
            self._reads.refuse("the catalog did not answer")
            return [None] * len(media_ids)
        return [found.get(i) for i in media_ids]


@dataclass
class RequestContext:
    """The context of one GraphQL request.

    ``auth_error`` is set when a token was sent but is not valid; then every
    field that needs a viewer fails with ``UNAUTHENTICATED`` and that reason.
    """

    services: Services
    viewer_id: str | None
    auth_error: str | None = None
    auth_unavailable: bool = False
    """The token could not be checked (the identity provider's keys cannot be fetched):
    :meth:`viewer` raises ``SERVICE_UNAVAILABLE``, not ``UNAUTHENTICATED``."""
    connection_params: dict[str, object] | None = None
    """The ``connection_init`` payload of a WebSocket (set by strawberry)."""
    expires_at: datetime | None = None
    """When the WebSocket's token expires; later operations are refused."""
    operation_type: str | None = None
    """``query``, ``mutation`` or ``subscription`` once execution began (set by the schema)."""
    operation_name: str | None = None
    """The executed operation's name (sent, or the document's only one; set with the type)."""
    introspection_only: bool = False
    """Every root field of the operation is ``__schema``, ``__type`` or ``__typename``
    (set by :mod:`chorus.graphql.guards.cost` when execution starts): its answer is the schema's."""
    query_cost: float = 0
    """What this request took from the viewer's query budget (a race's re-read gives it back)."""
    payload_reads_refused: bool = False
    """A mutation whose payload's reads are over the viewer's query budget: ``playlist`` is
    refused (:class:`~chorus.resolvers.errors.PayloadReadRefused`), the edit is not."""
    history_entries: int = 0
    """Entries of the log this request read through ``changes`` (bounded per request)."""
    cost_allowance: int | None = None
    """Cost points the request may spend beyond its requested cost, found only as it runs
    (``max_query_cost`` minus the requested cost; set by :mod:`chorus.graphql.guards.cost`);
    ``None``: not checked (a subscription, or a context outside the schema)."""
    extra_cost: int = 0
    """Cost found as it ran: the entries of versions beyond the largest page size, which
    is what the query cost counts a version's entries at (reported as ``actualQueryCost``)."""
    rewinds: dict[tuple[str, int], AtVersion] = field(init=False)
    """Old versions this request (or event) rebuilt (``atVersion``), by playlist and version:
    aliases of one version rebuild it once, and are charged once."""
    rewound_entries: int = field(init=False)
    """Entries of changes the request's (or event's) rewinds undid (bounded per request)."""
    rewinding: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One rewind of a request at a time: each is weighed against what the ones before
    it were charged, and an alias of a version being rebuilt waits for it."""
    loaders: Loaders = field(init=False)
    reads: ReadSet = field(init=False)
    """What this request (or subscription event) read: what its answer may be cached by."""

    def __post_init__(self) -> None:
        self.renew_loaders()

    def begin_operation(self) -> None:
        """A new operation on this context: its budgets of history start again, and on a
        WebSocket (one context for every operation of the socket) its DataLoaders too.

        Without it, a query on a socket was answered from what an earlier query on
        the same socket had loaded (a playlist's header as it was then), and the
        history a socket read added up over its life until every ``changes`` failed.
        """
        self.history_entries = self.extra_cost = 0
        if self.connection_params is not None:
            self.renew_loaders()
        else:
            self.rewinds, self.rewound_entries = {}, 0

    def renew_loaders(self) -> None:
        """Fresh DataLoaders and reads: nothing cached survives into the next event."""
        self.reads = ReadSet()
        self.loaders = Loaders(self.services, self.viewer_id, self.reads)
        self.rewinds, self.rewound_entries = {}, 0

    def viewer(self) -> str:
        """The authenticated user id.

        Raises:
            Unauthenticated: no token, or an invalid one.
            ServiceUnavailable: the identity provider's keys cannot be fetched.
        """
        if self.viewer_id is None:
            raise no_viewer(self.auth_error, unavailable=self.auth_unavailable)
        if self.expires_at is not None and datetime.now(UTC) >= self.expires_at:
            raise Unauthenticated("the token has expired")
        return self.viewer_id
