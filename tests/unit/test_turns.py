"""``graphql.loop_turns.share``: heavy steps past a turn's budget wait for a later turn."""

from __future__ import annotations

import asyncio

import pytest

from chorus.graphql.execution import loop_turns


async def test_steps_within_the_budget_run_in_the_same_turn() -> None:
    order: list[str] = []
    asyncio.get_running_loop().call_soon(order.append, "next turn")
    await loop_turns.share()
    order.append("first step")
    await loop_turns.share()
    order.append("second step")
    assert order == ["first step", "second step"]  # nothing waited


async def test_a_step_past_the_budget_waits_for_a_later_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(loop_turns.time, "perf_counter", lambda: clock[0])
    order: list[str] = []
    await loop_turns.share()  # the turn's first step: its budget starts now
    asyncio.get_running_loop().call_soon(order.append, "next turn")
    clock[0] += loop_turns.TURN_BUDGET_S  # the first step took the whole budget
    await loop_turns.share()
    order.append("second step")
    assert order == ["next turn", "second step"]


async def test_every_turn_runs_at_least_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each step takes twice the budget: one step a turn, and all of them run.
    clock = [0.0]
    monkeypatch.setattr(loop_turns.time, "perf_counter", lambda: clock[0])
    turn = [0]
    ran: list[tuple[str, int]] = []

    def tick() -> None:
        turn[0] += 1
        if turn[0] < 50:
            asyncio.get_running_loop().call_soon(tick)

    async def step(name: str) -> None:
        await loop_turns.share()
        ran.append((name, turn[0]))
        clock[0] += 2 * loop_turns.TURN_BUDGET_S

    await asyncio.sleep(0)  # a fresh turn
    tick()
    await asyncio.gather(*(step(f"s{i}") for i in range(4)))
    assert sorted(name for name, _ in ran) == ["s0", "s1", "s2", "s3"]
    assert len({t for _, t in ran}) == 4  # each in a turn of its own
