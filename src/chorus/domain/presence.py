"""Presence: who has a playlist open right now, and who is editing it.

Presence is not part of a playlist: it has no version, is never written to
the mutation log, the outbox or Kafka, and lives only as long as the
sessions that hold it (docs/semantics.md, "Presence").

A user may be present through several **sessions** at once (two tabs, a
phone): each ``playlistEvents`` subscription is one, and a ``setPresence``
declaration is another. What is shown is one entry per user
(:func:`by_user`): EDITING when any of the user's sessions is editing, else
VIEWING, ``since`` the earliest start among the sessions in that state.

Who is listed (:func:`listing`): a member of the playlist by user id; on a
PUBLIC playlist every other present user is only counted; on a PRIVATE one a
non-member (a session left over from a member just removed) is neither
listed nor counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class PresenceState(StrEnum):
    """What a present user is doing."""

    VIEWING = "VIEWING"
    """Has the playlist open (a live subscription, or declared)."""
    EDITING = "EDITING"
    """Declared that they are editing (``setPresence``)."""


@dataclass(frozen=True, slots=True)
class Session:
    """One session's presence on one playlist.

    Attributes:
        user_id: who.
        state: what they are doing.
        since: when the session entered ``state`` (seconds since the epoch, UTC).
    """

    user_id: str
    state: PresenceState
    since: float


@dataclass(frozen=True, slots=True)
class UserPresence:
    """One user's presence on a playlist, over all their sessions."""

    user_id: str
    state: PresenceState
    since: float


def of_user(sessions: Iterable[Session]) -> UserPresence | None:
    """The presence of one user's ``sessions`` (``None``: there are none).

    EDITING wins over VIEWING; ``since`` is the earliest among the sessions
    in the winning state.
    """
    best: Session | None = None
    for s in sessions:
        if (
            best is None
            or (s.state is PresenceState.EDITING and best.state is not PresenceState.EDITING)
            or (s.state is best.state and s.since < best.since)
        ):
            best = s
    return None if best is None else UserPresence(best.user_id, best.state, best.since)


def by_user(sessions: Iterable[Session]) -> dict[str, UserPresence]:
    """One :class:`UserPresence` per user of ``sessions`` (see :func:`of_user`)."""
    grouped: dict[str, list[Session]] = {}
    for s in sessions:
        grouped.setdefault(s.user_id, []).append(s)
    found = {user: of_user(group) for user, group in grouped.items()}
    return {user: p for user, p in found.items() if p is not None}


@dataclass(frozen=True, slots=True)
class Listing:
    """What a reader of the playlist is shown.

    Attributes:
        entries: present members, by ``since`` then user id.
        others_count: present users who are not members (PUBLIC playlists only).
    """

    entries: tuple[UserPresence, ...]
    others_count: int


def listed(user_id: str, members: Mapping[str, object], public: bool) -> bool | None:
    """How ``user_id`` is shown: listed (``True``), counted (``False``) or not at all (``None``)."""
    if user_id in members:
        return True
    return False if public else None


def listing(
    present: Mapping[str, UserPresence], members: Mapping[str, object], *, public: bool
) -> Listing:
    """Members listed by id; on a PUBLIC playlist, everyone else counted.

    Args:
        present: user id → presence (:func:`by_user`).
        members: the playlist's members by user id (any value, e.g. the role).
        public: whether the playlist is PUBLIC.
    """
    entries = [p for user, p in present.items() if user in members]
    entries.sort(key=lambda p: (p.since, p.user_id))
    others = sum(1 for user in present if user not in members) if public else 0
    return Listing(tuple(entries), others)


__all__ = [
    "Listing",
    "PresenceState",
    "Session",
    "UserPresence",
    "by_user",
    "listed",
    "listing",
    "of_user",
]
