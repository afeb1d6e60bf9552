"""The catalog boundary: what Chorus asks of the media-metadata service.

A playlist stores media **ids** only; titles, artists and durations belong to
the catalog, a separate service (docs/full-profile.md). Everything above this module
talks to a :class:`Catalog` and never to a concrete client, so the embedded
catalogue, the HTTP client and a test double are interchangeable.

A catalog that cannot answer raises :class:`CatalogUnavailable`; callers
degrade (``media: null``) rather than fail the whole request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

MAX_SEARCH_QUERY_LENGTH = 200
"""The longest search query (characters) any catalog is asked."""
MAX_SEARCH_OFFSET = 999_999_999
"""The largest search offset any catalog accepts (its HTTP service answers 400 above)."""


@dataclass(frozen=True, slots=True)
class Media:
    """Metadata of one playable item.

    Attributes:
        id: the media id playlists store, at most
            :data:`~chorus.domain.limits.MAX_ID_LENGTH` characters, e.g.
            ``"chinook:track:1"`` or ``"spotify:track:4uLU6hMCjMI75M1A2tKUQC"``.
        title: the track title.
        artists: credited artists, main artist first (may be empty).
        album: the album title, if known.
        duration_ms: length in milliseconds, if known.
        available: ``False`` when the catalog knows the item but it cannot be
            played (withdrawn, region-locked).
    """

    id: str
    title: str
    artists: tuple[str, ...]
    album: str | None
    duration_ms: int | None
    available: bool = True


@dataclass(frozen=True, slots=True)
class MediaPage:
    """One page of search results.

    Attributes:
        items: the matches at ``offset``, ``offset + 1``, … in the catalog's order.
        total: how many media match the query in all.
        offset: the position of ``items[0]`` among all matches (0-based).
    """

    items: tuple[Media, ...]
    total: int
    offset: int

    @property
    def has_next(self) -> bool:
        """Whether matches follow this page."""
        return self.offset + len(self.items) < self.total


class CatalogUnavailable(Exception):
    """The catalog could not answer: timeout, connection refused, 5xx, malformed reply.

    The message is ours and safe to log; it never carries the server's own
    error text.
    """


class Catalog(Protocol):
    """A source of media metadata (embedded, HTTP, or a test double)."""

    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        """Metadata of the given media, by id.

        Args:
            media_ids: ids in any number and order; repeats are allowed.

        Returns:
            ``{media id: Media}`` for the ids the catalog knows; unknown ids
            are simply absent.

        Raises:
            CatalogUnavailable: the catalog could not answer.
        """
        ...

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        """Media whose title, any artist or album contains ``query``.

        Matching ignores case (Unicode case folding) and runs of white space;
        an empty or white-space query matches everything. The order is stable
        and deterministic, so offsets page through every match exactly once
        while the catalog does not change.

        Args:
            query: the text to look for.
            offset: matches to skip (≥ 0).
            limit: the largest page wanted (≥ 1).

        Raises:
            CatalogUnavailable: the catalog could not answer.
            ValueError: a negative offset or a limit below 1.
        """
        ...

    async def aclose(self) -> None:
        """Release connections the client holds; the catalog is unusable after."""
        ...
