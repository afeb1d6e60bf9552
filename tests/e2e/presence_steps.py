"""Presence scenarios over real sockets, shared by the embedded and the full profile tests.

Each scenario takes a running server (``CHORUS_PRESENCE_TTL_S`` short, see
:data:`TTL_S`) and its :class:`~tests.e2e.conftest.Api`, and checks what a
frontend sees: ``Playlist.presence`` over HTTP, ``playlistPresence`` over a
WebSocket, while other sockets subscribe to ``playlistEvents`` and close.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection

from tests.e2e.conftest import Api
from tests.e2e.helpers import create_playlist, mutate
from tests.e2e.test_subscriptions import close_socket, open_socket, receive, subscribe
from tests.servers import ChorusServer

TTL_S = 1.5
"""The servers' CHORUS_PRESENCE_TTL_S: a lost session goes within TTL_S * 4 / 3."""
ENV = {"CHORUS_PRESENCE_TTL_S": str(TTL_S)}

PRESENCE = """
query Presence($id: ID!) {
  playlist(id: $id) { presence { playlistId othersCount entries { user { id } state since } } }
}
"""

WATCH = """
subscription Watch($playlistId: ID!) {
  playlistPresence(playlistId: $playlistId) {
    __typename
    ... on PlaylistPresence { othersCount entries { user { id } state since } }
    ... on PresenceChanged { othersCount entries { user { id } state } left { id } }
  }
}
"""

SET = """
mutation Set($input: SetPresenceInput!) {
  setPresence(input: $input) { state expiresInSeconds userErrors { code message } }
}
"""


def shown(api: Api, playlist_id: str, user: str = "alice") -> tuple[dict[str, str], int]:
    """``Playlist.presence`` as ``user`` reads it: user id → state, and the others' count."""
    presence = api.data(PRESENCE, user, id=playlist_id)["playlist"]["presence"]
    return {e["user"]["id"]: e["state"] for e in presence["entries"]}, presence["othersCount"]


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> float:
    """Wait until ``check()`` holds; the seconds it took."""
    start = time.monotonic()
    while not await asyncio.to_thread(check):
        assert time.monotonic() - start < timeout_s, "not within the time allowed"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def viewing(server: ChorusServer, api: Api, user: str, playlist_id: str) -> ClientConnection:
    """A socket of ``user`` subscribed to ``playlistEvents`` (so: present)."""
    ws = await open_socket(server, api.token(user))
    await subscribe(ws, "events", playlist_id, 0)
    return ws


async def watch(server: ChorusServer, api: Api, user: str, playlist_id: str) -> ClientConnection:
    """A socket of ``user`` subscribed to ``playlistPresence``."""
    ws = await open_socket(server, api.token(user))
    message = {"query": WATCH, "variables": {"playlistId": playlist_id}}
    await ws.send(json.dumps({"id": "watch", "type": "subscribe", "payload": message}))
    return ws


async def next_presence(ws: ClientConnection) -> dict[str, Any]:
    message = await receive(ws)
    assert message["type"] == "next", message
    payload: dict[str, Any] = message["payload"]["data"]["playlistPresence"]
    return payload


def add_member(api: Api, playlist_id: str, user: str, role: str = "EDITOR") -> None:
    payload = mutate(
        api, "setMemberRole", "alice", playlistId=playlist_id, baseVersion=0, userId=user, role=role
    )
    assert payload["userErrors"] == [], payload


