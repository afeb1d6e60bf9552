"""``PageLoader.load_page``: ``load_many``'s answer, one batch call for what is not loaded yet."""

from __future__ import annotations

import asyncio

import pytest

from chorus.resolvers.loaders import PageLoader


class Batches:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def upper(self, keys: list[str]) -> list[str | ValueError]:
        self.calls.append(list(keys))
        return [ValueError(k) if k == "bad" else k.upper() for k in keys]


async def test_a_page_is_one_batch_call_and_is_remembered() -> None:
    batches = Batches()
    loader = PageLoader[str, str](batches.upper)

    assert await loader.load_page(["a", "b", "a", "c"]) == ["A", "B", "A", "C"]
    assert await loader.load_page(["c", "d"]) == ["C", "D"]
    assert await loader.load("b") == "B"

    assert batches.calls == [["a", "b", "c"], ["d"]]


async def test_a_page_answers_as_load_many_does() -> None:
    keys = ["x", "y", "x", "z"]
    assert await PageLoader[str, str](Batches().upper).load_page(keys) == await PageLoader[
        str, str
    ](Batches().upper).load_many(keys)


async def test_a_key_in_flight_is_awaited_as_load_many_awaits_it() -> None:
    batches = Batches()
    loader = PageLoader[str, str](batches.upper)
    pending = loader.load("a")  # batched on the next loop turn

    page = asyncio.ensure_future(loader.load_page(["a", "b"]))

    assert await page == ["A", "B"]
    assert await pending == "A"
    assert batches.calls == [["a", "b"]]  # one batch: the in-flight key's


async def test_an_error_for_one_key_fails_the_page_as_load_many_does() -> None:
    loader = PageLoader[str, str](Batches().upper)

    with pytest.raises(ValueError, match="bad"):
        await loader.load_page(["ok", "bad"])
    with pytest.raises(ValueError, match="bad"):
        await loader.load("bad")
