"""Position keys: fractional strings that order a playlist's entries bytewise.

A key is a base-62 fraction written with the ASCII-ordered digits
``0-9A-Za-z``: ``"V"`` is 31/62, ``"V8"`` is 31/62 + 8/62². A key is never
empty and never ends in ``"0"``, so comparing two keys as byte strings gives
the same answer as comparing the fractions they denote (the idea of
fractional indexing; see Evan Wallace, "Realtime editing of ordered
sequences", Figma blog, 2017, and David Greenspan's ``fractional-indexing``).

Keys stay short by construction:

* :func:`allocate` places new keys in the gap between two neighbours. Appends
  and prepends step by one unit at a fixed length (at least
  :data:`STEP_LENGTH` digits) instead of halving the distance to the end, so
  10,000 appends stay at 3–4 digits. Inserts into an inner gap take the
  shortest length with room and spread evenly. When the keys would be longer
  than :data:`SOFT_MAX_LENGTH`, it returns ``None``.
* :func:`rebalance` then re-spreads a window of neighbours around the gap at
  :data:`REBALANCE_SPACING` units apart with keys of at most
  :data:`REBALANCE_MAX_LENGTH` digits; the caller widens the window until it
  succeeds, which it always does once the window is the whole list
  (10,100 keys fit in 5 digits). Only the window's entries are rewritten, and
  the rewrite is part of the version that triggered it.

So no key ever exceeds ``SOFT_MAX_LENGTH`` (20) ≤ :data:`MAX_LENGTH` (32).
Arithmetic is exact (Python integers), never floating point.
"""

from __future__ import annotations

from collections.abc import Sequence

DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BASE = len(DIGITS)
_VALUE = {ch: i for i, ch in enumerate(DIGITS)}

MAX_LENGTH = 32
"""The contract: no position key is ever longer than this (DESIGN §4)."""

SOFT_MAX_LENGTH = 20
"""An allocation that would need longer keys asks for a rebalance instead."""

STEP_LENGTH = 3
"""Appends and prepends step at this many digits at least (238,328 slots)."""

REBALANCE_MAX_LENGTH = 12
"""Rebalanced keys are at most this long, leaving room for later inserts."""

REBALANCE_SPACING = BASE * BASE
"""Minimum distance, in units of the chosen length, between rebalanced keys."""


def _scale(length: int) -> int:
    """``BASE**length``: the number of keys of at most ``length`` digits, plus one."""
    return int(BASE**length)


def is_valid(key: str) -> bool:
    """Whether ``key`` is a well-formed position key (1–32 digits, no trailing ``0``)."""
    return 0 < len(key) <= MAX_LENGTH and key[-1] != "0" and all(ch in _VALUE for ch in key)


def _floor(key: str | None, length: int) -> int:
    """The fraction ``key`` (``None`` = 0) scaled by ``BASE**length``, rounded down."""
    if key is None:
        return 0
    digits = key[:length].ljust(length, "0")
    value = 0
    for ch in digits:
        value = value * BASE + _VALUE[ch]
    return value


def _ceil(key: str | None, length: int) -> int:
    """The fraction ``key`` (``None`` = 1) scaled by ``BASE**length``, rounded up."""
    if key is None:
        return _scale(length)
    value = _floor(key, length)
    return value + 1 if len(key) > length else value


def _encode(value: int, length: int) -> str:
    """The key of ``value / BASE**length`` (``0 < value < BASE**length``)."""
    chars = []
    for _ in range(length):
        value, digit = divmod(value, BASE)
        chars.append(DIGITS[digit])
    return "".join(reversed(chars)).rstrip("0")


def _spread(low: int, high: int, count: int) -> list[int]:
    """``count`` integers strictly between ``low`` and ``high``, evenly spaced.

    Requires ``high - low > count``.
    """
    span = high - low
    return [low + (i + 1) * span // (count + 1) for i in range(count)]


def allocate(low: str | None, high: str | None, count: int) -> list[str] | None:
    """Keys for ``count`` new entries placed between two neighbours.

    Args:
        low: the key just before the gap, or ``None`` at the start of the list.
        high: the key just after the gap, or ``None`` at the end of the list.
            When both are given, ``low < high``.
        count: how many keys, ``>= 1``.

    Returns:
        ``count`` increasing keys strictly between ``low`` and ``high``, none
        longer than :data:`SOFT_MAX_LENGTH`; or ``None`` when the gap is too
        tight, and the caller must :func:`rebalance` a window around it.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    if low is not None and high is not None and not low < high:
        raise ValueError(f"empty gap: {low!r} !< {high!r}")
    if low is not None and high is None:
        # Appending: step one unit at a fixed length rather than halving the
        # distance to the end, so a long run of appends keeps its length.
        length = max(len(low), STEP_LENGTH)
        while length <= SOFT_MAX_LENGTH:
            base = _floor(low, length)
            if base + count < _scale(length):
                return [_encode(base + i, length) for i in range(1, count + 1)]
            length += 1
        return None
    if low is None and high is not None:
        length = max(len(high), STEP_LENGTH)
        while length <= SOFT_MAX_LENGTH:
            top = _ceil(high, length)
            if top - count > 0:
                return [_encode(top - i, length) for i in range(count, 0, -1)]
            length += 1
        return None
    for length in range(1, SOFT_MAX_LENGTH + 1):
        lo, hi = _floor(low, length), _ceil(high, length)
        if hi - lo > count:
            return [_encode(v, length) for v in _spread(lo, hi, count)]
    return None


def rebalance(low: str | None, high: str | None, count: int) -> list[str] | None:
    """Fresh, evenly spaced keys for a whole window of ``count`` entries.

    Args:
        low: the key of the live entry just before the window, or ``None``
            when the window starts the list.
        high: the key of the live entry just after the window, or ``None``
            when the window ends the list.
        count: entries in the window, the new ones included.

    Returns:
        ``count`` increasing keys strictly between ``low`` and ``high``, at
        least :data:`REBALANCE_SPACING` units apart at a length of at most
        :data:`REBALANCE_MAX_LENGTH`; or ``None`` when the window is too
        crowded and the caller must widen it.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    if low is not None and high is not None and not low < high:
        raise ValueError(f"empty window: {low!r} !< {high!r}")
    for length in range(1, REBALANCE_MAX_LENGTH + 1):
        lo, hi = _floor(low, length), _ceil(high, length)
        if (hi - lo) // (count + 1) >= REBALANCE_SPACING:
            return [_encode(v, length) for v in _spread(lo, hi, count)]
    return None


def max_length(keys: Sequence[str]) -> int:
    """The length of the longest key, 0 for none."""
    return max((len(k) for k in keys), default=0)
