"""Presence on the full profile: sessions in Redis with a TTL, heard over Redis pub/sub.

The scenarios of :mod:`tests.e2e.presence_steps` run against ``serve
--with-workers`` on PostgreSQL, Redis and Kafka; then two API processes share
one Redis: a socket's presence made on one is seen on the other, and when its
process is killed (no leave is ever sent) the Redis TTL takes it away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis

from chorus.graphql.schema.common import ids
from chorus.subscriptions.redis_presence import presence_keys
from tests.e2e.conftest import Api
from tests.e2e.helpers import create_playlist
from tests.e2e.presence_steps import ENV, SCENARIOS, TTL_S, shown, until, viewing
from tests.full.conftest import REDIS_URL
from tests.full.helpers import full_profile_env
from tests.servers import ChorusServer, TansuServer

Scenario = Callable[[ChorusServer, Api], Coroutine[Any, Any, None]]


@pytest.fixture
def full_env(tansu: TansuServer) -> dict[str, str]:
    return {**full_profile_env(tansu.bootstrap_servers, REDIS_URL), **ENV}


@pytest.fixture
def node(pg_url: str, full_env: dict[str, str], tmp_path: Path) -> Iterator[ChorusServer]:
    server = ChorusServer(pg_url, tmp_path, ("serve", "--with-workers"), **full_env)
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_presence(node: ChorusServer, scenario: Scenario) -> None:
    api = Api(node)
    try:
        await scenario(node, api)
    finally:
        api.http.close()


async def test_a_killed_process_s_presence_ends_with_its_redis_ttl(
    node: ChorusServer, pg_url: str, full_env: dict[str, str], tmp_path: Path
) -> None:
    other = ChorusServer(pg_url, tmp_path / "other", **full_env)
    other.start()
    api = Api(node)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        playlist_id = create_playlist(api, title="Two processes")
        ws = await viewing(other, api, "alice", playlist_id)
        await until(lambda: shown(api, playlist_id) == ({"alice": "VIEWING"}, 0))
        key = presence_keys(ids.playlist_id(playlist_id))[0]
        assert 0 < await client.pttl(key) <= 2 * TTL_S * 1000  # the keys expire too

        # Held past its TTL by the heartbeat while the process lives.
        await asyncio.sleep(TTL_S * 2)
        assert shown(api, playlist_id) == ({"alice": "VIEWING"}, 0)

        other.kill()  # no leave is ever published
        killed_at = time.monotonic()
        ws.transport.abort()
        await ws.wait_closed()
        assert shown(api, playlist_id) == ({"alice": "VIEWING"}, 0)  # only Redis keeps it now
        await until(lambda: shown(api, playlist_id) == ({}, 0), timeout_s=TTL_S * 4)
        gone_after = time.monotonic() - killed_at
        assert gone_after <= TTL_S * 4 / 3 + 1.0, gone_after
        assert await client.zcard(key) == 0
    finally:
        api.http.close()
        other.stop()
        await client.aclose()
