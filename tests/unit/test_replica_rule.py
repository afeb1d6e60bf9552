"""The replica rule's parts without a server: floors, where they come from, which replica."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from sqlalchemy.ext.asyncio import create_async_engine

from chorus.db.replicas import Floors, Replica, Replicas
from chorus.resilience.breaker import CircuitBreaker


def replicas(count: int = 2, *, max_floors: int = 100) -> Replicas:
    # Engines connect lazily: nothing here reaches a server.
    return Replicas(
        [
            Replica(
                create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{6000 + n}/x"),
                CircuitBreaker(failures=1, reset_s=60),
            )
            for n in range(count)
        ],
        max_floors=max_floors,
    )


def test_a_floor_only_rises_and_the_least_recent_is_forgotten() -> None:
    floors = Floors(max_playlists=2)
    floors.raise_to("a", 3)
    floors.raise_to("a", 1)
    assert floors.get("a") == 3
    floors.raise_to("b", 0)
    floors.raise_to("a", 4)  # a is the most recent now
    floors.raise_to("c", 7)
    assert (floors.get("a"), floors.get("b"), floors.get("c")) == (4, None, 7)


async def test_an_unknown_playlist_has_no_floor_so_the_primary_reads_it() -> None:
    known = replicas()
    assert await known.floors_of(["p"]) is None
    known.committed("p", 5)
    assert await known.floors_of(["p"]) == {"p": 5}
    # The client's minVersion raises the floor, never lowers it.
    assert await known.floors_of(["p"], min_version=9) == {"p": 9}
    assert await known.floors_of(["p"], min_version=2) == {"p": 5}
    assert await known.floors_of(["p", "q"]) is None  # one unknown: all on the primary


async def test_the_shared_registry_adds_floors_and_its_silence_means_the_primary() -> None:
    known = replicas()
    known.committed("p", 5)
    answers: list[Mapping[str, int] | None] = [{"p": 8, "q": 2}, None]

    async def shared(ids: Collection[str]) -> Mapping[str, int] | None:
        return answers.pop(0)

    known.consult(shared)
    assert await known.floors_of(["p", "q"]) == {"p": 8, "q": 2}
    assert await known.floors_of(["p"]) is None  # Redis did not answer


def test_replicas_take_turns_and_one_that_failed_is_skipped() -> None:
    known = replicas(2)
    first, second = known.members
    assert [known.pick(), known.pick(), known.pick()] == [first, second, first]
    second.breaker.record_failure()
    assert [known.pick(), known.pick()] == [first, first]
    first.breaker.record_failure()
    assert known.pick() is None
    assert first.name == "127.0.0.1:6000"
