"""Stopping background tasks for certain.

A single ``Task.cancel()`` is not always enough. On Python 3.11 a
cancellation that arrives just as an awaited operation completes can be
dropped: ``asyncio.wait_for`` does it (CPython gh-86296, fixed in 3.12), and
so, under uvloop, does redis-py's ``Connection.connect``. The task then runs
on, and whoever awaits it waits forever; a process that was told to stop hangs.
"""

from __future__ import annotations

import asyncio
from typing import Any

RECANCEL_S = 0.1
"""How long to wait for a cancelled task before cancelling it again (seconds)."""


async def cancel_and_wait(task: asyncio.Task[Any], *, recancel_s: float = RECANCEL_S) -> None:
    """Cancel ``task`` until it has ended, then return.

    The cancellation is repeated every ``recancel_s`` seconds while the task
    runs on, so a dropped one (see the module docstring) costs that long.

    Raises:
        Exception: what the task raised, if it ended with an error other than
            its cancellation.
        asyncio.CancelledError: the caller itself was cancelled (the task may
            still be running then).
    """
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=recancel_s)
    if not task.cancelled():
        task.result()
