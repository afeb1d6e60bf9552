"""Catching up from the mutation log: the one path that reads versions since a version.

``Playlist.changes`` and every subscription stream read versions through
:func:`read_since`, so sync and live updates can never disagree.
"""

from __future__ import annotations

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
