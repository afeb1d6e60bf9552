"""The port through which commands read a playlist's entries.

A command touches a handful of entries (its targets, its anchor and the
anchor's neighbours), never the whole list; the storage adapter answers these
questions with index lookups inside the command's transaction
(``chorus.db.repository``), and the unit tests answer them from memory.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from chorus.domain.changes import Change
from chorus.domain.model import Entry, Role

SortKey = tuple[str, str]
"""``(position_key, entry_id)``: the keyset that orders live entries."""


class PlaylistView(Protocol):
    """Read access to one playlist's entries and log, as of the locked version."""

    async def entries(self, entry_ids: Collection[str]) -> dict[str, Entry]:
        """The entries with these ids, live or tombstones; unknown ids are absent."""
        ...

    async def live_before(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        """Up to ``limit`` live entries strictly before ``position``, nearest first.

        ``position=None`` means the end of the list (the last entries).
        Entries whose id is in ``exclude`` are skipped.
        """
        ...

    async def live_after(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        """Up to ``limit`` live entries strictly after ``position``, nearest first.

        ``position=None`` means the start of the list (the first entries).
        """
        ...

    async def live_with_media(self, media_id: str) -> Sequence[Entry]:
        """The live entries holding ``media_id``, in list order (a like's duplicate check)."""
        ...

    async def role_of(self, user_id: str) -> Role | None:
        """The role ``user_id`` holds in the playlist, ``None`` for a non-member."""
        ...

    async def changes_since(self, version: int) -> Sequence[tuple[int, Sequence[Change]]] | None:
        """Every version after ``version`` with its changes, oldest first.

        ``None`` when the log no longer holds ``version + 1`` (retention).
        """
        ...
