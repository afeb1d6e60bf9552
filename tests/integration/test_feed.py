"""Follows and the feed in storage (issue 14), on SQLite and PostgreSQL.

The pipeline is the real one: the outbox relay publishes through the
:class:`~chorus.events.feed.FeedingPublisher` (the embedded profile's) into a
:class:`~chorus.events.feed.FeedSink`. Push and pull are compared on the same
history: a feed read with every target pulled (their stored fan-out set to
PULL for the read) against one with every target pushed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from chorus.db import feed
from chorus.db.engine import Database
from chorus.db.follows import FollowStore, follower_counts
from chorus.db.store import PlaylistStore
from chorus.db.switches import fan_outs
from chorus.db.tables import feed_item, follow_count, outbox
from chorus.domain.changes import PlaylistEvent
from chorus.domain.commands import CreatePlaylist, RemoveMember, SetMemberRole, UpdatePlaylist
from chorus.domain.errors import InvalidInput, LimitExceeded, NotFound
from chorus.domain.follows import FanOut, FeedItem, FeedLimits, Target, TargetKind
from chorus.domain.model import Role, Visibility
from chorus.events.feed import FeedingPublisher, FeedSink, FeedSwitcher
from chorus.events.relay import OutboxRelay
from chorus.subscriptions.bus import BusPublisher, InProcessBus
from chorus.subscriptions.feed import feed_stream, feeds_of
from chorus.subscriptions.hub import Hub
from tests.deadlines import patience
from tests.integration.store_helpers import ALICE, BOB, Editor, new_op

CAROL = "carol"
DAVE = "dave"
PUSH = FeedLimits(push_max_followers=1_000)


class Nowhere:
    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        return None


async def relay(database: Database, limits: FeedLimits) -> FeedSink:
    """Publish the whole outbox through the feed sink; the sink."""
    sink = FeedSink(database, limits)
    pipeline = OutboxRelay(database, FeedingPublisher(Nowhere(), sink))
    while await pipeline.drain_once():
        pass
    return sink


async def read_all(database: Database, viewer: str, limits: FeedLimits) -> list[FeedItem]:
    """The whole feed, two items a page, checking the pages follow one another."""
    items: list[FeedItem] = []
    before = None
    while True:
        page = await feed.read_feed(
            database, viewer, limits, now=datetime.now(UTC), before=before, size=2
        )
        items += page.items
        if not page.has_next:
            return items
        before = page.items[-1].sort_key


async def read_pulled(database: Database, viewer: str) -> list[FeedItem]:
    """The whole feed with every target read from the log: their fan-outs are PULL meanwhile."""
    async with database.write() as conn:
        saved = (await conn.execute(select(follow_count))).all()
        await conn.execute(update(follow_count).values(fan_out=FanOut.PULL))
    try:
        return await read_all(database, viewer, PUSH)
    finally:
        async with database.write() as conn:
            for row in saved:
                await conn.execute(
                    update(follow_count)
                    .where(
                        follow_count.c.target_kind == row.target_kind,
                        follow_count.c.target_id == row.target_id,
                    )
                    .values(fan_out=row.fan_out)
                )


def versions(items: list[FeedItem]) -> list[tuple[str, int]]:
    return [(i.playlist_id, i.version) for i in items]


async def create(store: PlaylistStore, visibility: Visibility = Visibility.PUBLIC) -> Editor:
    made = await store.create(CreatePlaylist(new_op(), "Mix", visibility=visibility), ALICE)
    return Editor(store, made.outcome.playlist_id)


PLAYLIST = TargetKind.PLAYLIST


async def test_push_and_pull_give_the_same_feed(database: Database, store: PlaylistStore) -> None:
    follows = FollowStore(database, PUSH)
    p1 = await create(store)
    await follows.follow(BOB, Target(PLAYLIST, p1.playlist_id))
    await p1.add("m1")
    await follows.follow(CAROL, Target(PLAYLIST, p1.playlist_id))
    await p1.add("m2")
    await p1.run(UpdatePlaylist, title="Renamed")
    await follows.follow(DAVE, Target(TargetKind.USER, ALICE))
    p2 = await create(store)
    p3 = await create(store, Visibility.PRIVATE)  # dave may not read it

    pulled = {u: await read_pulled(database, u) for u in (BOB, CAROL, DAVE)}
    sink = await relay(database, PUSH)
    assert sink.written == 3 + 2 + 2  # bob, carol, and dave's two creations (one PRIVATE)
    pushed = {u: await read_all(database, u, PUSH) for u in (BOB, CAROL, DAVE)}

    assert pushed == pulled
    assert versions(pushed[BOB]) == [(p1.playlist_id, v) for v in (3, 2, 1)]
    assert versions(pushed[CAROL]) == [(p1.playlist_id, v) for v in (3, 2)]
    assert versions(pushed[DAVE]) == [(p2.playlist_id, 0)]
    assert p3.playlist_id not in {i.playlist_id for i in pushed[DAVE]}
    assert [i.actor_id for i in pushed[BOB]] == [ALICE] * 3


async def test_the_sink_writes_each_row_once(database: Database, store: PlaylistStore) -> None:
    follows = FollowStore(database, PUSH)
    p1 = await create(store)
    await follows.follow(BOB, Target(PLAYLIST, p1.playlist_id))
    await p1.add("m1")
    await p1.add("m2")
    assert (await relay(database, PUSH)).written == 2
    # At least once: the relay hands the same versions again.
    async with database.write() as conn:
        await conn.execute(update(outbox).values(published_at=None))
    assert (await relay(database, PUSH)).written == 0
    async with database.read() as conn:
        assert await conn.scalar(select(func.count()).select_from(feed_item)) == 2


async def test_a_batch_nobody_follows_opens_no_write_transaction(
    database: Database, store: PlaylistStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    followed, alone = await create(store), await create(store)
    await FollowStore(database, PUSH).follow(BOB, Target(PLAYLIST, followed.playlist_id))
    await followed.add("m1")
    await alone.add("m1")

    async def events_of(editor: Editor) -> list[PlaylistEvent]:
        async with database.read() as conn:
            rows = await conn.execute(
                select(outbox.c.payload).where(
                    outbox.c.playlist_id == editor.playlist_id, outbox.c.version > 0
                )
            )
            return [r.payload for r in rows]

    sink = FeedSink(database, PUSH)
    writes = 0
    write = Database.write

    def counted(self: Database) -> object:
        nonlocal writes
        writes += 1
        return write(self)

    monkeypatch.setattr(Database, "write", counted)

    assert await sink.write(await events_of(alone)) == 0
    assert writes == 0  # one read of the follow counts, no transaction
    assert await sink.write(await events_of(followed)) == 1  # bob's row
    assert writes == 1


async def test_crossing_the_threshold_both_ways_loses_and_repeats_nothing(
    database: Database, store: PlaylistStore
) -> None:
    limits = FeedLimits(push_max_followers=2)
    follows = FollowStore(database, limits)
    p1 = await create(store)
    target = Target(PLAYLIST, p1.playlist_id)

    async def bob_rows() -> int:
        async with database.read() as conn:
            where = feed_item.c.follower_id == BOB
            return int(await conn.scalar(select(func.count()).select_from(feed_item).where(where)))

    await follows.follow(BOB, target)  # 1 follower: pushed
    await p1.add("e1")
    await relay(database, limits)
    await follows.follow(CAROL, target)  # 2: pulled from now on
    await p1.add("e2")
    assert (await relay(database, limits)).written == 0
    assert versions(await read_all(database, BOB, limits)) == [
        (p1.playlist_id, 2),
        (p1.playlist_id, 1),
    ]
    assert versions(await read_all(database, CAROL, limits)) == [(p1.playlist_id, 2)]
    await follows.unfollow(CAROL, target)  # back to 1: switching to push, still read pulled
    await p1.add("e3")
    await relay(database, limits)  # e3 is pushed already
    expected = [(p1.playlist_id, v) for v in (3, 2, 1)]
    assert await bob_rows() == 2  # e1 and e3; e2 is the switch's to backfill
    assert versions(await read_all(database, BOB, limits)) == expected
    switcher = FeedSwitcher(database, limits)
    while (batch := await switcher.run_once()) is not None:
        assert batch.target == target
    assert switcher.switched == 1
    assert await bob_rows() == 3  # e2 backfilled: all three are rows now
    async with database.read() as conn:
        assert await fan_outs(conn, [target], limits) == {target: FanOut.PUSH}
    assert versions(await read_all(database, BOB, limits)) == expected
    assert versions(await read_pulled(database, BOB)) == expected
    assert await read_all(database, CAROL, limits) == []


async def test_unfollow_and_lost_access_end_a_follows_effect(
    database: Database, store: PlaylistStore
) -> None:
    follows = FollowStore(database, PUSH)
    private = await create(store, Visibility.PRIVATE)
    target = Target(PLAYLIST, private.playlist_id)
    with pytest.raises(NotFound):
        await follows.follow(BOB, target)  # no read access
    await private.run(SetMemberRole, user_id=BOB, role=Role.VIEWER)
    await private.run(SetMemberRole, user_id=CAROL, role=Role.VIEWER)
    await follows.follow(BOB, target)
    await follows.follow(CAROL, target)
    await private.add("m1")
    await relay(database, PUSH)
    assert len(await read_all(database, BOB, PUSH)) == 1
    await private.run(RemoveMember, user_id=BOB)
    await relay(database, PUSH)
    assert await read_all(database, BOB, PUSH) == [] == await read_pulled(database, BOB)
    assert len(await read_all(database, CAROL, PUSH)) == 2  # m1, and bob's removal
    await follows.unfollow(CAROL, target)
    assert await read_all(database, CAROL, PUSH) == [] == await read_pulled(database, CAROL)


async def test_follows_are_idempotent_counted_and_bounded(
    database: Database, store: PlaylistStore
) -> None:
    follows = FollowStore(database, dataclasses.replace(PUSH, max_follows=2))
    p1 = await create(store)
    target = Target(PLAYLIST, p1.playlist_id)
    assert (await follows.follow(BOB, target)).changed
    assert not (await follows.follow(BOB, target)).changed
    await follows.follow(BOB, Target(TargetKind.USER, ALICE))
    with pytest.raises(LimitExceeded):
        await follows.follow(BOB, Target(TargetKind.USER, CAROL))
    with pytest.raises(InvalidInput, match="yourself"):
        await follows.follow(BOB, Target(TargetKind.USER, BOB))
    async with database.read() as conn:
        counts = await follower_counts(conn, [target, Target(TargetKind.USER, ALICE)])
    assert counts == {target: 1, Target(TargetKind.USER, ALICE): 1}
    assert (await follows.unfollow(BOB, target)).changed
    assert not (await follows.unfollow(BOB, target)).changed
    async with database.read() as conn:
        assert await follower_counts(conn, [target]) == {}


async def test_retention_hides_then_prunes_old_items(database: Database) -> None:
    old = datetime.now(UTC) - timedelta(days=40)
    ticks = iter(range(0, 100, 2))  # the playlist's commits: 0 s, 2 s, …
    store = PlaylistStore(database, clock=lambda: old + timedelta(seconds=next(ticks)))
    follows = FollowStore(database, PUSH, clock=lambda: old + timedelta(seconds=1))
    p1 = await create(store)
    await follows.follow(BOB, Target(PLAYLIST, p1.playlist_id))
    await p1.add("m1")
    assert (await relay(database, PUSH)).written == 1
    assert (
        await read_all(database, BOB, PUSH) == [] == await read_pulled(database, BOB)
    )  # past the 30 days
    assert await feed.prune_expired(database, PUSH, datetime.now(UTC)) == 1
    assert await feed.prune_expired(database, PUSH, datetime.now(UTC)) == 0


async def test_a_live_feed_joins_a_follow_it_is_told_of_and_leaves_nothing_behind(
    database: Database, store: PlaylistStore
) -> None:
    """A follow is heard when announced (no polling); the last subscription out stops it all."""
    bus = InProcessBus()
    hub = Hub(bus)
    follows = FollowStore(database, PUSH)
    p1 = await create(store)
    pipeline = OutboxRelay(database, BusPublisher(bus))
    while await pipeline.drain_once():  # version 0 is published before anyone listens
        pass
    stream = feed_stream(database, hub, BOB, PUSH)
    first = asyncio.ensure_future(anext(stream))
    try:
        deadline = asyncio.get_running_loop().time() + patience(20)  # 'started' or 'hung'
        while feeds_of(hub).subscription_count == 0:
            assert asyncio.get_running_loop().time() < deadline, "never started"
            await asyncio.sleep(0.02)
        await follows.follow(BOB, Target(PLAYLIST, p1.playlist_id))
        feeds_of(hub).follows_changed(BOB)  # what the follow resolver tells
        while bus.subscription_count == 0:
            assert asyncio.get_running_loop().time() < deadline, "never re-read its follows"
            await asyncio.sleep(0.02)
        await p1.add("m1")
        while await pipeline.drain_once():
            pass
        item = await asyncio.wait_for(first, 20)
        assert isinstance(item, FeedItem)
        assert (item.playlist_id, item.version) == (p1.playlist_id, 1)
    finally:
        first.cancel()
        await stream.aclose()
    assert bus.subscription_count == 0  # closing left the hub
    assert (feeds_of(hub).source_count, hub.stream_count) == (0, 0)
