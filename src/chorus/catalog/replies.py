"""The JSON of the catalog service, shared by the server and the HTTP client.

``GET /media?id=a&id=b`` answers :class:`MediaReply`; ``GET /search?q=…&
offset=…&limit=…`` answers :class:`SearchReply`; a refused request answers
:class:`ErrorReply` with status 400. Field names are snake_case, durations in
milliseconds.
"""

from __future__ import annotations

from typing import Any, TypedDict, TypeGuard

from chorus.catalog.protocol import Media, MediaPage


class MediaWire(TypedDict):
    id: str
    title: str
    artists: list[str]
    album: str | None
    duration_ms: int | None
    available: bool


class MediaReply(TypedDict):
    media: list[MediaWire]


class SearchReply(TypedDict):
    items: list[MediaWire]
    total: int
    offset: int


class ErrorReply(TypedDict):
    error: str


def media_to_wire(media: Media) -> MediaWire:
    return {
        "id": media.id,
        "title": media.title,
        "artists": list(media.artists),
        "album": media.album,
        "duration_ms": media.duration_ms,
        "available": media.available,
    }


def _is_count(value: Any) -> TypeGuard[int]:
    """An int (JSON true/false are not numbers here) that is at least 0."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def media_from_wire(value: Any) -> Media:
    """A :class:`Media` from decoded JSON.

    Raises:
        ValueError: ``value`` is not a well-formed media object.
    """
    if not isinstance(value, dict):
        raise ValueError("media is not an object")
    media_id, title, artists = value.get("id"), value.get("title"), value.get("artists")
    album, duration_ms = value.get("album"), value.get("duration_ms")
    available = value.get("available", True)
    if not isinstance(media_id, str) or not media_id:
        raise ValueError("media id is not a non-empty string")
    if not isinstance(title, str):
        raise ValueError("title is not a string")
    if not isinstance(artists, list) or not all(isinstance(a, str) for a in artists):
        raise ValueError("artists is not a list of strings")
    if album is not None and not isinstance(album, str):
        raise ValueError("album is not a string")
    if duration_ms is not None and not _is_count(duration_ms):
        raise ValueError("duration_ms is not a non-negative integer")
    if not isinstance(available, bool):
        raise ValueError("available is not a boolean")
    return Media(media_id, title, tuple(artists), album, duration_ms, available)


def page_from_wire(value: Any) -> MediaPage:
    """A :class:`MediaPage` from a decoded :class:`SearchReply`.

    Raises:
        ValueError: ``value`` is not a well-formed search reply.
    """
    if not isinstance(value, dict):
        raise ValueError("search reply is not an object")
    items, total, offset = value.get("items"), value.get("total"), value.get("offset")
    if not isinstance(items, list):
        raise ValueError("items is not a list")
    if not _is_count(total) or not _is_count(offset):
        raise ValueError("total and offset are not non-negative integers")
    return MediaPage(tuple(media_from_wire(m) for m in items), total, offset)
