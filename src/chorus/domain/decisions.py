"""What a command handler is given and what it returns (:mod:`chorus.domain.handlers`).

A handler gets a :class:`Context` (who acts, the clock, id source, limits)
and returns a :class:`Decision`: the next version's header and canonical
changes, and the :class:`Outcome` the client sees, which storage keeps for
a retry to replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from chorus.domain.changes import Change
from chorus.domain.limits import DEFAULT_LIMITS, Limits
from chorus.domain.model import Entry, Playlist


@dataclass(frozen=True, slots=True)
class Context:
    """Who acts, and the values a handler must not make up itself."""

    actor_id: str
    now: datetime
    new_id: Callable[[], str]
    limits: Limits = DEFAULT_LIMITS


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a committed command did; stored with it and returned again on a retry.

    ``entries`` are the entries as placed by an add or a move, in list order;
    ``skipped_entry_ids`` the targets of a move or remove that were already gone;
    ``removed_entry_ids`` the entries this version made tombstones, in the
    order of its changes (a remove's live targets, in the order given).
    """

    playlist_id: str
    version: int
    rebased: bool = False
    entries: tuple[Entry, ...] = ()
    skipped_entry_ids: tuple[str, ...] = ()
    removed_entry_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """The next version of a playlist, ready to be committed."""

    playlist: Playlist
    changes: tuple[Change, ...]
    outcome: Outcome
