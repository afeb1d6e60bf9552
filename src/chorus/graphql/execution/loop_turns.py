"""The event loop's turns, shared out among requests' heavy steps.

The loop runs every task that is ready before it next polls its sockets, so
one turn lasts as long as all of them together: eight requests whose
validation (a few ms to ~20 ms each) became ready at once, or the 24 pages of
one wide read that a single DataLoader batch woke together, held ``/healthz``
and every other connection for 100–150 ms (bench/hostile.py).

:func:`share` is awaited just before such a step. The first steps of a turn
run at once; once the steps of this turn have taken :data:`TURN_BUDGET_S`,
the next one waits for a later turn, so the loop polls (answers ``/healthz``,
reads other requests) in between. It costs no CPU and changes no result: a
step that waits runs the same code one turn later. The budget counts from
the turn's first step, and a turn always runs at least one.
"""

from __future__ import annotations

import asyncio
import time

TURN_BUDGET_S = 0.010
"""Seconds of heavy steps in one loop turn after which the next waits for a later turn."""


class _Turn:
    """When the current turn's first step started, on which loop (``None``: no step yet)."""

    __slots__ = ("loop", "started")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started: float | None = None

    def end(self) -> None:
        # Scheduled with call_soon by the turn's first step: it runs in the
        # next turn, before the steps that waited for it.
        self.started = None


_TURN = _Turn()


async def share() -> None:
    """Return at once while this turn has budget left, else once a later turn has.

    Await it right before a step of pure Python that may take milliseconds
    (validating a new document, completing a page of entries).
    """
    loop = asyncio.get_running_loop()
    turn = _TURN
    while True:
        now = time.perf_counter()
        if turn.started is None or turn.loop is not loop:
            # The first step of a turn (or of another loop: tests run several).
            turn.loop, turn.started = loop, now
            loop.call_soon(turn.end)
            return
        if now - turn.started < TURN_BUDGET_S:
            return
        await asyncio.sleep(0)


__all__ = ["TURN_BUDGET_S", "share"]
