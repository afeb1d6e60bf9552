"""Presence rules (domain/presence.py) and this process's presence over the in-process store."""

from __future__ import annotations

import asyncio

from chorus.domain.presence import PresenceState, Session, UserPresence, by_user, listing
from chorus.subscriptions.presence import LocalPresenceStore, Presence

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
