"""The feed consumer of the full profile (issue 14): ``chorus feed`` in its own consumer group.

Versions go outbox → ``chorus relay`` → Kafka → ``chorus feed`` → feed rows,
all real processes on the machine's PostgreSQL and the session's Tansu. The
consumer is killed (SIGKILL) while versions keep coming and started again:
Kafka hands it what it had not committed, the sink writes each row once, and
the pushed feed equals the feed pulled from the log. The same process runs
the switch of a playlist back from pull to push.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, update

from chorus.db import feed
from chorus.db.engine import Database
from chorus.db.follows import FollowStore
from chorus.db.store import PlaylistStore
from chorus.db.tables import feed_item, follow_count
from chorus.domain.follows import FanOut, FeedItem, FeedLimits, Target, TargetKind
from tests.full.conftest import REDIS_URL
from tests.full.helpers import add, create_playlist, eventually, full_profile_env
from tests.servers import ChorusServer, TansuServer

PUSH = FeedLimits()
FOLLOWERS = ("bob", "carol", "dave")


@pytest.fixture
def workers(pg_url: str, tansu: TansuServer, tmp_path: Path) -> Iterator[dict[str, ChorusServer]]:
    env = full_profile_env(tansu.bootstrap_servers, REDIS_URL)
    running = {
        name: ChorusServer(pg_url, tmp_path, command=(name,), **env) for name in ("relay", "feed")
    }
    for server in running.values():
        server.start()
    yield running
    for server in running.values():
        server.stop()


async def rows(db: Database) -> int:
    async with db.read() as conn:
        return int(await conn.scalar(select(func.count()).select_from(feed_item)) or 0)


async def whole_feed(db: Database, user: str, limits: FeedLimits) -> list[FeedItem]:
    page = await feed.read_feed(db, user, limits, now=datetime.now(UTC), before=None, size=50)
    assert not page.has_next
    return page.items


async def test_a_killed_feed_consumer_restarts_without_losing_or_repeating_items(
    pg_database: Database, workers: dict[str, ChorusServer]
) -> None:
    store = PlaylistStore(pg_database)
    follows = FollowStore(pg_database, PUSH)
    playlist_id = await create_playlist(store)
    for user in FOLLOWERS:
        await follows.follow(user, Target(TargetKind.PLAYLIST, playlist_id))
    await add(store, playlist_id, 10)

    async def some_written() -> bool:
        return await rows(pg_database) > 0

    await eventually(some_written, what="the first feed rows")
    workers["feed"].kill()
    workers["feed"].stop()  # closes its log file before a new process opens it
    await add(store, playlist_id, 10)  # committed and relayed while no consumer runs
    await asyncio.sleep(0)
    workers["feed"].start()
    await add(store, playlist_id, 10)
    expected = len(FOLLOWERS) * 30

    async def all_written() -> bool:
        return await rows(pg_database) >= expected

    await eventually(all_written, timeout_s=60, what=f"{expected} feed rows")
    assert await rows(pg_database) == expected
    pushed = {user: await whole_feed(pg_database, user, PUSH) for user in FOLLOWERS}
    for user in FOLLOWERS:
        assert [i.version for i in pushed[user]] == list(range(30, 0, -1))
    # The same history read from the log: the playlist pulled, its rows gone.
    async with pg_database.write() as conn:
        await conn.execute(update(follow_count).values(fan_out=FanOut.PULL))
        await conn.execute(delete(feed_item))
    for user in FOLLOWERS:
        assert await whole_feed(pg_database, user, PUSH) == pushed[user]
    # An unfollow takes it below 90 % of the threshold: the feed worker's switcher
    # backfills the others' rows, and the feed is pushed again, unchanged.
    await follows.unfollow(FOLLOWERS[-1], Target(TargetKind.PLAYLIST, playlist_id))
    backfilled = (len(FOLLOWERS) - 1) * 30

    async def switched() -> bool:
        return await rows(pg_database) >= backfilled

    await eventually(switched, timeout_s=60, what=f"{backfilled} backfilled rows")
    for user in FOLLOWERS[:-1]:
        page = await feed.read_feed(
            pg_database, user, PUSH, now=datetime.now(UTC), before=None, size=50
        )
        assert (page.items, page.pulled_targets) == (pushed[user], 0)
