"""Where one request's reads come from: snapshot, the request's memo, DataLoader, SQL.

:class:`ReadSource` is created per request (and per subscription event, and
per operation of a WebSocket). It alone chooses, for each read
:mod:`chorus.resolvers.queries` asks of it, among:

1. the Redis snapshot (:mod:`chorus.resolvers.snapshots`; a null reader where
   snapshots are off) — a PUBLIC playlist's header and first page;
2. the request's memo — a first page read in the header's transaction, and
   the playlists this request already reads from SQL alone (it read or
   changed them there), so its later reads of them agree with the first;
3. the DataLoaders (:mod:`chorus.resolvers.loaders`) — batched SQL by key;
4. SQL (:mod:`chorus.db.pages`), each read in its own transaction.

It also holds what the request read (:class:`~chorus.resolvers.reads.ReadSet`,
what its answer may be cached by) and what it may still read
(:class:`ReadBudget`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from chorus.db import pages
from chorus.db.history_reads import AtVersion
from chorus.db.pages import EntriesPage
from chorus.domain.model import Playlist, Role
from chorus.domain.ports import SortKey
from chorus.resolvers.loaders import Loaders
from chorus.resolvers.reads import ReadSet
from chorus.resolvers.services import Services
from chorus.resolvers.snapshots import SnapshotReader, snapshot_reader


@dataclass
class ReadBudget:
    """What a request (or a WebSocket's operation) may still read, and what it spent.

    It outlives a renewal of its :class:`ReadSource` (each operation of a
    socket): :meth:`begin_operation` starts the per-operation counts again.
    """

    query_cost: float = 0
    """What this request took from the viewer's query budget (a race's re-read gives it back)."""
    payload_retry_after_ms: int | None = None
    """A mutation whose payload's reads are over the viewer's query budget: milliseconds
    until the budget holds their cost; its ``playlist`` is refused
    (:class:`~chorus.resolvers.request_errors.PayloadReadRefused`), the edit is not.
    ``None``: the payload may read."""
    cost_allowance: int | None = None
    """Cost points the request may spend beyond its requested cost, found only as it runs
    (``max_query_cost`` minus the requested cost; set by :mod:`chorus.graphql.guards.cost`);
    ``None``: not checked (a subscription, or a context outside the schema)."""
    extra_cost: int = 0
    """Cost found as it ran: the entries of versions beyond the largest page size, which
    is what the query cost counts a version's entries at (reported as ``actualQueryCost``)."""
    history_entries: int = 0
    """Entries of the log this request read through ``changes`` (bounded per request)."""
    rewinds: dict[tuple[str, int], AtVersion] = field(default_factory=dict)
    """Old versions this request (or event) rebuilt (``atVersion``), by playlist and version:
    aliases of one version rebuild it once, and are charged once."""
    rewound_entries: int = 0
    """Entries of changes the request's (or event's) rewinds undid (bounded per request)."""
    rewinding: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One rewind of a request at a time: each is weighed against what the ones before
    it were charged, and an alias of a version being rebuilt waits for it."""

    @property
    def payload_reads_refused(self) -> bool:
        """Whether the payload's reads are refused (:attr:`payload_retry_after_ms` is set)."""
        return self.payload_retry_after_ms is not None

    def begin_operation(self) -> None:
        """A new operation: its history and rewinds are counted from zero again, and its
        payload's reads are its own to refuse (a socket's earlier edit over the budget
        does not refuse a later one's, nor hide a query's ``actualQueryCost``)."""
        self.history_entries = self.extra_cost = 0
        self.payload_retry_after_ms = None
        self.forget_rewinds()

    def checkpoint(self) -> Callable[[], None]:
        """A function that gives back the history entries and extra cost charged after this
        call: an abandoned plan's run (:mod:`chorus.graphql.execution.planned`) is undone
        before graphql-core runs the same fields, which charge them once. Rewinds stay:
        a version rebuilt is charged once, whichever run rebuilt it."""
        history, extra = self.history_entries, self.extra_cost

        def restore() -> None:
            self.history_entries, self.extra_cost = history, extra

        return restore

    def forget_rewinds(self) -> None:
        """A new subscription event or operation: rewinds are rebuilt and charged anew."""
        self.rewinds, self.rewound_entries = {}, 0


