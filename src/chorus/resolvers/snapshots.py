"""The snapshot fast path: when a read is answered from Redis instead of SQL.

In the full profile a PUBLIC playlist may be answered from its Redis snapshot
(DESIGN §8, :mod:`chorus.caches.reader`). This module alone decides when;
the SQL path of :class:`~chorus.resolvers.read_source.ReadSource` is the one
it shortcuts, and stays the reference. The rule:

1. The *header* of a playlist (:meth:`Snapshots.header`) comes from a
   snapshot at the head version, ``>= minVersion``, of a PUBLIC playlist
   that is not deleted — without touching SQL. The reader remembers which
   snapshot answered.
2. The *first* page of entries of that same playlist object
   (:meth:`Snapshots.first_page`) comes from that same snapshot, with its
   count and version, when the snapshot holds the whole page.
3. A PUBLIC playlist whose snapshot missed is read from SQL, and its
   snapshot is written from SQL in the background (:meth:`Snapshots.fill`,
   read-through): popular playlists are cached whether or not anyone edits
   them. A mutation's payload fills nothing: the projector snapshots commits.
4. Every other read is SQL: later pages, ``last``, members, the viewer's
   role, history. Once a request reads (or changes) a playlist in SQL, it
   keeps doing so (the read source's memo), so its later reads of that
   playlist agree with the first.

Where snapshots are off, the request's reader is :class:`NoSnapshots`: every
answer is "read SQL". A snapshot holds exactly what SQL returns at its
version, so the answer is the same either way (``tests/full/test_snapshots.py``
runs both).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Protocol

from strawberry.dataloader import DataLoader

from chorus.caches.reader import SnapshotCache
from chorus.caches.snapshot import Snapshot
from chorus.db import pages
from chorus.db.engine import Database
from chorus.db.pages import EntriesPage
from chorus.domain.model import Playlist, Visibility


class SnapshotReader(Protocol):
    """One request's view of the snapshots: a hit, or ``None`` meaning "read SQL"."""

    async def header(self, playlist_id: str, min_version: int | None) -> Playlist | None:
        """The PUBLIC, undeleted header at ``>= min_version`` from a snapshot, or ``None``."""
        ...

    def first_page(self, playlist: Playlist, size: int) -> EntriesPage | None:
        """The first ``size`` entries of the snapshot that answered ``playlist``, or ``None``."""
        ...

    def fill(self, playlist: Playlist) -> None:
        """``playlist`` was read from SQL: write its snapshot in the background if PUBLIC."""
        ...

    def forget(self, playlist_id: str) -> None:
        """The request changed the playlist: its served snapshot answers nothing more."""
        ...


class NoSnapshots:
    """The reader of a process without snapshots: every read is SQL."""

    async def header(self, playlist_id: str, min_version: int | None) -> Playlist | None:
        return None

    def first_page(self, playlist: Playlist, size: int) -> EntriesPage | None:
        return None

    def fill(self, playlist: Playlist) -> None:
        pass

    def forget(self, playlist_id: str) -> None:
        pass


class Snapshots:
    """One request's reads of the Redis snapshots (one batched ``get`` per tick)."""

    def __init__(self, cache: SnapshotCache, db: Database) -> None:
        self._cache, self._db = cache, db
        # A partial of a module function, not a bound method: a DataLoader held by
        # the object whose method it calls is a reference cycle (see Loaders).
        self._loader: DataLoader[tuple[str, int | None], Snapshot | None] = DataLoader(
            partial(_gets, cache)
        )
        self._served: dict[str, Snapshot] = {}
        """Snapshots whose header this request answered with; their first page goes with them."""

    async def header(self, playlist_id: str, min_version: int | None) -> Playlist | None:
        """Only a PUBLIC playlist's: every viewer may read it, so no role query is
        needed to decide visibility (``viewerRole`` still loads the role)."""
        snapshot = await self._loader.load((playlist_id, min_version))
        if (
            snapshot is None
            or snapshot.playlist.visibility is not Visibility.PUBLIC
            or snapshot.playlist.deleted
        ):
            return None
        self._served[playlist_id] = snapshot
        return snapshot.playlist

    def first_page(self, playlist: Playlist, size: int) -> EntriesPage | None:
        """``None`` (read SQL) unless :meth:`header` answered with this playlist and
        the snapshot holds all ``size`` entries (or the whole list)."""
        snapshot = self._served.get(playlist.id)
        if snapshot is None or snapshot.playlist != playlist:
            return None
        if size > self._cache.page_size and snapshot.has_more:
            return None
        page = snapshot.first_page(size)
        if page is None:
            return None
        items, has_next = page
        return EntriesPage(items, has_next, False, playlist.entry_count, snapshot.version)

    def fill(self, playlist: Playlist) -> None:
        """The snapshot is read again in its own transaction, in the background
        (:meth:`~chorus.caches.reader.SnapshotCache.fill`): the request does not wait."""
        if playlist.visibility is not Visibility.PUBLIC or playlist.deleted:
            return
        db, page_size, playlist_id = self._db, self._cache.page_size, playlist.id

        async def read() -> Snapshot | None:
            found = await pages.head_and_first_entries(db, playlist_id, page_size + 1)
            if found is None:
                return None
            header, entries = found
            if header.visibility is not Visibility.PUBLIC or header.deleted:
                return None
            return Snapshot.read(header, entries, page_size)

        self._cache.fill(playlist_id, read)

    def forget(self, playlist_id: str) -> None:
        self._served.pop(playlist_id, None)


async def _gets(cache: SnapshotCache, keys: list[tuple[str, int | None]]) -> list[Snapshot | None]:
    return list(await asyncio.gather(*(cache.get(pid, least) for pid, least in keys)))


def snapshot_reader(cache: SnapshotCache | None, db: Database) -> SnapshotReader:
    """A request's reader: :class:`Snapshots` of ``cache``, or :class:`NoSnapshots` when off."""
    return NoSnapshots() if cache is None else Snapshots(cache, db)
