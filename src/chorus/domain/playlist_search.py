"""Finding playlists: the orders a list of playlists pages in, and the title search rule.

Pure rules shared by the SQL reads (:mod:`chorus.db.playlist_list_reads`) and the API
(:mod:`chorus.graphql.schema.search.playlist_connection`):

* a list of playlists is ordered by one :class:`OrderField` in one
  :class:`Direction`, ties broken by the playlist id in the same direction,
  so every order is total and a keyset ``(value, id)`` names one place in it;
* a title is compared by its :func:`title_key` (Unicode case folding, runs of
  white space made one space), stored beside the title, so ordering by title
  and searching by title ignore case alike on SQLite and PostgreSQL;
* the search is a **prefix** match on that key: the keys in the half-open
  range ``[key, prefix_end(key))``, compared by code point (bytewise UTF-8,
  ``COLLATE "C"``), which an index answers as one range scan. No pattern
  language is involved, so ``%`` and ``_`` are ordinary characters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

MAX_TITLE_KEY_LENGTH = 800
"""The longest title key: case folding turns one character into at most three (200 → 600)."""


class OrderField(Enum):
    """What a list of playlists is ordered by (ties: the playlist id)."""

    CREATED_AT = "CREATED_AT"
    UPDATED_AT = "UPDATED_AT"
    TITLE = "TITLE"


class Direction(Enum):
    ASC = "ASC"
    DESC = "DESC"


@dataclass(frozen=True, slots=True)
class PlaylistOrder:
    """One order of a list of playlists."""

    field: OrderField = OrderField.CREATED_AT
    direction: Direction = Direction.DESC

    @classmethod
    def of(cls, field: OrderField, direction: Direction | None) -> PlaylistOrder:
        """``field`` in ``direction``; without one, titles A→Z and times newest first."""
        if direction is None:
            direction = Direction.ASC if field is OrderField.TITLE else Direction.DESC
        return cls(field, direction)


NEWEST_FIRST = PlaylistOrder()
"""The order of ``viewer.playlists`` before it took an ``orderBy``, still its default."""
BY_TITLE = PlaylistOrder(OrderField.TITLE, Direction.ASC)
"""The order of title search results."""


@dataclass(frozen=True, slots=True)
class PlaylistKey:
    """A place in a list of playlists: the order it belongs to and the keyset there.

    Attributes:
        order: the order the keyset is of (a cursor of another order is refused).
        value: the ordered column's value (a time, or a title key).
        playlist_id: the tie-break.
    """

    order: PlaylistOrder
    value: datetime | str
    playlist_id: str


@dataclass(frozen=True, slots=True)
class PlaylistWindow:
    """Which page of a list of playlists: ``size`` of them in ``order``, strictly between keysets.

    Attributes:
        order: the order of the list (the keysets are of it).
        size: how many playlists at most (the checked ``first`` or ``last``).
        from_end: the ``size`` nearest ``before`` (Relay ``last``), else nearest ``after``.
        after: the keyset the page starts after; ``None``: the list's start.
        before: the keyset the page ends before; ``None``: the list's end.
    """

    order: PlaylistOrder
    size: int
    from_end: bool = False
    after: PlaylistKey | None = None
    before: PlaylistKey | None = None


def title_key(title: str) -> str:
    """A title as it is ordered and searched: case-folded, white space runs made one space."""
    return " ".join(title.casefold().split())


def prefix_end(key: str) -> str | None:
    """The least string after every string that starts with ``key`` (code point order).

    Returns:
        ``None`` when there is none (``key`` is empty or all U+10FFFF): the
        range is then unbounded above.
    """
    chars = list(key)
    while chars:
        last = ord(chars.pop())
        if last == 0x10FFFF:
            continue
        following = last + 1
        if 0xD800 <= following <= 0xDFFF:  # surrogates are no characters of UTF-8 text
            following = 0xE000
        return "".join(chars) + chr(following)
    return None