class ReadSource:
    """One request's reads: it asks snapshot → memo → DataLoader → SQL, and records each.

    Attributes:
        record: what the request read (the response cache's input).
        loaders: the request's DataLoaders (playlist, role, media, liked, followers, feed).
        budget: what the request may still read (:class:`ReadBudget`).
    """

    def __init__(
        self, services: Services, viewer_id: str | None, budget: ReadBudget | None = None
    ) -> None:
        self._services, self._viewer_id = services, viewer_id
        self._db = services.db
        self.record = ReadSet()
        self.loaders = Loaders(services, viewer_id, self.record)
        self.budget = budget if budget is not None else ReadBudget()
        self._snapshots: SnapshotReader = snapshot_reader(services.snapshots, services.db)
        self._first_pages: dict[str, tuple[Playlist, int, EntriesPage]] = {}
        """Playlist id → a header, a first page size and the page read with it (one transaction)."""
        self._sql_only: set[str] = set()
        """Playlists this request reads from SQL alone (it read or changed them there)."""
        self._changed: set[str] = set()
        """Playlists this request committed a change to (the projector snapshots those)."""

    def renewed(self, viewer_id: str | None) -> ReadSource:
        """A fresh source for the next operation or event: nothing read survives, the
        budget does (its rewinds start again)."""
        self.budget.forget_rewinds()
        return ReadSource(self._services, viewer_id, self.budget)

    async def playlist(
        self, playlist_id: str, min_version: int | None = None, *, first_page: int | None = None
    ) -> Playlist | None:
        """A playlist's header, whoever may see it (visibility is the caller's to decide).

        Args:
            playlist_id: the playlist.
            min_version: only a snapshot (or a read replica) at least this new may
                answer; an older playlist read from the primary is returned all the same.
            first_page: the size of the first page of entries asked with it:
                header and page are read in one SQL transaction, and
                :meth:`entries_page` answers from what was read.

        Returns:
            The header (from a snapshot: PUBLIC and undeleted), or ``None`` when
            there is no such playlist.
        """
        if playlist_id not in self._sql_only:
            hit = await self._snapshots.header(playlist_id, min_version)
            if hit is not None:
                self.record.playlist(hit)
                return hit
            self._sql_only.add(playlist_id)
        if first_page is None and (min_version is None or self._db.replicas is None):
            playlist = await self.loaders.playlist.load(playlist_id)
        elif first_page is None:
            # The loader's batch knows no minVersion: a replica must not answer older.
            found_header = await pages.playlists_by_id(
                self._db, [playlist_id], min_version=min_version
            )
            playlist = found_header.get(playlist_id)
            if playlist is not None:
                self.loaders.playlist.prime(playlist_id, playlist)
        else:
            found = await pages.playlist_and_first_page(
                self._db, playlist_id, first_page, min_version=min_version
            )
            playlist = found[0] if found else None
            if found is not None:
                self.loaders.playlist.prime(playlist_id, found[0])
                self._first_pages[playlist_id] = (found[0], first_page, found[1])
        if playlist is None:
            self.record.refuse("a playlist that does not exist")
            return None
        self.record.playlist(playlist)
        if playlist.id not in self._changed:  # a mutation's payload: the projector fills it
            self._snapshots.fill(playlist)
        return playlist

    async def role(self, playlist_id: str) -> Role | None:
        """The viewer's role in a playlist (``None``: none, or no viewer); always SQL."""
        return await self.loaders.role.load(playlist_id)

    async def entries_page(
        self,
        playlist: Playlist,
        *,
        size: int,
        from_end: bool,
        after: SortKey | None,
        before: SortKey | None,
    ) -> EntriesPage:
        """A keyset page of live entries, with the version and count it was read at.

        The first page comes from the snapshot that answered ``playlist``, else
        from the page read with its header; any other page is SQL.

        Args:
            playlist: a header this source returned (visible to the viewer).
            size, from_end: the checked page size; ``from_end`` for Relay ``last``.
            after, before: exclusive keyset bounds decoded from cursors.
        """
        if after is None and before is None and not from_end:
            cached = self._snapshots.first_page(playlist, size)
            if cached is None:
                read = self._first_pages.get(playlist.id)
                if read is not None and read[0] is playlist and read[1] == size:
                    cached = read[2]
            if cached is not None:
                self.record.version(playlist.id, cached.version)
                return cached
        page = await pages.entries_page(
            self._db,
            playlist.id,
            size=size,
            after=after,
            before=before,
            from_end=from_end,
            min_version=playlist.version,  # a replica never pages older than the header
        )
        if page is None:
            self.record.refuse("a playlist deleted while it was read")
            return EntriesPage((), False, False, 0, playlist.version)
        self.record.version(playlist.id, page.version)
        return page

    def forget(self, playlist_id: str) -> None:
        """Drop what this request cached about a playlist (after it committed a change).

        The rest of the request reads that playlist from SQL: the snapshot
        predates the commit even if the head version was not raised yet.
        """
        self.loaders.forget(playlist_id)
        self._sql_only.add(playlist_id)
        self._changed.add(playlist_id)
        self._snapshots.forget(playlist_id)
        self._first_pages.pop(playlist_id, None)
