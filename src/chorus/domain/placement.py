"""Where new or moved entries go: gaps between live neighbours, and rebalancing.

Reads only the anchor's neighbours, and on a crowded gap a window around it
(see :mod:`chorus.domain.positions`), through the
:class:`~chorus.domain.ports.PlaylistView` port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from chorus.domain import positions
from chorus.domain.changes import Move
from chorus.domain.commands import Placement
from chorus.domain.errors import AnchorNotFound, LimitExceeded
from chorus.domain.model import Entry
from chorus.domain.ports import PlaylistView
from chorus.domain.validation import anchor_field

REBALANCE_FIRST_WIDTH = 8
"""Entries taken on each side of a crowded gap by the first rebalance attempt."""


def _first(entries: Sequence[Entry]) -> Entry | None:
    return entries[0] if entries else None


async def gap(
    view: PlaylistView, placement: Placement, anchor: Entry | None, exclude: frozenset[str]
) -> tuple[Entry | None, Entry | None]:
    """The live neighbours ``(low, high)`` between which entries go."""
    if anchor is None:
        return _first(await view.live_before(None, 1, exclude)), None
    if not anchor.live:
        # The tombstone still knows where the anchor stood.
        low = _first(await view.live_before(anchor.sort_key, 1, exclude))
        high = _first(await view.live_after(anchor.sort_key, 1, exclude))
        return low, high
    if placement.after is not None:
        return anchor, _first(await view.live_after(anchor.sort_key, 1, exclude))
    return _first(await view.live_before(anchor.sort_key, 1, exclude)), anchor


async def place(
    view: PlaylistView,
    low: Entry | None,
    high: Entry | None,
    count: int,
    exclude: frozenset[str],
) -> tuple[list[str], tuple[Move, ...]]:
    """Keys for ``count`` entries between ``low`` and ``high``, and any rebalance moves."""
    keys = positions.allocate(
        low.position_key if low else None, high.position_key if high else None, count
    )
    if keys is not None:
        return keys, ()
    return await _rebalance(view, low, high, count, exclude)


async def _rebalance(
    view: PlaylistView,
    low: Entry | None,
    high: Entry | None,
    count: int,
    exclude: frozenset[str],
) -> tuple[list[str], tuple[Move, ...]]:
    """Re-spread a window of neighbours around a crowded gap, widening it as needed.

    Reads at most ``width + 1`` entries on each side per attempt; the width
    grows fourfold until :func:`positions.rebalance` finds room, which it does
    at the latest when the window is the whole list.
    """
    width = REBALANCE_FIRST_WIDTH
    while True:
        left = [low, *await view.live_before(low.sort_key, width, exclude)] if low else []
        right = [high, *await view.live_after(high.sort_key, width, exclude)] if high else []
        bound_low = left[width].position_key if len(left) > width else None
        bound_high = right[width].position_key if len(right) > width else None
        window_left = left[:width][::-1]
        window_right = right[:width]
        keys = positions.rebalance(
            bound_low, bound_high, len(window_left) + count + len(window_right)
        )
        if keys is not None:
            old = [*window_left, *window_right]
            new = keys[: len(window_left)] + keys[len(window_left) + count :]
            moves = tuple(
                Move(dataclasses.replace(e, position_key=k), e.position_key)
                for e, k in zip(old, new, strict=True)
                if k != e.position_key
            )
            return keys[len(window_left) : len(window_left) + count], moves
        if bound_low is None and bound_high is None:  # pragma: no cover - see positions
            raise LimitExceeded("the playlist has no room left for position keys")
        width *= 4


async def find_anchor(
    view: PlaylistView, placement: Placement, known: dict[str, Entry]
) -> Entry | None:
    """The anchor entry, live or tombstone; ``None`` for an append."""
    anchor_id = placement.anchor
    if anchor_id is None:
        return None
    anchor = known.get(anchor_id) or (await view.entries([anchor_id])).get(anchor_id)
    if anchor is None:
        raise AnchorNotFound(
            f"entry {anchor_id!r} is not in this playlist", field=(anchor_field(placement),)
        )
    return anchor
