"""Reading history from the mutation log: the one replay path.

``Playlist.changes`` and every subscription stream read versions through
:func:`replay`, so sync and live updates can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import repository
from chorus.db.repository import LoggedVersion
from chorus.domain.changes import PlaylistEvent, decode_change


def from_event(event: PlaylistEvent) -> LoggedVersion:
    """The log row an outbox event carries."""
    return LoggedVersion(
        playlist_id=event["playlist_id"],
        version=event["version"],
        operation_id=event["operation_id"],
        actor_id=event["actor_id"],
        committed_at=datetime.fromisoformat(event["committed_at"]),
        changes=tuple(decode_change(c) for c in event["changes"]),
    )


@dataclass(frozen=True, slots=True)
class ReplayPage:
    """Versions after ``since_version``, oldest first.

    ``resync`` is set when the log no longer holds ``since_version + 1``
    (retention): the reader must start again from ``current_version``.
    """

    since_version: int
    current_version: int
    versions: list[LoggedVersion]
    has_more: bool
    resync: bool


async def replay(
    conn: AsyncConnection, playlist_id: str, since_version: int, *, limit: int
) -> ReplayPage | None:
    """Up to ``limit`` versions after ``since_version``; ``None`` when no such playlist."""
    header = await repository.get_playlist(conn, playlist_id)
    if header is None:
        return None
    log = await repository.versions_since(conn, playlist_id, since_version, limit=limit + 1)
    if log is None:
        return ReplayPage(since_version, header.version, [], False, True)
    return ReplayPage(since_version, header.version, log[:limit], len(log) > limit, False)
