"""cancel_and_wait: a task that drops a cancellation still stops."""

from __future__ import annotations

import asyncio

import pytest

from chorus.resilience.tasks import cancel_and_wait


async def _drops_the_first_cancel(reached: asyncio.Event) -> None:
    try:
        reached.set()
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass  # what asyncio.wait_for on 3.11 or redis-py's connect can do
    await asyncio.sleep(3600)


async def test_a_task_that_drops_a_cancel_is_cancelled_again() -> None:
    reached = asyncio.Event()
    task = asyncio.create_task(_drops_the_first_cancel(reached))
    await reached.wait()
    async with asyncio.timeout(10):  # a hang guard, not a timing claim
        await cancel_and_wait(task)
    assert task.cancelled()


async def test_an_error_the_task_ended_with_is_raised() -> None:
    async def fails() -> None:
        raise LookupError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(LookupError, match="boom"):
        await cancel_and_wait(task)


async def test_a_finished_task_is_left_alone() -> None:
    task = asyncio.create_task(asyncio.sleep(0))
    await task
    await cancel_and_wait(task)
    assert not task.cancelled()
