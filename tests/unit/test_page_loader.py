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


async def test_a_paged_value_is_what_a_later_load_prime_or_clear_sees() -> None:
    """Kept as values, not futures: a later load gets the page's value with no batch call,
    a prime that does not force keeps it, one that forces replaces it, a clear forgets it."""
    batches = Batches()
    loader = PageLoader[str, str](batches.upper)
    assert await loader.load_page(["a", "b", "c", "d"]) == ["A", "B", "C", "D"]
    assert not loader.cache_map.cache_map  # no future per key yet

    assert await loader.load("a") == "A"
    loader.prime("b", "primed")
    assert await loader.load("b") == "B"
    loader.prime("c", "forced", force=True)
    assert await loader.load("c") == "forced"
    loader.clear("d")
    assert await loader.load("d") == "D"
    assert batches.calls == [["a", "b", "c", "d"], ["d"]]

    loader.clear_all()
    assert await loader.load_page(["a"]) == ["A"]
    assert batches.calls[-1] == ["a"]


async def test_a_key_primed_while_its_page_was_in_flight_keeps_its_value() -> None:
    batches = Batches()
    go = asyncio.Event()

    async def slow(keys: list[str]) -> list[str | ValueError]:
        await go.wait()
        return await batches.upper(keys)

    loader = PageLoader[str, str](slow)
    page = asyncio.ensure_future(loader.load_page(["a"]))
    await asyncio.sleep(0)  # the page's batch call is under way
    loader.prime("a", "primed")
    go.set()
    assert await page == ["A"]
    assert await loader.load_page(["a"]) == ["primed"]
    assert await loader.load("a") == "primed"
