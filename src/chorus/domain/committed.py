"""A committed version: one version of a playlist as the mutation log holds it.

Storage reads these from the log (:func:`chorus.db.repository.versions_since`);
the bus carries the same version as a :class:`~chorus.domain.changes.PlaylistEvent`,
which :meth:`CommittedVersion.from_event` decodes. ``Playlist.changes`` and
every subscription stream hand out this one type, so sync and live updates
cannot disagree about what a version holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chorus.domain.changes import Change, PlaylistEvent, decode_change


@dataclass(frozen=True, slots=True)
class CommittedVersion:
    """The canonical changes of one version and who committed them, when.

    Attributes:
        playlist_id: the playlist the version belongs to.
        version: 0 for the creation, then 1, 2, … without a gap.
        operation_id: the client's id of the command that made it.
        actor_id: the user who sent the command.
        committed_at: the commit time (UTC).
        changes: what the version did, fully resolved (:mod:`chorus.domain.changes`).
    """

    playlist_id: str
    version: int
    operation_id: str
    actor_id: str
    committed_at: datetime
    changes: tuple[Change, ...]

    @classmethod
    def from_event(cls, event: PlaylistEvent) -> CommittedVersion:
        """The version an outbox event carries (outbox, Kafka and Redis alike).

        Raises:
            KeyError, TypeError, ValueError: ``event`` is malformed (a missing
                field, a wrong type, an unknown change type or a bad timestamp).
        """
        return cls(
            playlist_id=event["playlist_id"],
            version=event["version"],
            operation_id=event["operation_id"],
            actor_id=event["actor_id"],
            committed_at=datetime.fromisoformat(event["committed_at"]),
            changes=tuple(decode_change(c) for c in event["changes"]),
        )
