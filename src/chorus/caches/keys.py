"""The Redis key space of the full profile.

Every process (API, fanout, cache projector) agrees on these names. Changing
one is a wire-format change: bump the ``v2`` in :data:`KEY_PREFIX` instead of
editing in place. The event path's pub/sub channel and dedupe mark
(:mod:`chorus.events.wire`) live under the same prefix.

Every name of a playlist carries its id as a Redis Cluster hash tag
(``chorus:v2:playlist:{<id>}:head``), so a playlist's keys and channels share
one slot and each Lua script touches one slot (docs/deploying.md, Redis
Cluster). ``v1`` names had no tag.
"""

from __future__ import annotations

import functools
from binascii import crc_hqx

KEY_PREFIX = "chorus:v2"

SLOTS = 16384
"""Hash slots of a Redis Cluster."""

GENERATION_KEY = f"{KEY_PREFIX}:generation"
"""``<run_id>:<random>``: the data set heads and snapshots were written to
(:mod:`chorus.caches.generation`), on a single Redis. A cluster has one per
slot (:func:`slot_generation_key`)."""

PLAYLIST_PATTERN = f"{KEY_PREFIX}:playlist:*"
"""A ``SCAN`` pattern of every playlist key (heads and snapshots among them)."""


def playlist_key(playlist_id: str, name: str) -> str:
    """The Redis name ``name`` of one playlist, e.g. ``chorus:v2:playlist:{<id>}:head``."""
    return f"{KEY_PREFIX}:playlist:{{{playlist_id}}}:{name}"


def head_key(playlist_id: str) -> str:
    """The newest version known committed (raised by API commits and the projector)."""
    return playlist_key(playlist_id, "head")


def snapshot_key(playlist_id: str) -> str:
    """The projected snapshot of a PUBLIC playlist: JSON with its ``version``."""
    return playlist_key(playlist_id, "snapshot")


def slot_of(tag: str) -> int:
    """The cluster slot of every name tagged ``{tag}`` (CRC16 mod 16384, as Redis computes it)."""
    return crc_hqx(tag.encode(), 0) % SLOTS


def playlist_slot(playlist_id: str) -> int:
    """The cluster slot of a playlist's keys and channels."""
    return slot_of(playlist_id)


_TAG_WIDTH = 16
_LOW = SLOTS - 1


@functools.cache
def _tag_rows() -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """CRC16 of ``"a" * 16``, and a reduced basis over GF(2) of what turning each ``a``
    into ``b`` does to its low 14 bits: ``(pivot bit, change, positions)``.

    With the length fixed, CRC16 is linear: the tag of a slot is found by
    solving for positions, not by searching.
    """
    base = b"a" * _TAG_WIDTH
    start = crc_hqx(base, 0)
    rows: list[tuple[int, int, int]] = []
    for i in range(_TAG_WIDTH):
        change = (crc_hqx(base[:i] + b"b" + base[i + 1 :], 0) ^ start) & _LOW
        positions = 1 << i
        for _, row, row_positions in rows:
            if change & row & -row:  # the row's pivot (its lowest bit) is set
                change, positions = change ^ row, positions ^ row_positions
        if change:
            pivot = change & -change
            rows = [(b, r ^ change, p ^ positions) if r & pivot else (b, r, p) for b, r, p in rows]
            rows.append((pivot, change, positions))
    return start & _LOW, tuple(rows)


def slot_tag(slot: int) -> str:
    """A 16-letter tag of ``a`` and ``b`` that hashes to ``slot``.

    Raises:
        ValueError: ``slot`` is not in ``0..16383``.
    """
    if not 0 <= slot < SLOTS:
        raise ValueError(f"a slot is in 0..{SLOTS - 1}, not {slot}")
    start, rows = _tag_rows()
    missing, positions = start ^ slot, 0
    for pivot, row, row_positions in rows:
        if missing & pivot:
            missing, positions = missing ^ row, positions ^ row_positions
    if missing:  # not reached: the 16 changes span the 14 bits (tests/unit/test_redis_keys.py)
        raise ValueError(f"no tag for slot {slot}")
    return "".join("b" if positions >> i & 1 else "a" for i in range(_TAG_WIDTH))


def slot_generation_key(slot: int) -> str:
    """The generation of one slot's heads and snapshots on a cluster, in that slot."""
    return f"{KEY_PREFIX}:generation:{{{slot_tag(slot)}}}"
