"""Presence rules (domain/presence.py) and this process's presence over the in-process store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import pytest
from prometheus_client import REGISTRY

from chorus.domain.presence import PresenceState, Session, UserPresence, by_user, listing
from chorus.subscriptions.local_presence import LocalPresenceStore
from chorus.subscriptions.presence import Held, Presence
from tests.deadlines import patience

VIEWING, EDITING = PresenceState.VIEWING, PresenceState.EDITING


def test_editing_wins_and_since_is_the_earliest_in_that_state() -> None:
    found = by_user(
        [
            Session("ann", VIEWING, 1.0),
            Session("ann", EDITING, 5.0),
            Session("ann", EDITING, 3.0),
            Session("bob", VIEWING, 4.0),
            Session("bob", VIEWING, 2.0),
        ]
    )
    assert found == {
        "ann": UserPresence("ann", EDITING, 3.0),
        "bob": UserPresence("bob", VIEWING, 2.0),
    }


def test_members_are_listed_and_others_counted_only_when_public() -> None:
    present = by_user([Session(u, VIEWING, n) for n, u in enumerate(["ann", "x", "bob", "y"])])
    members = {"ann": "OWNER", "bob": "VIEWER"}
    public = listing(present, members, public=True)
    assert [p.user_id for p in public.entries] == ["ann", "bob"]
    assert public.others_count == 2
    assert listing(present, members, public=False).others_count == 0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_session_lives_while_held_and_a_declaration_until_its_ttl() -> None:
    clock = Clock()
    presence = Presence(LocalPresenceStore(clock), ttl_s=3.0)
    async with presence.hold("p", "ann"):
        await presence.declare("p", "bob", EDITING)
        assert {u: p.state for u, p in (await presence.current("p")).items()} == {
            "ann": VIEWING,
            "bob": EDITING,
        }
        clock.now = 2.0
        await presence.store.refresh([("p", s, x) for (_, s), x in presence._held.items()], 3.0)
        clock.now = 3.5  # the declaration was never repeated; the held session was refreshed
        assert set(await presence.current("p")) == {"ann"}
    assert await presence.current("p") == {}
    await presence.aclose()


async def test_a_watch_is_told_which_users_changed() -> None:
    presence = Presence(LocalPresenceStore(), ttl_s=30.0)
    async with presence.watch("p") as watch:
        assert watch.present() == {}
        async with presence.hold("p", "ann"):
            await asyncio.wait_for(watch.wakeup.wait(), 1)
            assert watch.take() == ({"ann"}, False)
            assert watch.of("ann") is not None
            watch.wakeup.clear()
            await presence.declare("p", "ann", EDITING)
            assert watch.take() == ({"ann"}, False)
            found = watch.of("ann")
            assert found is not None
            assert found.state is EDITING
        assert watch.of("ann") is not None  # the declaration stays after the socket
        await presence.declare("p", "ann", None)
        assert watch.of("ann") is None
    await presence.aclose()


async def until(condition: Callable[[], bool], bound_s: float = 30.0) -> None:
    """Wait for ``condition`` (checked every 20 ms), failing after ``bound_s`` seconds."""
    deadline = asyncio.get_running_loop().time() + patience(bound_s)
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_expired_declarations_are_forgotten_without_a_read() -> None:
    # Issue 30, finding 6: they stayed until their playlist's presence was read.
    store = LocalPresenceStore()
    presence = Presence(store, ttl_s=1.0)
    await presence.start()  # the heartbeat keeps the held session; nothing here reads
    async with presence.watch("p0") as watch, presence.hold("p1", "kept"):
        for n in range(10_000):
            await presence.declare(f"p{n % 100}", f"user{n}", EDITING)
        assert store.session_count == 10_001
        await until(lambda: store.session_count == 1)
        assert store.expiry_count == 1  # the held session's, and no other
        assert set(await presence.current("p1")) == {"kept"}
        # The watcher of p0 was told of each expiry as it happened (no sweep read).
        assert watch.present() == {}
        assert len(watch.take()[0]) == 100
    await presence.aclose()
    assert (store.session_count, store.expiry_count) == (0, 0)


async def test_a_session_put_again_moves_its_expiry_and_one_removed_is_dropped() -> None:
    store = LocalPresenceStore()
    told: list[tuple[str, str, Session | None]] = []
    store.on_change(lambda p, s, session: told.append((p, s, session)))
    ann = Session("ann", VIEWING, 1.0)
    await store.put("p", "a", ann, 0.5)
    await store.put("p", "b", Session("bob", VIEWING, 1.0), 0.5)
    await store.remove("p", "b", 0.5)
    for _ in range(3):  # put again while it lives: one heap entry, moved on each time
        await asyncio.sleep(0.2)
        await store.put("p", "a", ann, 0.5)
        assert store.expiry_count <= 2
    await until(lambda: store.session_count == 0 and store.expiry_count == 0)
    assert told[-1] == ("p", "a", None)
    assert [t for t in told if t[1] == "b"] == [("p", "b", told[1][2]), ("p", "b", None)]
    await store.aclose()


class CountingStore(LocalPresenceStore):
    """The in-process store, counting its write calls; ``failing``: every write raises."""

    def __init__(self, clock: Callable[[], float], *, failing: bool = False) -> None:
        super().__init__(clock)
        self.calls = 0
        self.removals: list[int] = []  # the sessions of each remove_many call
        self.failing = failing

    async def remove_many(self, ended: Sequence[tuple[str, str]], ttl_s: float) -> None:
        self.removals.append(len(ended))
        await super().remove_many(ended, ttl_s)

    async def put(self, playlist_id: str, session_id: str, session: Session, ttl_s: float) -> None:
        self.calls += 1
        if self.failing:
            raise ConnectionError("Too many connections")
        await super().put(playlist_id, session_id, session, ttl_s)

    async def refresh(self, held: Sequence[Held], ttl_s: float) -> None:
        self.calls += 1
        if self.failing:
            raise ConnectionError("Too many connections")
        for playlist_id, session_id, session in held:
            await super().put(playlist_id, session_id, session, ttl_s)


async def _burst(presence: Presence, n: int) -> None:
    """``n`` subscriptions hold the playlist at once; returns once all are inside."""
    inside = 0
    all_in, release = asyncio.Event(), asyncio.Event()

    async def subscriber(i: int) -> None:
        nonlocal inside
        async with presence.hold("p", f"user-{i}"):
            inside += 1
            if inside == n:
                all_in.set()
            await release.wait()

    tasks = [asyncio.create_task(subscriber(i)) for i in range(n)]
    await all_in.wait()
    assert len(await presence.store.read("p")) == (0 if _failing(presence) else n)
    release.set()
    await asyncio.gather(*tasks)


def _failing(presence: Presence) -> bool:
    store = presence.store
    return isinstance(store, CountingStore) and store.failing


async def test_a_burst_of_joins_is_written_in_a_few_store_calls() -> None:
    store = CountingStore(Clock())
    presence = Presence(store, ttl_s=30.0)
    await _burst(presence, 100)
    # One call for the first join, one for the 99 queued behind it: not one each
    # (the leaves are not counted: remove is not a write counted here).
    assert store.calls <= 2, store.calls
    await presence.aclose()


async def test_a_burst_of_leaves_is_removed_in_a_few_store_calls() -> None:
    store = CountingStore(Clock())
    presence = Presence(store, ttl_s=30.0)
    await _burst(presence, 100)  # all 100 leave in one loop turn
    assert sum(store.removals) == 100, store.removals
    assert len(store.removals) <= 2, store.removals  # not one call each
    assert await store.read("p") == {}
    await presence.aclose()


class StuckRemovals(CountingStore):
    """Removals that never return, until ``stuck`` is cleared."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.stuck = True

    async def remove_many(self, ended: Sequence[tuple[str, str]], ttl_s: float) -> None:
        if self.stuck:
            self.removals.append(len(ended))
            await asyncio.Event().wait()
        await super().remove_many(ended, ttl_s)


