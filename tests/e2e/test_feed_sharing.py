"""One user's ``feedEvents`` subscriptions against ``chorus serve`` (issue 30, finding 2).

However many subscriptions one viewer opens in a process, they share one
source: one hub membership per followed playlist, not one per subscription.
Their weight (subscriptions × follows) is bounded by
``CHORUS_FEED_LIVE_WEIGHT_MAX`` with a ``LIMIT_EXCEEDED`` refusal, and when
the sockets go, nothing of them stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.deadlines import patience
from tests.e2e.conftest import Api, running_server
from tests.e2e.helpers import add, create_playlist, track
from tests.e2e.test_library_feed import FEED_EVENTS, follow
from tests.e2e.test_subscriptions import receive, socket
from tests.servers import ChorusServer

FOLLOWED = 12
SUBSCRIPTIONS = 5  # 5 × 12 = 60, the weight allowed below


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    settings = {"CHORUS_FEED_LIVE_WEIGHT_MAX": str(SUBSCRIPTIONS * FOLLOWED)}
    with running_server("sqlite", tmp_path_factory, **settings) as chorus:
        yield chorus


def health(server: ChorusServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.base_url}/healthz", timeout=5).json()
    return body


async def until(server: ChorusServer, done: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + patience(30)  # tells 'done' from 'hung', not a speed
    while not done(body := await asyncio.to_thread(health, server)):
        assert time.monotonic() < deadline, f"{what}: {body}"
        await asyncio.sleep(0.05)
    return body


def feed_subscribe(op_id: str) -> str:
    return json.dumps({"id": op_id, "type": "subscribe", "payload": {"query": FEED_EVENTS}})


async def test_one_viewers_subscriptions_share_one_source_within_a_budget(
    api: Api, server: ChorusServer
) -> None:
    playlists = [
        create_playlist(api, "own", f"Shared {i}", visibility="PUBLIC") for i in range(FOLLOWED)
    ]
    for playlist in playlists:
        assert follow(api, "eve", "PLAYLIST", playlist)["changed"]
    before = await asyncio.to_thread(health, server)
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(socket(server, api.token("eve")))
        second = await stack.enter_async_context(socket(server, api.token("eve")))
        ids = {first: ["a1", "a2", "a3"], second: ["b1", "b2"]}
        for ws, ops in ids.items():
            for op in ops:
                await ws.send(feed_subscribe(op))
        # Every subscription stands (or, unshared, their memberships do).
        body = await until(
            server,
            lambda b: (
                # a source joins its memberships after its first subscription stands
                (
                    b.get("feed_subscriptions") == SUBSCRIPTIONS
                    and b["live_streams"] >= before["live_streams"] + FOLLOWED
                )
                or b["live_streams"] >= before["live_streams"] + SUBSCRIPTIONS * FOLLOWED
            ),
            "the subscriptions never stood",
        )
        assert body["live_streams"] == before["live_streams"] + FOLLOWED  # not 5 × 12
        assert body["feed_sources"] == before["feed_sources"] + 1

        add(api, playlists[3], [track(1)], 0, "own")
        for ws, ops in ids.items():
            got = {}
            for _ in ops:
                message = await receive(ws)
                assert message["type"] == "next", message
                got[message["id"]] = message["payload"]["data"]["feedEvents"]
            assert set(got) == set(ops)
            for item in got.values():
                assert (item["__typename"], item["version"]) == ("FeedItem", 1)
                assert item["playlist"]["id"] == playlists[3]

        await second.send(feed_subscribe("b3"))  # a sixth: 6 × 12 > 60
        refused = await receive(second)
        assert (refused["id"], refused["type"]) == ("b3", "error"), refused
        error = refused["payload"][0]
        assert error["extensions"]["code"] == "LIMIT_EXCEEDED"
        assert "60" in error["message"]
        with pytest.raises(TimeoutError):  # and each subscription had its item once
            await asyncio.wait_for(first.recv(), 0.5)
    after = await until(
        server,
        lambda b: b["live_streams"] == before["live_streams"] and b.get("feed_subscriptions") == 0,
        "the sockets went but their feed stayed",
    )
    assert after["feed_sources"] == 0
    assert after["bus_subscriptions"] == before["bus_subscriptions"]
