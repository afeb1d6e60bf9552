"""The Chinook sample catalogue shipped with the package (``data/``, MIT licence).

``data/chinook-music.json`` holds the Chinook database's artists, albums,
genres, 3,503 tracks and 18 playlists (lerocha/chinook-database, tracks from
an iTunes library; licence in ``data/chinook-LICENSE.md``). A track becomes
:class:`~chorus.catalog.protocol.Media` ``chinook:track:{id}`` whose artist is
its album's artist.

The file is read on first use, once per process (about 20 ms), never at
import time.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from chorus.catalog.matching import search_text
from chorus.catalog.protocol import Media

MEDIA_ID_PREFIX = "chinook:"
"""Every Chinook media id starts with this; imported media may not."""


def track_media_id(track_id: int) -> str:
    """The media id of Chinook track ``track_id``."""
    return f"{MEDIA_ID_PREFIX}track:{track_id}"


@dataclass(frozen=True, slots=True)
class ChinookPlaylist:
    """A playlist of the sample data: its Chinook id, name and tracks in order."""

    source_id: int
    name: str
    media_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Chinook:
    """The loaded catalogue (read-only).

    Attributes:
        media: every track by media id, in Chinook track id order.
        search_texts: ``(search text, media)`` per track in the same order
            (:func:`~chorus.catalog.matching.search_text`).
        playlists: the sample playlists in Chinook id order.
    """

    media: dict[str, Media]
    search_texts: tuple[tuple[str, Media], ...]
    playlists: tuple[ChinookPlaylist, ...]


def _read_json() -> Any:
    source = resources.files("chorus.catalog").joinpath("data", "chinook-music.json")
    with source.open("rb") as f:
        return json.load(f)


@functools.cache
def load_chinook() -> Chinook:
    """The Chinook catalogue, read from the package data on the first call."""
    data = _read_json()
    artists = {a["id"]: a["name"] for a in data["artists"]}
    albums = {a["id"]: (a["title"], artists[a["artist_id"]]) for a in data["albums"]}
    media: dict[str, Media] = {}
    for track in sorted(data["tracks"], key=lambda t: t["id"]):
        album, artist = albums[track["album_id"]]
        media_id = track_media_id(track["id"])
        media[media_id] = Media(media_id, track["name"], (artist,), album, track["duration_ms"])
    playlists = tuple(
        ChinookPlaylist(p["id"], p["name"], tuple(track_media_id(t) for t in p["track_ids"]))
        for p in sorted(data["playlists"], key=lambda p: p["id"])
    )
    texts = tuple((search_text(m), m) for m in media.values())
    return Chinook(media, texts, playlists)


def chinook_playlists() -> list[tuple[str, list[str]]]:
    """The sample playlists as ``(name, media ids in order)``, in Chinook id order.

    Names repeat in the data (two "Music", two "Movies", …), and so would a
    media id repeated within one playlist; both are kept as they are.
    """
    return [(p.name, list(p.media_ids)) for p in load_chinook().playlists]