async def appears_and_disappears_with_the_socket(server: ChorusServer, api: Api) -> None:
    playlist_id = create_playlist(api, title="Presence")
    add_member(api, playlist_id, "bob")
    watcher = await watch(server, api, "bob", playlist_id)
    try:
        first = await next_presence(watcher)
        assert first == {"__typename": "PlaylistPresence", "othersCount": 0, "entries": []}
        ws = await viewing(server, api, "alice", playlist_id)
        joined = await next_presence(watcher)
        assert joined["__typename"] == "PresenceChanged"
        assert joined["entries"] == [{"user": {"id": "alice"}, "state": "VIEWING"}]
        assert shown(api, playlist_id, "bob") == ({"alice": "VIEWING"}, 0)

        # EDITING, declared by a mutation, is seen by the other subscriber.
        set_ = api.data(SET, "alice", input={"playlistId": playlist_id, "state": "EDITING"})
        assert set_["setPresence"] == {
            "state": "EDITING",
            "expiresInSeconds": TTL_S,
            "userErrors": [],
        }
        editing = await next_presence(watcher)
        assert editing["entries"] == [{"user": {"id": "alice"}, "state": "EDITING"}]
        # Not repeated: the declaration expires, the socket's VIEWING stays.
        back = await asyncio.wait_for(next_presence(watcher), TTL_S * 3)
        assert back["entries"] == [{"user": {"id": "alice"}, "state": "VIEWING"}]

        # Closed: gone at once, not after the TTL.
        closed_at = time.monotonic()
        await close_socket(ws)
        left = await next_presence(watcher)
        assert left["left"] == [{"id": "alice"}]
        assert left["entries"] == []
        assert time.monotonic() - closed_at < TTL_S
        assert shown(api, playlist_id, "bob") == ({}, 0)
    finally:
        await close_socket(watcher)


async def refused_to_non_readers(server: ChorusServer, api: Api) -> None:
    playlist_id = create_playlist(api, title="Private")
    ws = await viewing(server, api, "alice", playlist_id)
    try:
        await until(lambda: shown(api, playlist_id) == ({"alice": "VIEWING"}, 0))
        assert api.data(PRESENCE, "carol", id=playlist_id) == {"playlist": None}
        refused = api.data(SET, "carol", input={"playlistId": playlist_id, "state": "EDITING"})
        assert refused["setPresence"]["userErrors"][0]["code"] == "NOT_FOUND"
        watcher = await watch(server, api, "carol", playlist_id)
        try:
            error = await receive(watcher)
            assert error["type"] == "error", error
            assert error["payload"][0]["extensions"]["code"] == "NOT_FOUND"
        finally:
            await close_socket(watcher)
        assert shown(api, playlist_id) == ({"alice": "VIEWING"}, 0)  # carol never appeared
    finally:
        await close_socket(ws)


async def public_non_members_counted(server: ChorusServer, api: Api) -> None:
    playlist_id = create_playlist(api, title="Public", visibility="PUBLIC")
    sockets = [await viewing(server, api, u, playlist_id) for u in ("alice", "dave", "erin")]
    try:
        await until(lambda: shown(api, playlist_id, "dave") == ({"alice": "VIEWING"}, 2))
        watcher = await watch(server, api, "frank", playlist_id)
        try:
            first = await next_presence(watcher)
            assert first["othersCount"] == 2
            assert [e["user"]["id"] for e in first["entries"]] == ["alice"]
            await close_socket(sockets.pop())  # erin leaves: only the count moves
            counted = await next_presence(watcher)
            assert counted == {
                "__typename": "PresenceChanged",
                "othersCount": 1,
                "entries": [],
                "left": [],
            }
        finally:
            await close_socket(watcher)
    finally:
        for ws in sockets:
            await close_socket(ws)


async def access_loss_ends_the_watch(server: ChorusServer, api: Api) -> None:
    playlist_id = create_playlist(api, title="Leaving")
    add_member(api, playlist_id, "bob")
    watcher = await watch(server, api, "bob", playlist_id)
    try:
        await next_presence(watcher)
        removed = mutate(
            api, "removeMember", "alice", playlistId=playlist_id, baseVersion=1, userId="bob"
        )
        assert removed["userErrors"] == [], removed
        error = await receive(watcher)
        assert error["type"] == "error", error
        assert error["payload"][0]["extensions"]["code"] == "FORBIDDEN"
    finally:
        await close_socket(watcher)


SCENARIOS = [
    appears_and_disappears_with_the_socket,
    refused_to_non_readers,
    public_non_members_counted,
    access_loss_ends_the_watch,
]
