"""Multiplexed delivery over real WebSockets: one execution per version per group (docs/api.md).

Subscribers of one playlist with the same document, variables and
operation name share one execution of each version, unless what it read
depends on the viewer; ``/metrics`` counts the executions made
(``chorus_subscription_renders{result="made"}``), so each test can say how
many ran. Every stream still keeps its own guarantees: order, catch-up
after a reconnect, the slow socket, the member who loses access.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, committed, create_playlist, mutate, track
from tests.e2e.test_subscriptions import (
    SUBSCRIPTION,
    TIMEOUT_S,
    close_socket,
    open_socket,
    receive,
    settled,
)
from tests.servers import ChorusServer
from tests.switches import compiled_execution

VERSIONS_ONLY = """
subscription Versions($playlistId: ID!, $sinceVersion: Int!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: $sinceVersion) {
    ... on PlaylistChanged { version }
  }
}
"""

LIKED = """
subscription Liked($playlistId: ID!, $sinceVersion: Int!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: $sinceVersion) {
    ... on PlaylistChanged {
      version
      changes { ... on EntriesAdded { entries { mediaId media { id viewerHasLiked } } } }
    }
  }
}
"""

_SAMPLE = re.compile(r'^(chorus_subscription_\w+)(?:\{stat="(\w+)"\}|\{result="(\w+)"\})? (\S+)$')


def metrics(server: ChorusServer) -> dict[str, float]:
    """The delivery gauges of ``/metrics``: ``groups``, ``max``, ``made``, ``reused``."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=5).text
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            name, stat, result, value = match.groups()
            key = stat or result or name.removeprefix("chorus_subscription_")
            found[key] = float(value)
    return found


async def until(server: ChorusServer, check: Any) -> dict[str, float]:
    """Poll ``/metrics`` until ``check(metrics)`` holds."""
    deadline = time.monotonic() + patience(TIMEOUT_S)
    while True:
        found = await asyncio.to_thread(metrics, server)
        if check(found):
            return found
        assert time.monotonic() < deadline, f"metrics never matched: {found}"
        await asyncio.sleep(0.05)


async def subscribe(
    ws: ClientConnection, op_id: str, playlist_id: str, since: int, query: str = SUBSCRIPTION
) -> None:
    variables = {"playlistId": playlist_id, "sinceVersion": since}
    payload = {"query": query, "variables": variables}
    await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))


async def nexts(ws: ClientConnection, op_id: str, count: int) -> list[dict[str, Any]]:
    """The ``playlistEvents`` of the next ``count`` ``next`` messages, each of ``op_id``."""
    out = []
    for _ in range(count):
        message = await receive(ws)
        assert message["type"] == "next", message
        assert message["id"] == op_id
        out.append(message["payload"]["data"]["playlistEvents"])
    return out


async def sockets(server: ChorusServer, api: Api, users: list[str]) -> list[ClientConnection]:
    return list(await asyncio.gather(*(open_socket(server, api.token(u)) for u in users)))


async def close_all(wss: list[ClientConnection]) -> None:
    await asyncio.gather(*(close_socket(ws) for ws in wss))


async def test_subscribers_of_one_document_share_one_execution_per_version(
    server: ChorusServer, api: Api
) -> None:
    playlist_id = create_playlist(api, visibility="PUBLIC")
    users = [f"fan{n}" for n in range(12)]
    wss = await sockets(server, api, users)
    try:
        for n, ws in enumerate(wss):
            await subscribe(ws, f"op-{n}", playlist_id, 0)
        before = await until(server, lambda m: m.get("max", 0) >= 12)
        for v in range(3):
            add(api, playlist_id, [track(v + 1)], v)
        got = await asyncio.gather(*(nexts(ws, f"op-{n}", 3) for n, ws in enumerate(wss)))
        assert all([e["version"] for e in events] == [1, 2, 3] for events in got)
        assert all(events == got[0] for events in got)  # the same answer to everyone
        after = await asyncio.to_thread(metrics, server)
        # One execution per version for the 12 of them; 11 × 3 handed on.
        assert after["made"] - before["made"] == 3
        assert after["reused"] - before["reused"] == 33
    finally:
        await close_all(wss)
    await settled(server)


