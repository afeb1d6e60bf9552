"""The owner queue alone: bounds, each user's share, round-robin groups, answers, cancellation.

The commit is a fake that records each group and answers from a script; no database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from chorus.db.owners import OwnerQueues
from chorus.domain.errors import RateLimited


class Recorder:
    """A commit that holds each group until released, and answers each item with itself."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail: set[str] = set()

    async def __call__(self, playlist_id: str, group: Sequence[str]) -> list[str | BaseException]:
        self.groups.append([f"{playlist_id}:{item}" for item in group])
        await self.release.wait()
        return [ValueError(item) if item in self.fail else item for item in group]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_commands_that_wait_together_commit_together_one_per_user_in_turn() -> None:
    commit = Recorder()
    owners = OwnerQueues(commit, size=100, per_user=10, max_group=4)
    first = asyncio.create_task(owners.submit("p", "ann", "a0"))
    await settle()  # the owner took a0 alone and commits it; the rest queue behind
    rest = [
        asyncio.create_task(owners.submit("p", user, item))
        for user, item in [("ann", "a1"), ("ann", "a2"), ("ann", "a3"), ("bo", "b0"), ("cy", "c0")]
    ]
    other = asyncio.create_task(owners.submit("q", "ann", "x"))
    await settle()
    assert owners.waiting("p") == 5
    commit.release.set()
    assert await first == "a0"
    assert await asyncio.gather(*rest) == ["a1", "a2", "a3", "b0", "c0"]
    assert await other == "x"
    assert commit.groups == [
        ["p:a0"],
        ["q:x"],
        ["p:a1", "p:b0", "p:c0", "p:a2"],  # one per user in turn, at most max_group
        ["p:a3"],
    ]
    assert owners.waiting("p") == 0


async def test_a_group_is_bounded_by_weight_and_a_heavy_item_still_goes_alone() -> None:
    commit = Recorder()
    weights = {"batch": 10, "b1": 3}
    owners = OwnerQueues(
        commit, size=100, per_user=10, max_group=4, weight=lambda item: weights.get(item, 1)
    )
    first = asyncio.create_task(owners.submit("p", "ann", "a0"))
    await settle()
    rest = [
        asyncio.create_task(owners.submit("p", user, item))
        for user, item in [("ann", "batch"), ("bo", "b0"), ("bo", "b1"), ("cy", "c0")]
    ]
    await settle()
    commit.release.set()
    assert await first == "a0"
    assert await asyncio.gather(*rest) == ["batch", "b0", "b1", "c0"]
    assert commit.groups == [["p:a0"], ["p:batch"], ["p:b0", "p:c0"], ["p:b1"]]


async def test_a_full_queue_refuses_with_a_retry_hint_and_each_user_gets_a_share() -> None:
    commit = Recorder()
    owners = OwnerQueues(commit, size=5, per_user=2, max_group=10)
    busy = asyncio.create_task(owners.submit("p", "ann", "held"))
    await settle()
    queued = [
        asyncio.create_task(owners.submit("p", user, f"{user}{n}"))
        for user in ("ann", "bo")
        for n in range(2)
    ]
    await settle()
    # Ann already has her share waiting, Cy still gets in; then Dee finds the queue full.
    with pytest.raises(RateLimited, match="2 of your commands wait") as share:
        await owners.submit("p", "ann", "ann2")
    queued.append(asyncio.create_task(owners.submit("p", "cy", "cy0")))
    await settle()
    with pytest.raises(RateLimited, match="5 commands wait for this playlist") as full:
        await owners.submit("p", "dee", "dee0")
    for refused in (share.value, full.value):
        assert refused.retry_after_ms is not None
        assert refused.retry_after_ms >= 1
        assert f"retry in about {refused.retry_after_ms} ms" in refused.message
    # Another playlist has its own queue.
    elsewhere = asyncio.create_task(owners.submit("q", "cy", "cy0"))
    commit.release.set()
    assert await busy == "held"
    assert await asyncio.gather(*queued) == ["ann0", "ann1", "bo0", "bo1", "cy0"]
    assert await elsewhere == "cy0"
    # Room again once the group went.
    assert await owners.submit("p", "cy", "cy1") == "cy1"


async def test_each_command_gets_its_own_answer_and_a_cancelled_sender_changes_nothing() -> None:
    commit = Recorder()
    commit.fail = {"bad"}
    owners = OwnerQueues(commit, size=10, per_user=10, max_group=10)
    first = asyncio.create_task(owners.submit("p", "ann", "first"))
    await settle()
    good = asyncio.create_task(owners.submit("p", "ann", "good"))
    bad = asyncio.create_task(owners.submit("p", "ann", "bad"))
    gone = asyncio.create_task(owners.submit("p", "ann", "gone"))
    await settle()
    gone.cancel()  # its command stays in the group: it commits, nobody hears
    commit.release.set()
    assert await first == "first"
    assert await good == "good"
    with pytest.raises(ValueError, match="bad"):
        await bad
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert commit.groups == [["p:first"], ["p:good", "p:bad", "p:gone"]]


async def test_a_commit_that_raises_answers_every_command_of_its_group() -> None:
    async def broken(playlist_id: str, group: Sequence[str]) -> list[str | BaseException]:
        raise RuntimeError("bug in the commit")

    owners = OwnerQueues(broken, size=10, per_user=10, max_group=10)
    results = await asyncio.gather(
        *(owners.submit("p", "ann", str(n)) for n in range(3)), return_exceptions=True
    )
    assert [type(r) for r in results] == [RuntimeError] * 3
    assert owners.waiting("p") == 0


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        OwnerQueues(Recorder(), size=0, per_user=1, max_group=1)
