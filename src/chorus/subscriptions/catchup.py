"""Catching up from the mutation log: the one path that reads versions since a version.

``Playlist.changes`` and every subscription stream read versions through
:func:`read_since`, so sync and live updates can never disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from chorus.db import repository
from chorus.db.engine import Database
from chorus.domain.committed import CommittedVersion


@dataclass(frozen=True, slots=True)
class CatchUpPage:
    """Versions after ``since_version``, oldest first.

    ``resync`` is set when the log no longer holds ``since_version + 1``
    (retention): the reader must start again from ``current_version``.
    """

    since_version: int
    current_version: int
    versions: list[CommittedVersion]
    has_more: bool
    resync: bool


async def read_since(
    db: Database, playlist_id: str, since_version: int, *, limit: int
) -> CatchUpPage | None:
    """Up to ``limit`` versions after ``since_version``, read in one transaction.

    Returns:
        ``None`` when no such playlist.
    """
    async with db.read() as conn:
        header = await repository.get_playlist(conn, playlist_id)
        if header is None:
            return None
        log = await repository.versions_since(conn, playlist_id, since_version, limit=limit + 1)
    if log is None:
        return CatchUpPage(since_version, header.version, [], False, True)
    return CatchUpPage(since_version, header.version, log[:limit], len(log) > limit, False)


class CatchUpSlots:
    """How many of one viewer's streams read and send the log at once, per process.

    A stream takes a slot for each page it catches up (read, then each
    version sent) and gives it back after: the viewer's other streams wait
    their turn, page by page. Without it one user's 200 subscriptions from
    an old version each replayed the log at once; the event loop went round
    200 busy streams per turn, and ``/healthz`` and every other user waited
    seconds (an attacker's pass). Live versions do not take a slot.

    Args:
        per_viewer: slots per viewer (``CHORUS_CATCH_UPS_PER_USER``), at least 1.
    """

    def __init__(self, per_viewer: int = 2) -> None:
        self.per_viewer = per_viewer
        self._slots: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def slot(self, viewer: str) -> AsyncIterator[None]:
        """Held while one page is caught up; waits while the viewer's slots are taken."""
        held = self._slots.get(viewer)
        if held is None:
            held = self._slots[viewer] = (asyncio.Semaphore(self.per_viewer), [0])
        semaphore, users = held
        users[0] += 1  # waiting or holding: the entry stays while anyone needs it
        try:
            async with semaphore:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._slots[viewer]

    @property
    def viewers(self) -> int:
        """Viewers with a stream catching up or waiting to (for tests and metrics)."""
        return len(self._slots)
