"""The owner queue of a running ``chorus serve`` (PostgreSQL), over HTTP.

The test holds the playlist's row lock from its own connection, so the owner's
group waits on it and the commands sent meanwhile wait in the queue, which is
bounded to 2 commands, 1 per user: a user's second waiting command and a
third user's command are refused ``RATE_LIMITED`` with ``retryAfterMs``; once
the lock goes, the waiting ones commit in queue order, each its own version,
and the refused ones commit on retry with the same operation id.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from chorus.auth import mint_token
from chorus.graphql.schema.common import ids
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import committed, create_playlist, mutate, track
from tests.servers import (
    TEST_SECRET,
    ChorusServer,
    create_database,
    drop_database,
    postgres_url,
)

WAIT_S = patience(30.0)
"""How long a state the test waits for may take before the test fails (never reached)."""
ADD = (
    "mutation Add($input: AddEntriesInput!) { addEntries(input: $input) { version replayed "
    "rebased userErrors { code message retryAfterMs } } }"
)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    name = create_database()
    yield name
    drop_database(name)


@pytest.fixture(scope="module")
def server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    chorus = ChorusServer(
        postgres_url(database),
        tmp_path_factory.mktemp("chorus-data"),
        CHORUS_OWNER_QUEUE_SIZE="2",
        CHORUS_OWNER_QUEUE_PER_USER="1",
    )
    chorus.start()
    yield chorus
    chorus.stop()


async def add(
    http: httpx.AsyncClient, server: ChorusServer, user: str, op: str, base: int
) -> dict[str, Any]:
    response = await http.post(
        server.url,
        json={
            "query": ADD,
            "variables": {
                "input": {
                    "playlistId": PLAYLIST[0],
                    "operationId": op,
                    "baseVersion": base,
                    "mediaIds": [track(1)],
                }
            },
        },
        headers={"Authorization": f"Bearer {mint_token(TEST_SECRET, user)}"},
        timeout=WAIT_S * 2,
    )
    assert response.status_code == 200, response.text
    payload: dict[str, Any] = response.json()["data"]["addEntries"]
    return payload


PLAYLIST: list[str] = []


async def until(what: str, check: Any) -> None:
    deadline = time.monotonic() + patience(WAIT_S)
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {WAIT_S:.0f} s")
        await asyncio.sleep(0.02)


def waiting_in_queues(server: ChorusServer) -> int:
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    match = re.search(r"^chorus_owner_queue_waiting ([\d.]+)$", text, re.MULTILINE)
    assert match, "the server exports chorus_owner_queue_waiting"
    return int(float(match.group(1)))


def waiting(server: ChorusServer, count: int) -> Any:
    """A check that ``count`` commands wait in the server's owner queues."""

    async def check() -> bool:
        return await asyncio.to_thread(lambda: waiting_in_queues(server) == count)

    return check


async def test_a_full_queue_refuses_each_user_beyond_their_share_then_all_commit_in_order(
    api: Api, server: ChorusServer, database: str
) -> None:
    pid = create_playlist(api, collaborative=True)
    PLAYLIST[:] = [pid]
    for user in ("bob", "carol"):
        committed(
            mutate(api, "setMemberRole", playlistId=pid, baseVersion=0, userId=user, role="EDITOR")
        )
    start = 2
    raw_id = ids.playlist_id(pid)
    lock = await asyncpg.connect(postgres_url(database, "postgresql"))
    async with httpx.AsyncClient() as http:
        try:
            held = lock.transaction()
            await held.start()
            await lock.execute("SELECT 1 FROM playlist WHERE id = $1 FOR UPDATE", raw_id)

            async def owner_blocked() -> bool:
                count = await lock.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
                    "AND wait_event_type = 'Lock'",
                    database,
                )
                return bool(count == 1)

            first = asyncio.create_task(add(http, server, "alice", "q-first", 0))
            await until("blocked on the row lock", owner_blocked)
            second = asyncio.create_task(add(http, server, "alice", "q-second", 0))
            await until("1 waiting", waiting(server, 1))

            share = await add(http, server, "alice", "q-share", 0)
            bob = asyncio.create_task(add(http, server, "bob", "q-bob", 0))
            await until("2 waiting", waiting(server, 2))
            full = await add(http, server, "carol", "q-full", 0)
        finally:
            await lock.close()  # the row lock goes with the connection
        for refused, why in ((share, "1 of your commands wait"), (full, "2 commands wait")):
            assert refused["version"] is None
            (error,) = refused["userErrors"]
            assert error["code"] == "RATE_LIMITED"
            assert why in error["message"]
            assert error["retryAfterMs"] >= 1
            assert f"retry in about {error['retryAfterMs']} ms" in error["message"]

        done = [await first, await second, await bob]
        assert [d["version"] for d in done] == [start + 1, start + 2, start + 3]
        assert all(d["rebased"] and not d["replayed"] and not d["userErrors"] for d in done)
        retried = [
            await add(http, server, "alice", "q-share", 0),
            await add(http, server, "carol", "q-full", 0),
        ]
        assert [r["version"] for r in retried] == [start + 4, start + 5]
        again = await add(http, server, "alice", "q-first", 0)
        assert (again["version"], again["replayed"]) == (start + 1, True)
    assert waiting_in_queues(server) == 0
