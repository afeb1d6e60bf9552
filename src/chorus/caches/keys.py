"""The Redis key space of the full profile.

Every process (API, fanout, cache projector) agrees on these names. Changing
one is a wire-format change: bump the ``v1`` in :data:`KEY_PREFIX` instead of
editing in place. The event path's pub/sub channel and dedupe mark
(:mod:`chorus.events.wire`) live under the same prefix.
"""

from __future__ import annotations

KEY_PREFIX = "chorus:v1"

GENERATION_KEY = f"{KEY_PREFIX}:generation"
"""``<run_id>:<random>``: the data set heads and snapshots were written to
(:mod:`chorus.caches.generation`)."""

PLAYLIST_PATTERN = f"{KEY_PREFIX}:playlist:*"
"""A ``SCAN`` pattern of every playlist key (heads and snapshots among them)."""


def playlist_key(playlist_id: str, name: str) -> str:
    """The Redis name ``name`` of one playlist, e.g. ``chorus:v1:playlist:<id>:head``."""
    return f"{KEY_PREFIX}:playlist:{playlist_id}:{name}"


def head_key(playlist_id: str) -> str:
    """The newest version known committed (raised by API commits and the projector)."""
    return playlist_key(playlist_id, "head")


def snapshot_key(playlist_id: str) -> str:
    """The projected snapshot of a PUBLIC playlist: JSON with its ``version``."""
    return playlist_key(playlist_id, "snapshot")
