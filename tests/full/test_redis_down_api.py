"""Failure-table row "Redis down", through a served API process (``serve --with-workers``).

While Redis is away: reads answer from SQL (behind the circuit breaker, so
they do not wait on Redis each time), mutations commit, ``/readyz`` names
Redis. When it returns, the open subscription gets every version it missed,
once and in order, without reconnecting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.e2e.test_subscriptions import receive, socket, subscribe
from tests.full.helpers import full_profile_env
from tests.servers import ChorusServer, RedisServer, TansuServer

READ = "query($id: ID!) { playlist(id: $id) { version entries(first: 10) { totalCount } } }"


@pytest.fixture
def node(
    pg_url: str, tansu: TansuServer, private_redis: RedisServer, tmp_path: Path
) -> Iterator[ChorusServer]:
    env = full_profile_env(tansu.bootstrap_servers, private_redis.url)
    server = ChorusServer(pg_url, tmp_path, ("serve", "--with-workers"), **env)
    server.start()
    yield server
    server.stop()


def _readyz(server: ChorusServer) -> httpx.Response:
    return httpx.get(f"{server.base_url}/readyz", timeout=5)


def _timed(api: Api, query: str, **variables: object) -> tuple[dict[str, object], float]:
    started = time.monotonic()
    data = api.data(query, "bob", **variables)
    return data, time.monotonic() - started


async def test_redis_down_reads_and_mutations_work_and_streams_repair_after(
    node: ChorusServer, private_redis: RedisServer
) -> None:
    api = Api(node)
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        head = add(api, playlist_id, [track(1)], 0)["version"]
        async with socket(node, api.token("bob")) as ws:
            await subscribe(ws, "1", playlist_id, 0)
            assert (await receive(ws))["payload"]["data"]["playlistEvents"]["version"] == 1

            private_redis.kill()
            for n in range(2, 7):
                head = add(api, playlist_id, [track(n)], head)["version"]  # commits
            slowest = 0.0
            for _ in range(20):
                data, took = _timed(api, READ, id=playlist_id)
                assert data["playlist"] == {"version": head, "entries": {"totalCount": 6}}
                slowest = max(slowest, took)
            assert slowest < 5.0  # no read waits out Redis timeouts one after another
            ready = _readyz(node)
            assert ready.status_code == 503
            assert ready.json()["checks"]["redis"].startswith("down")

            private_redis.start()
            got = [await receive(ws) for _ in range(5)]
            versions = [m["payload"]["data"]["playlistEvents"]["version"] for m in got]
            assert versions == [2, 3, 4, 5, 6]
            head = add(api, playlist_id, [track(7)], head)["version"]
            assert (await receive(ws))["payload"]["data"]["playlistEvents"]["version"] == 7
            with pytest.raises(TimeoutError):  # and no duplicate follows
                await asyncio.wait_for(ws.recv(), 1.0)
        deadline = time.monotonic() + patience(10)
        while _readyz(node).status_code != 200:
            assert time.monotonic() < deadline, "/readyz did not recover"
            await asyncio.sleep(0.1)
    finally:
        api.http.close()
