"""The memo of ``Playlist.totalDurationMs``: one sum per playlist version and process."""

from __future__ import annotations

import time
from collections import OrderedDict


class Durations:
    """Total durations by ``(playlist id, version)``, computed once per version and process.

    An entry is dropped after ``ttl_s`` seconds, so media whose catalog
    duration changed count anew within that bound (``CHORUS_MEDIA_FRESHNESS_S``,
    the response cache's bound for media too); at most ``size`` are kept.
    """

    def __init__(self, *, ttl_s: float = 60.0, size: int = 4096) -> None:
        if ttl_s <= 0 or size < 1:
            raise ValueError("ttl_s and size must be positive")
        self._ttl_s = ttl_s
        self._size = size
        self._totals: OrderedDict[tuple[str, int], tuple[float, int]] = OrderedDict()

    def get(self, playlist_id: str, version: int) -> int | None:
        """The total in milliseconds, when computed within ``ttl_s``; else ``None``."""
        found = self._totals.get((playlist_id, version))
        if found is None:
            return None
        if time.monotonic() >= found[0]:
            del self._totals[(playlist_id, version)]
            return None
        self._totals.move_to_end((playlist_id, version))
        return found[1]

    def put(self, playlist_id: str, version: int, total_ms: int) -> None:
        self._totals[(playlist_id, version)] = (time.monotonic() + self._ttl_s, total_ms)
        self._totals.move_to_end((playlist_id, version))
        while len(self._totals) > self._size:
            self._totals.popitem(last=False)
