"""``feedEvents`` across two API processes of the full profile (issue 30, findings 2 and 5).

Edits go through the first process (``serve --with-workers``: relay, fanout
and feed consumer in it); the subscriber listens on the second, over the
test's own Redis.

* Events lost on the way (Redis killed and restarted while the second
  process could not hear, so fanout published into a Redis it was not
  subscribed to) are not lost silently: the subscriber gets each version or
  a ``FeedResyncRequired``.
* A follow made through the first process reaches a running feed on the
  second as a notice on the bus (no re-read of follows on a timer).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis

from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.e2e.test_library_feed import FEED_EVENTS, follow
from tests.e2e.test_subscriptions import receive, socket
from tests.full.helpers import eventually, full_profile_env
from tests.servers import ChorusServer, RedisServer, TansuServer


@pytest.fixture
def pair(
    pg_url: str, tansu: TansuServer, private_redis: RedisServer, tmp_path: Path
) -> Iterator[tuple[ChorusServer, ChorusServer]]:
    env = full_profile_env(tansu.bootstrap_servers, private_redis.url)
    writing = ChorusServer(pg_url, tmp_path, ("serve", "--with-workers"), **env)
    reading = ChorusServer(pg_url, tmp_path, **env)
    writing.start()  # migrates first
    reading.start()
    yield writing, reading
    reading.stop()
    writing.stop()


async def items_until(ws: Any, version: int) -> list[dict[str, Any]]:
    """What ``feedEvents`` sent, up to and including the item of ``version``."""
    got: list[dict[str, Any]] = []
    while True:
        message = await receive(ws)
        assert message["type"] == "next", message
        got.append(message["payload"]["data"]["feedEvents"])
        if got[-1].get("version") == version:
            return got


async def health(server: ChorusServer) -> dict[str, Any]:
    body: dict[str, Any] = (
        await asyncio.to_thread(httpx.get, f"{server.base_url}/healthz", timeout=5)
    ).json()
    return body


async def subscribed(reading: ChorusServer, ws: Any) -> None:
    """Subscribe ``feedEvents`` and wait until it stands in the reading process."""
    message = {"id": "feed", "type": "subscribe", "payload": {"query": FEED_EVENTS}}
    await ws.send(json.dumps(message))

    async def standing() -> bool:
        return (await health(reading))["feed_subscriptions"] == 1

    await eventually(standing, what="the feed subscription stood")


async def fanout_reached(url: str, version: int) -> bool:
    client = redis.Redis.from_url(url)
    try:
        keys = [k async for k in client.scan_iter(match="chorus:v2:playlist:*:fanout-version")]
        marks = [int(await client.get(k) or -1) for k in keys]
        return any(mark >= version for mark in marks)
    finally:
        await client.aclose()


async def test_a_feed_subscriber_gets_each_version_or_a_resync_after_events_were_lost(
    pair: tuple[ChorusServer, ChorusServer], private_redis: RedisServer
) -> None:
    writing, reading = pair
    writer, reader = Api(writing), Api(reading)
    try:
        playlist = create_playlist(writer, "own", "Followed", visibility="PUBLIC")
        assert follow(writer, "bob", "PLAYLIST", playlist)["changed"]
        async with socket(reading, reader.token("bob")) as ws:
            await subscribed(reading, ws)
            head = add(writer, playlist, [track(1)], 0, "own")["version"]
            assert [i["version"] for i in await items_until(ws, 1)] == [1]

            # The reading process hears nothing while Redis goes and comes back;
            # fanout publishes versions 2-6 into the new Redis meanwhile.
            os.kill(reading.process.pid, signal.SIGSTOP)
            try:
                private_redis.kill()
                private_redis.start()
                for n in range(2, 7):
                    head = add(writer, playlist, [track(n)], head, "own")["version"]
                await eventually(
                    lambda: fanout_reached(private_redis.url, 6),
                    timeout_s=60,
                    what="fanout published v6",
                )
            finally:
                os.kill(reading.process.pid, signal.SIGCONT)
            # The subscriber's process reconnects, reports the gap, and the feed checks.
            got = await items_until_resync_or(ws, 6)
            head = add(writer, playlist, [track(7)], head, "own")["version"]
            got += await items_until(ws, 7)
        versions = [i["version"] for i in got if i["__typename"] == "FeedItem"]
        resyncs = [i["reason"] for i in got if i["__typename"] == "FeedResyncRequired"]
        assert len(versions) == len(set(versions)), got  # never twice
        assert versions == [2, 3, 4, 5, 6, 7] or (resyncs == ["events lost"] and 7 in versions), got
    finally:
        writer.http.close()
        reader.http.close()


async def items_until_resync_or(ws: Any, version: int) -> list[dict[str, Any]]:
    """Items until a ``FeedResyncRequired`` or the item of ``version``."""
    got: list[dict[str, Any]] = []
    while not got or (
        got[-1]["__typename"] != "FeedResyncRequired" and got[-1].get("version") != version
    ):
        message = await receive(ws)
        assert message["type"] == "next", message
        got.append(message["payload"]["data"]["feedEvents"])
    return got


async def test_a_follow_through_one_process_reaches_a_feed_running_on_another(
    pair: tuple[ChorusServer, ChorusServer],
) -> None:
    writing, reading = pair
    writer, reader = Api(writing), Api(reading)
    try:
        playlist = create_playlist(writer, "own", "Later", visibility="PUBLIC")
        async with socket(reading, reader.token("cat")) as ws:
            await subscribed(reading, ws)
            assert follow(writer, "cat", "PLAYLIST", playlist)["changed"]

            async def joined() -> bool:
                return (await health(reading))["live_streams"] == 1

            await eventually(joined, what="the other process's feed joined the new follow")
            add(writer, playlist, [track(1)], 0, "own")
            assert [i["version"] for i in await items_until(ws, 1)] == [1]
    finally:
        writer.http.close()
        reader.http.close()