async def test_leaves_queued_behind_a_stuck_removal_are_removed_and_let_go_at_close() -> None:
    store = StuckRemovals(Clock())
    presence = Presence(store, ttl_s=30.0)
    left: list[str] = []

    async def subscriber(user: str, leave: asyncio.Event) -> None:
        async with presence.hold("p", user):
            await leave.wait()
        left.append(user)

    leaves = {u: asyncio.Event() for u in ("ann", "bob", "cy")}
    tasks = [asyncio.create_task(subscriber(u, e)) for u, e in leaves.items()]
    await until(lambda: store.session_count == 3)
    leaves["ann"].set()
    await until(lambda: store.removals == [1])  # stuck removing ann
    leaves["bob"].set()
    await until(lambda: len(presence._leaves.queued) == 1)  # bob queued behind it
    store.stuck = False
    await presence.aclose()  # cy still subscribed: removed with the queued and stuck ones
    async with asyncio.timeout(patience(10.0)):
        await asyncio.gather(*tasks[:2])
    assert sorted(left) == ["ann", "bob"]
    assert await store.read("p") == {}
    leaves["cy"].set()
    async with asyncio.timeout(patience(10.0)):
        await tasks[2]


async def test_a_failing_store_never_refuses_a_subscription_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = CountingStore(Clock(), failing=True)
    presence = Presence(store, ttl_s=30.0)
    lost_before = REGISTRY.get_sample_value("chorus_presence_writes_lost_total") or 0.0
    with caplog.at_level(logging.WARNING, logger="chorus.presence"):
        await _burst(presence, 20)  # every subscription got inside: none refused
    lost = (REGISTRY.get_sample_value("chorus_presence_writes_lost_total") or 0.0) - lost_before
    assert lost == 20  # every join (the leaves succeed: remove is not made to fail)
    warnings = [r for r in caplog.records if r.name == "chorus.presence"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    await presence.aclose()


class StuckStore(LocalPresenceStore):
    """The in-process store whose writes never return."""

    async def refresh(self, held: Sequence[Held], ttl_s: float) -> None:
        await asyncio.Event().wait()


async def test_joins_queued_behind_a_stuck_write_are_let_go_at_close() -> None:
    presence = Presence(StuckStore(Clock()), ttl_s=30.0)

    async def subscriber(user: str) -> None:
        async with presence.hold("p", user):
            pass

    tasks = [asyncio.create_task(subscriber("user-0"))]
    await until(lambda: presence._joins.writing is not None and not presence._joins.queued)
    tasks += [asyncio.create_task(subscriber(f"user-{i}")) for i in (1, 2)]
    await until(lambda: len(presence._joins.queued) == 2)  # queued behind it
    await presence.aclose()
    async with asyncio.timeout(patience(10.0)):
        await asyncio.gather(*tasks)
