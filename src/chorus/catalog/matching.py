"""How a search query matches media, shared by the in-memory and the SQL search.

Both sides are normalised the same way: Unicode case folding and every run of
white space made one space. A media's *search text* is its title, artists and
album so normalised and joined with a newline. A normalised query never holds
a newline, so it can only match inside one field, never across two; and the
SQL side stores the search text in a column and compares it with a plain,
escaped ``LIKE``, which behaves the same on SQLite and PostgreSQL (SQLite's
own ``LIKE``/``lower()`` fold ASCII only).
"""

from __future__ import annotations

from chorus.catalog.protocol import Media

FIELD_SEPARATOR = "\n"


def normalise(text: str) -> str:
    """``text`` case-folded, trimmed, with each run of white space one space."""
    return " ".join(text.casefold().split())


def search_text(media: Media) -> str:
    """The text a query is looked for in: title, artists and album, normalised."""
    fields = [media.title, *media.artists]
    if media.album is not None:
        fields.append(media.album)
    return FIELD_SEPARATOR.join(normalise(f) for f in fields)


def check_page(offset: int, limit: int) -> None:
    """Raises ValueError unless ``offset >= 0`` and ``limit >= 1``."""
    if offset < 0:
        raise ValueError(f"offset must be at least 0, not {offset}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
