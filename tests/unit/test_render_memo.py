"""RenderMemo (subscriptions/delivery_groups.py): one rendering per version and audience."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from chorus.subscriptions.delivery_groups import Groups, RenderMemo


@dataclass
class Made:
    by: str
    shared: bool


class Maker:
    """Counts the renderings it made; each waits for ``gate`` so callers overlap."""

    def __init__(self, *, shared: bool) -> None:
        self.shared = shared
        self.made: list[str] = []
        self.gate = asyncio.Event()

    def for_viewer(self, viewer: str) -> Callable[[], Awaitable[Made]]:
        async def make() -> Made:
            self.made.append(viewer)
            await self.gate.wait()
            return Made(viewer, self.shared)

        return make


async def test_a_shared_rendering_is_made_once_for_every_concurrent_caller() -> None:
    memo, maker = RenderMemo(), Maker(shared=True)
    calls = [memo.render("g", 1, f"u{n}", maker.for_viewer(f"u{n}")) for n in range(50)]
    tasks = [asyncio.create_task(c) for c in calls]
    await asyncio.sleep(0)
    maker.gate.set()
    results = await asyncio.gather(*tasks)
    assert maker.made == ["u0"]
    assert {r.by for r in results} == {"u0"}
    assert (memo.renders, memo.reuses) == (1, 49)


async def test_a_viewer_dependent_rendering_is_made_per_viewer_and_reused_only_by_it() -> None:
    memo, maker = RenderMemo(), Maker(shared=False)
    maker.gate.set()
    first = await memo.render("g", 1, "alice", maker.for_viewer("alice"))
    bob = await memo.render("g", 1, "bob", maker.for_viewer("bob"))
    again = await memo.render("g", 1, "alice", maker.for_viewer("alice"))
    assert (first.by, bob.by, again.by) == ("alice", "bob", "alice")
    assert maker.made == ["alice", "bob"]


async def test_versions_and_groups_are_rendered_apart() -> None:
    memo, maker = RenderMemo(), Maker(shared=True)
    maker.gate.set()
    await memo.render("g", 1, "a", maker.for_viewer("a"))
    await memo.render("g", 2, "a", maker.for_viewer("a"))
    await memo.render("h", 1, "a", maker.for_viewer("a"))
    assert len(maker.made) == 3


async def test_a_failed_rendering_fails_its_maker_and_the_others_make_their_own() -> None:
    memo = RenderMemo()
    gate = asyncio.Event()

    async def fail() -> Made:
        await gate.wait()
        raise RuntimeError("catalog down")

    async def ok() -> Made:
        return Made("ok", True)

    failing = asyncio.create_task(memo.render("g", 1, "a", fail))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(memo.render("g", 1, "b", ok))
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(RuntimeError):
        await failing
    assert (await waiting).by == "ok"


async def test_a_rendering_older_than_its_ttl_is_made_again() -> None:
    memo, maker = RenderMemo(ttl_s=0.0), Maker(shared=True)
    maker.gate.set()
    await memo.render("g", 1, "a", maker.for_viewer("a"))
    await asyncio.sleep(0.01)
    await memo.render("g", 1, "b", maker.for_viewer("b"))
    assert maker.made == ["a", "b"]


def test_groups_count_their_subscriptions() -> None:
    groups = Groups()
    for key in ("a", "a", "a", "b"):
        groups.enter(key)
    assert (groups.count, groups.sizes) == (2, [3, 1])
    groups.leave("b")
    groups.leave("a")
    assert (groups.count, groups.sizes) == (1, [2])