def planned(server: ChorusServer) -> dict[str, float]:
    """``chorus_graphql_planned_total`` summed over operation names, by ``served_by``."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=5).text
    found: dict[str, float] = {}
    for by, value in re.findall(
        r'^chorus_graphql_planned_total\{[^}]*served_by="(\w+)"\} (\S+)$', text, re.M
    ):
        found[by] = found.get(by, 0.0) + float(value)
    return found


async def test_a_group_executes_its_versions_by_plan_unless_plans_are_off(
    server: ChorusServer, api: Api
) -> None:
    """Each version a group executes is counted by how: by its plan (the run's default), or,
    in a run with ``CHORUS_COMPILED_EXECUTION=false`` (tests/switches.py), not at all."""
    playlist_id = create_playlist(api, visibility="PUBLIC")
    wss = await sockets(server, api, ["fan0", "fan1"])
    try:
        for n, ws in enumerate(wss):
            await subscribe(ws, f"op-{n}", playlist_id, 0)
        before = await asyncio.to_thread(planned, server)
        for v in range(2):
            add(api, playlist_id, [track(v + 1)], v)
        got = await asyncio.gather(*(nexts(ws, f"op-{n}", 2) for n, ws in enumerate(wss)))
        assert got[0] == got[1]
        after = await asyncio.to_thread(planned, server)
        if compiled_execution():
            assert after.get("plan", 0) - before.get("plan", 0) >= 2, after
            assert after.get("abandoned", 0) == before.get("abandoned", 0), after
        else:
            assert after == {}, after
    finally:
        await close_all(wss)
    await settled(server)


async def test_parked_subscribers_are_written_directly_and_see_the_same_bytes(
    server: ChorusServer, api: Api
) -> None:
    playlist_id = create_playlist(api, visibility="PUBLIC")
    users = [f"parked{n}" for n in range(8)]
    wss = await sockets(server, api, users)
    try:
        for n, ws in enumerate(wss):
            await subscribe(ws, f"op-{n}", playlist_id, 0)
        await until(server, lambda m: m.get("max", 0) >= 8)
        add(api, playlist_id, [track(1)], 0)
        got = await asyncio.gather(*(nexts(ws, f"op-{n}", 1) for n, ws in enumerate(wss)))
        before = await asyncio.to_thread(metrics, server)
        for v in (1, 2):
            # Every stream has sent the last version and parked: one leader
            # is woken per version, the hub writes the other seven sockets.
            add(api, playlist_id, [track(v + 1)], v)
            more = await asyncio.gather(*(nexts(ws, f"op-{n}", 1) for n, ws in enumerate(wss)))
            got = [old + new for old, new in zip(got, more, strict=True)]
        assert all([e["version"] for e in events] == [1, 2, 3] for events in got)
        assert all(events == got[0] for events in got)
        after = await asyncio.to_thread(metrics, server)
        assert after["direct"] - before["direct"] == 2 * 7
        assert after["made"] - before["made"] == 2
    finally:
        await close_all(wss)
    await settled(server)


async def test_different_documents_are_different_groups(server: ChorusServer, api: Api) -> None:
    playlist_id = create_playlist(api, visibility="PUBLIC")
    wss = await sockets(server, api, [f"doc{n}" for n in range(6)])
    try:
        for n, ws in enumerate(wss):
            await subscribe(ws, str(n), playlist_id, 0, SUBSCRIPTION if n % 2 else VERSIONS_ONLY)
        before = await until(server, lambda m: m.get("groups", 0) >= 2 and m["max"] >= 3)
        add(api, playlist_id, [track(9)], 0)
        got = await asyncio.gather(*(nexts(ws, str(n), 1) for n, ws in enumerate(wss)))
        for n, (event,) in enumerate(got):
            assert event["version"] == 1
            assert ("changes" in event) == bool(n % 2)  # each its own document's shape
        after = await asyncio.to_thread(metrics, server)
        assert after["made"] - before["made"] == 2
    finally:
        await close_all(wss)
    await settled(server)


async def test_a_viewer_dependent_field_is_executed_for_each_viewer(
    server: ChorusServer, api: Api
) -> None:
    liked = api.gql(
        "mutation L($input: LikeMediaInput!) { likeMedia(input: $input) { operationId } }",
        user="liker",
        input={"operationId": api.op(), "mediaId": track(7)},
    )
    assert "errors" not in liked, liked
    playlist_id = create_playlist(api, visibility="PUBLIC")
    users = ["liker", "other1", "other2"]
    wss = await sockets(server, api, users)
    try:
        for n, ws in enumerate(wss):
            await subscribe(ws, str(n), playlist_id, 0, LIKED)
        before = await until(server, lambda m: m.get("max", 0) >= 3)
        add(api, playlist_id, [track(7)], 0)
        got = await asyncio.gather(*(nexts(ws, str(n), 1) for n, ws in enumerate(wss)))
        flags = [e["changes"][0]["entries"][0]["media"]["viewerHasLiked"] for (e,) in got]
        assert flags == [True, False, False]
        after = await asyncio.to_thread(metrics, server)
        assert after["made"] - before["made"] == 3  # never shared: each viewer's own
    finally:
        await close_all(wss)
    await settled(server)


async def test_a_member_removed_from_a_group_ends_only_that_stream(
    server: ChorusServer, api: Api
) -> None:
    playlist_id = create_playlist(api)  # PRIVATE: members only
    members = ["m1", "m2", "m3", "m4"]
    for v, user in enumerate(members):
        committed(
            mutate(
                api,
                "setMemberRole",
                playlistId=playlist_id,
                baseVersion=v,
                userId=user,
                role="VIEWER",
            )
        )
    wss = await sockets(server, api, members)
    try:
        for n, ws in enumerate(wss):
            await subscribe(ws, f"s{n}", playlist_id, 4)
        await until(server, lambda m: m.get("max", 0) >= 4)
        committed(mutate(api, "removeMember", playlistId=playlist_id, baseVersion=4, userId="m2"))
        add(api, playlist_id, [track(1)], 5)
        removal = {"__typename": "MembersChanged", "user": {"id": "m2"}, "role": None}
        for n, ws in enumerate(wss):
            (event,) = await nexts(ws, f"s{n}", 1)
            assert (event["version"], event["changes"]) == (5, [removal])
        # m2: the error right after the version that removed it, and nothing more.
        ended = await receive(wss[1])
        assert (ended["type"], ended["id"]) == ("error", "s1")
        assert [e["extensions"]["code"] for e in ended["payload"]] == ["FORBIDDEN"]
        with_others = [ws for n, ws in enumerate(wss) if n != 1]
        for n, ws in zip((0, 2, 3), with_others, strict=True):
            (event,) = await nexts(ws, f"s{n}", 1)
            assert event["version"] == 6
        add(api, playlist_id, [track(2)], 6)
        for n, ws in zip((0, 2, 3), with_others, strict=True):
            (event,) = await nexts(ws, f"s{n}", 1)
            assert event["version"] == 7
        # m2's socket lives on and heard nothing of versions 6 and 7.
        await wss[1].send(json.dumps({"type": "ping"}))
        assert (await receive(wss[1]))["type"] == "pong"
    finally:
        await close_all(wss)
    await settled(server)


async def test_a_socket_that_does_not_read_delays_no_one_else_in_its_group(
    server: ChorusServer, api: Api
) -> None:
    playlist_id = create_playlist(api, visibility="PUBLIC")
    wss = await sockets(server, api, [f"q{n}" for n in range(5)])
    slow, quick = wss[0], wss[1:]
    try:
        for n, ws in enumerate(wss):
            await subscribe(ws, f"o{n}", playlist_id, 0)
        await until(server, lambda m: m.get("max", 0) >= 5)
        media = [track(n) for n in range(1, 101)]
        for v in range(20):  # 20 versions of 100 entries each: the slow socket reads none
            add(api, playlist_id, media, v)
        got = await asyncio.gather(*(nexts(ws, f"o{n + 1}", 20) for n, ws in enumerate(quick)))
        assert all([e["version"] for e in events] == list(range(1, 21)) for events in got)
        # Then the slow one reads: every version, in order, once.
        late = await nexts(slow, "o0", 20)
        assert [e["version"] for e in late] == list(range(1, 21))
        assert late == got[0]
    finally:
        await close_all(wss)
    await settled(server)


async def test_a_subscriber_that_reconnects_mid_stream_catches_up_then_rejoins_its_group(
    server: ChorusServer, api: Api
) -> None:
    playlist_id = create_playlist(api, visibility="PUBLIC")
    stay = await sockets(server, api, ["r1", "r2", "r3"])
    leaver = await open_socket(server, api.token("r4"))
    try:
        for n, ws in enumerate([*stay, leaver]):
            await subscribe(ws, f"x{n}", playlist_id, 0)
        await until(server, lambda m: m.get("max", 0) >= 4)
        add(api, playlist_id, [track(1)], 0)
        add(api, playlist_id, [track(2)], 1)
        first = await nexts(leaver, "x3", 2)
        await close_socket(leaver)
        add(api, playlist_id, [track(3)], 2)
        add(api, playlist_id, [track(4)], 3)
        leaver = await open_socket(server, api.token("r4"))
        await subscribe(leaver, "again", playlist_id, 2)
        caught_up = await nexts(leaver, "again", 2)  # from the log
        await until(server, lambda m: m.get("max", 0) >= 4)
        add(api, playlist_id, [track(5)], 4)
        (live,) = await nexts(leaver, "again", 1)
        for n, ws in enumerate(stay):
            assert await nexts(ws, f"x{n}", 5) == [*first, *caught_up, live]
        assert [e["version"] for e in [*first, *caught_up, live]] == [1, 2, 3, 4, 5]
    finally:
        await close_all([*stay, leaver])
    await settled(server)
