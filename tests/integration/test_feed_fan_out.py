"""The feed's push/pull switch at the default threshold, and a feed of 1,000 pulled targets
(issue 30, findings 3 and 4), on SQLite and PostgreSQL.

Followers are inserted in bulk (``follow`` rows and the count), as
``bench/feed.py`` does: 10,000 follows through the API would be the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, insert, select, update

from chorus.db import feed
from chorus.db.engine import Database
from chorus.db.follows import FollowStore, set_follower_count
from chorus.db.store import PlaylistStore
from chorus.db.switches import SwitchBatch, fan_outs
from chorus.db.tables import feed_item, follow, follow_count, playlist, playlist_mutation
from chorus.domain.commands import CreatePlaylist
from chorus.domain.follows import DEFAULT_FEED_LIMITS, FanOut, FeedLimits, Target, TargetKind
from chorus.domain.model import Visibility
from chorus.events.feed import FeedSwitcher
from tests.deadlines import patience
from tests.integration.store_helpers import ALICE, BOB, Editor, new_op
from tests.integration.test_feed import read_all, read_pulled, versions

LIMITS = DEFAULT_FEED_LIMITS  # push below 10,000 followers; back to push below 9,000
VERSIONS = 5  # of the followed playlist: its creation and four edits


def fan(i: int) -> str:
    return f"fan-{i:05d}"


async def followed_playlist(database: Database, store: PlaylistStore, followers: int) -> Target:
    """A PUBLIC playlist of :data:`VERSIONS` versions, followed since before them by
    ``followers`` (``fan-00000``, …)."""
    made = await store.create(CreatePlaylist(new_op(), "Hit", visibility=Visibility.PUBLIC), ALICE)
    editor = Editor(store, made.outcome.playlist_id)
    for i in range(1, VERSIONS):
        await editor.add(f"m{i}")
    target = Target(TargetKind.PLAYLIST, editor.playlist_id)
    since = datetime.now(UTC) - timedelta(hours=1)
    rows = [
        {
            "follower_id": fan(i),
            "target_kind": "PLAYLIST",
            "target_id": target.id,
            "created_at": since,
        }
        for i in range(followers)
    ]
    async with database.write() as conn:
        for start in range(0, len(rows), 2_000):
            await conn.execute(insert(follow), rows[start : start + 2_000])
        await set_follower_count(conn, target, followers)
    return target


async def feed_rows(database: Database) -> int:
    async with database.read() as conn:
        return int(await conn.scalar(select(func.count()).select_from(feed_item)) or 0)


async def fan_out(database: Database, target: Target) -> FanOut:
    async with database.read() as conn:
        return (await fan_outs(conn, [target], LIMITS))[target]


async def test_an_unfollow_at_the_threshold_writes_no_feed_row_and_flapping_costs_none(
    database: Database, store: PlaylistStore
) -> None:
    target = await followed_playlist(database, store, LIMITS.push_max_followers)
    follows = FollowStore(database, LIMITS)
    assert (await follows.unfollow(fan(0), target)).changed  # 9,999: below the threshold
    assert await feed_rows(database) == 0  # the request backfilled nothing
    assert await fan_out(database, target) is FanOut.PULL  # not below 9,000: still pulled
    for _ in range(3):  # an attacker following and unfollowing at the threshold
        await follows.follow(fan(0), target)
        await follows.unfollow(fan(0), target)
    assert await feed_rows(database) == 0
    page = await feed.read_feed(
        database, fan(1), LIMITS, now=datetime.now(UTC), before=None, size=20
    )
    assert [i.version for i in page.items] == list(reversed(range(VERSIONS)))
    assert page.pulled_targets == 1


class Recording(FeedSwitcher):
    """A switcher that keeps what each batch wrote."""

    def __init__(self, database: Database) -> None:
        super().__init__(database, LIMITS, poll_s=0.05)
        self.sizes: list[int] = []

    async def run_once(self) -> SwitchBatch | None:
        batch = await super().run_once()
        if batch is not None:
            self.sizes.append(batch.rows)
        return batch


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + patience(120)  # 'done' or 'stuck'
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.01)


async def test_the_switch_back_to_push_runs_in_batches_that_other_writes_pass(
    database: Database, store: PlaylistStore
) -> None:
    below = LIMITS.push_again_below
    target = await followed_playlist(database, store, below)
    async with database.write() as conn:  # it was pulled (it had 10,000 followers)
        await conn.execute(
            update(follow_count)
            .where(follow_count.c.target_id == target.id)
            .values(fan_out=FanOut.PULL)
        )
    follows = FollowStore(database, LIMITS)
    await follows.unfollow(fan(0), target)  # 8,999: below 9,000, switching back to push

    assert await feed_rows(database) == 0  # the unfollow's transaction wrote no feed row
    assert await fan_out(database, target) is FanOut.TO_PUSH
    expected = [(target.id, v) for v in reversed(range(VERSIONS))]
    assert versions(await read_all(database, fan(1), LIMITS)) == expected  # read pulled meanwhile

    switcher = Recording(database)
    task = asyncio.create_task(switcher.run())
    try:
        await until(lambda: switcher.batches >= 1, "the switch never began")
        # An unrelated user's writes, while the switch runs.
        for _ in range(3):
            started = switcher.batches
            own = await store.create(CreatePlaylist(new_op(), "Mine"), BOB)
            await Editor(store, own.outcome.playlist_id, actor=BOB).add("x")
            if not database.is_postgres:  # one writer: it waited for one batch at most
                assert switcher.batches - started <= 2  # one for the create, one for the add
        assert switcher.switched == 0  # committed while the switch is incomplete
        assert await fan_out(database, target) is FanOut.TO_PUSH
        await until(lambda: switcher.switched == 1, "the switch never finished")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    total = (below - 1) * VERSIONS
    assert sum(switcher.sizes) == total == await feed_rows(database)
    assert max(switcher.sizes) <= LIMITS.switch_batch_rows
    assert len(switcher.sizes) >= total // LIMITS.switch_batch_rows
    assert await fan_out(database, target) is FanOut.PUSH
    for viewer in (fan(1), fan(below - 1)):
        page = await feed.read_feed(
            database, viewer, LIMITS, now=datetime.now(UTC), before=None, size=20
        )
        assert page.pulled_targets == 0  # pushed rows alone
        assert versions(page.items) == expected == versions(await read_pulled(database, viewer))
    await follows.follow(fan(0), target)  # 9,000 again: stays pushed (pulled from 10,000)
    assert await fan_out(database, target) is FanOut.PUSH


async def test_a_follow_back_to_the_threshold_abandons_a_switch(
    database: Database, store: PlaylistStore
) -> None:
    limits = FeedLimits(push_max_followers=10, switch_batch_rows=1)
    target = await followed_playlist(database, store, 10)
    follows = FollowStore(database, limits)
    await follows.unfollow(fan(0), target)
    await follows.unfollow(fan(1), target)  # 8: below 9, switching
    switcher = FeedSwitcher(database, limits)
    batch = await switcher.run_once()
    assert batch is not None
    assert (batch.rows, batch.done) == (1, False)
    await follows.follow(fan(0), target)
    await follows.follow(fan(1), target)  # 10: pulled, the switch abandoned
    async with database.read() as conn:
        assert await fan_outs(conn, [target], limits) == {target: FanOut.PULL}
    assert await switcher.run_once() is None
    expected = [(target.id, v) for v in reversed(range(VERSIONS))]
    for viewer in (fan(2), fan(9)):  # fan-00000 follows anew: since after the versions
        assert versions(await read_all(database, viewer, limits)) == expected


async def clones(database: Database, original: str, count: int) -> list[str]:
    """``count`` copies of a playlist and its version 0, one second apart after it (in bulk)."""
    async with database.read() as conn:
        header = (await conn.execute(select(playlist).where(playlist.c.id == original))).one()
        created = (
            await conn.execute(
                select(playlist_mutation).where(playlist_mutation.c.playlist_id == original)
            )
        ).one()
    ids = [f"{original[:40]}-{i:04d}" for i in range(count)]
    at = [header.created_at + timedelta(seconds=i + 1) for i in range(count)]
    async with database.write() as conn:
        await conn.execute(
            insert(playlist),
            [
                {**header._asdict(), "id": pid, "created_at": t}
                for pid, t in zip(ids, at, strict=True)
            ],
        )
        await conn.execute(
            insert(playlist_mutation),
            [
                {
                    **created._asdict(),
                    "playlist_id": pid,
                    "operation_id": new_op(),
                    "committed_at": t,
                }
                for pid, t in zip(ids, at, strict=True)
            ],
        )
    return ids


async def test_a_feed_of_the_most_follows_all_pulled_reads(
    database: Database, store: PlaylistStore
) -> None:
    """1,000 followed playlists (``CHORUS_MAX_FOLLOWS_PER_USER``), each pulled (threshold 1)."""
    limits = FeedLimits(push_max_followers=1)
    made = await store.create(CreatePlaylist(new_op(), "P", visibility=Visibility.PUBLIC), ALICE)
    first = made.outcome.playlist_id
    followed = [first, *await clones(database, first, limits.max_follows - 1)]
    assert len(followed) == limits.max_follows == 1_000
    since = datetime.now(UTC) - timedelta(days=1)  # before every creation
    async with database.write() as conn:
        await conn.execute(
            insert(follow),
            [
                {
                    "follower_id": BOB,
                    "target_kind": "PLAYLIST",
                    "target_id": pid,
                    "created_at": since,
                }
                for pid in followed
            ],
        )
        await conn.execute(
            insert(follow_count),
            [
                {
                    "target_kind": "PLAYLIST",
                    "target_id": pid,
                    "follower_count": 1,
                    "fan_out": "PULL",
                }
                for pid in followed
            ],
        )
    newest_first = list(reversed(followed))
    before = None
    for page_number in range(2):
        page = await feed.read_feed(
            database, BOB, limits, now=datetime.now(UTC), before=before, size=50
        )
        assert page.pulled_targets == 1_000
        assert page.has_next
        assert versions(page.items) == [(pid, 0) for pid in newest_first[50 * page_number :][:50]]
        before = page.items[-1].sort_key


async def test_raising_the_threshold_keeps_a_pulled_feed(
    database: Database, store: PlaylistStore
) -> None:
    """Issue 30's fresh attacker pass, F3: a feed pulled at threshold 2 lost every
    item when the server restarted with the default threshold (the count alone
    said "pushed", and nothing had been pushed). The stored fan-out keeps it
    pulled until a follow or unfollow moves it, and then the switcher backfills."""
    low = FeedLimits(push_max_followers=2)
    made = await store.create(CreatePlaylist(new_op(), "Hit", visibility=Visibility.PUBLIC), ALICE)
    editor = Editor(store, made.outcome.playlist_id)
    target = Target(TargetKind.PLAYLIST, editor.playlist_id)
    for follower in (BOB, "carol"):
        await FollowStore(database, low).follow(follower, target)
    for i in range(3):
        await editor.add(f"m{i}")
    assert await fan_out(database, target) is FanOut.PULL
    assert await feed_rows(database) == 0  # nothing pushed while pulled
    seen = versions(await read_all(database, BOB, low))
    assert len(seen) == 3

    assert versions(await read_all(database, BOB, DEFAULT_FEED_LIMITS)) == seen  # restarted

    await FollowStore(database, DEFAULT_FEED_LIMITS).unfollow("carol", target)
    assert await fan_out(database, target) is FanOut.TO_PUSH
    assert versions(await read_all(database, BOB, DEFAULT_FEED_LIMITS)) == seen  # mid-switch
    switcher = FeedSwitcher(database, DEFAULT_FEED_LIMITS)
    while await switcher.run_once():
        pass
    assert await fan_out(database, target) is FanOut.PUSH
    assert versions(await read_all(database, BOB, DEFAULT_FEED_LIMITS)) == seen  # pushed
