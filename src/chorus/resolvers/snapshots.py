"""The snapshot fast path: when a read is answered from Redis instead of SQL.

In the full profile a PUBLIC playlist may be answered from its Redis snapshot
(DESIGN §8, :mod:`chorus.caches.reader`). This module alone decides when;
:mod:`chorus.resolvers.queries` is the plain SQL path it shortcuts, and
stays the reference. The rule:

1. The *header* of a playlist (:func:`snapshot_header`) comes from a
   snapshot at the head version, ``>= minVersion``, of a PUBLIC playlist
   that is not deleted — without touching SQL. The request remembers which
   snapshot answered (``loaders.served``).
2. The *first* page of entries of that same playlist object
   (:func:`snapshot_first_page`) comes from that same snapshot, with its
   count and version, when the snapshot holds the whole page.
3. A PUBLIC playlist whose snapshot missed is read from SQL, and its
   snapshot is written from SQL in the background (:func:`fill_on_miss`,
   read-through): popular playlists are cached whether or not anyone edits
   them. A mutation's payload fills nothing: the projector snapshots commits.
4. Every other read is SQL: later pages, ``last``, members, the viewer's
   role, history. Once a request reads (or changes) a playlist in SQL, it
   keeps doing so (``loaders.sql_only``), so its later reads of that
   playlist agree with the first.

A snapshot holds exactly what SQL returns at its version, so the answer is
the same either way (``tests/full/test_snapshots.py`` runs both).
"""

from __future__ import annotations

from chorus.caches.snapshot import Snapshot
from chorus.db import pages
from chorus.db.pages import EntriesPage
from chorus.domain.model import Playlist, Visibility
from chorus.resolvers.context import RequestContext


async def snapshot_header(
    ctx: RequestContext, playlist_id: str, min_version: int | None
) -> Snapshot | None:
    """The snapshot that answers this read of the playlist's header, or ``None``: read SQL.

    Only a PUBLIC playlist's: every viewer may read it, so no role query is
    needed to decide visibility (``viewerRole`` still loads the role).

    Args:
        playlist_id: the playlist.
        min_version: a snapshot older than this may not answer (``minVersion``).
    """
    if ctx.services.snapshots is None or playlist_id in ctx.loaders.sql_only:
        return None
    snapshot = await ctx.loaders.snapshot.load((playlist_id, min_version))
    if (
        snapshot is None
        or snapshot.playlist.visibility is not Visibility.PUBLIC
        or snapshot.playlist.deleted
    ):
        ctx.loaders.sql_only.add(playlist_id)
        return None
    ctx.loaders.served[playlist_id] = snapshot
    return snapshot


def fill_on_miss(ctx: RequestContext, playlist: Playlist) -> None:
    """A PUBLIC playlist was read from SQL because its snapshot missed: fill it (read-through).

    The snapshot is read again in its own transaction, in the background
    (:meth:`~chorus.caches.reader.SnapshotCache.fill`): the request does not wait.
    """
    cache = ctx.services.snapshots
    if cache is None or playlist.visibility is not Visibility.PUBLIC or playlist.deleted:
        return
    if playlist.id in ctx.loaders.changed:
        return  # a mutation's own payload: the projector snapshots what commits change
    db, page_size = ctx.services.db, cache.page_size

    async def read() -> Snapshot | None:
        found = await pages.head_and_first_entries(db, playlist.id, page_size + 1)
        if found is None:
            return None
        header, entries = found
        if header.visibility is not Visibility.PUBLIC or header.deleted:
            return None
        return Snapshot.read(header, entries, page_size)

    cache.fill(playlist.id, read)


def snapshot_first_page(ctx: RequestContext, playlist: Playlist, size: int) -> EntriesPage | None:
    """The first ``size`` entries from the snapshot ``playlist`` was served from, or ``None``.

    ``None`` (read SQL) unless :func:`snapshot_header` answered with this very
    playlist object and the snapshot holds all ``size`` entries (or the whole list).
    """
    snapshot = ctx.loaders.served.get(playlist.id)
    cache = ctx.services.snapshots
    if snapshot is None or cache is None or snapshot.playlist != playlist:
        return None
    if size > cache.page_size and snapshot.has_more:
        return None
    page = snapshot.first_page(size)
    if page is None:
        return None
    items, has_next = page
    return EntriesPage(items, has_next, False, playlist.entry_count, snapshot.version)
