"""The WebSocket transport: token expiry, malformed frames."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
import websockets

from chorus.auth import mint_token
from tests.e2e.conftest import Api
from tests.e2e.helpers import create_playlist, mutate
from tests.e2e.test_hostile_transport import _errors_counted
from tests.servers import TEST_SECRET, ChorusServer


async def test_the_socket_closes_when_its_token_expires(server: ChorusServer) -> None:
    token = mint_token(TEST_SECRET, "alice", ttl=timedelta(seconds=2))
    url = server.url.replace("http://", "ws://")
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4403, "token expired")


@pytest.mark.parametrize("subprotocols", [["graphql-ws"], ["graphql-ws", "other"], ["other"]])
async def test_a_socket_without_graphql_transport_ws_closes_with_4406(
    server: ChorusServer, subprotocols: list[str]
) -> None:
    url = server.url.replace("http://", "ws://")
    async with websockets.connect(url, subprotocols=subprotocols) as ws:  # type: ignore[arg-type]
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4406


async def _closed_after(server: ChorusServer, frames: list[str]) -> tuple[int, str]:
    url = server.url.replace("http://", "ws://")
    token = mint_token(TEST_SECRET, "alice")
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        for frame in frames:
            await ws.send(frame)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


@pytest.mark.parametrize("frame", ["[1]", "[1, 2]", "null", "5", '"s"', '{"type": 5}'])
async def test_json_that_is_not_a_message_closes_with_4400(
    server: ChorusServer, frame: str
) -> None:
    assert (await _closed_after(server, [frame]))[0] == 4400


@pytest.mark.parametrize(
    "payload",
    [{"query": 5}, {"query": None}, {"query": "subscription { __typename }", "variables": [1]}, 7],
)
async def test_a_subscribe_payload_without_a_string_query_closes_with_4400(
    server: ChorusServer, payload: object
) -> None:
    frame = json.dumps({"id": "1", "type": "subscribe", "payload": payload})
    assert (await _closed_after(server, [frame]))[0] == 4400
    # The server is none the worse: a new connection works.
    async with httpx.AsyncClient(timeout=5) as client:
        health = (await client.get(f"{server.base_url}/healthz")).json()
    assert health["status"] == "ok"


@pytest.mark.parametrize("operation_id", [5, None, "", "x" * 129, ["1"]])
async def test_a_subscribe_id_that_is_not_a_short_string_closes_with_4400(
    server: ChorusServer, operation_id: object
) -> None:
    frame = {"type": "subscribe", "payload": {"query": "subscription { __typename }"}}
    if operation_id is not None:
        frame["id"] = operation_id
    code, reason = await _closed_after(server, [json.dumps(frame)])
    assert code == 4400
    assert "string id" in reason


@pytest.mark.parametrize("name", ["nope", "\ud800"])
async def test_an_unknown_operation_name_is_a_bad_request_and_the_socket_stays(
    server: ChorusServer, name: str
) -> None:
    url = server.url.replace("http://", "ws://")
    token = mint_token(TEST_SECRET, "alice")
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        payload = {"query": "query X { __typename }", "operationName": name}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
        refused = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert refused["type"] == "error"
        assert refused["payload"][0]["extensions"]["code"] == "BAD_REQUEST"
        assert refused["payload"][0]["message"].startswith("Unknown operation named")
        # The connection goes on: the next operation runs.
        payload = {"query": "query X { __typename }", "operationName": "X"}
        await ws.send(json.dumps({"id": "2", "type": "subscribe", "payload": payload}))
        answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert (answer["id"], answer["type"]) == ("2", "next")
        assert answer["payload"]["data"] == {"__typename": "Query"}


async def test_each_query_on_a_socket_reads_afresh(server: ChorusServer, api: Api) -> None:
    # One context serves every operation of a socket: what one query loaded must not
    # answer the next (a header renamed in between), nor its history budget add up.
    pid = create_playlist(api, title="Before")
    url = server.url.replace("http://", "ws://")
    token = mint_token(TEST_SECRET, "alice")
    query = (
        "query($id: ID!) { playlist(id: $id) { title"
        " changes(sinceVersion: 0, first: 5) { versions { version } } } }"
    )
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"

        async def title(op: str) -> Any:
            payload = {"query": query, "variables": {"id": pid}}
            await ws.send(json.dumps({"id": op, "type": "subscribe", "payload": payload}))
            answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert (answer["id"], answer["type"]) == (op, "next"), answer
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "complete"
            return answer["payload"]["data"]["playlist"]

        assert (await title("1"))["title"] == "Before"
        mutate(api, "updatePlaylist", playlistId=pid, baseVersion=0, title="After")
        second = await title("2")
        assert second["title"] == "After"
        assert [v["version"] for v in second["changes"]["versions"]] == [1]


async def test_socket_refusals_are_counted_by_code(server: ChorusServer, api: Api) -> None:
    """``chorus_graphql_errors_total{code}`` counts a socket's refusals as HTTP's: a document
    over the size limit (refused by the socket before strawberry), a document that fails
    validation (strawberry's, through the error policy), one operation over the
    connection's limit; each error frame holds one error, counted once."""
    playlist = create_playlist(api)
    codes = ("GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED", "LIMIT_EXCEEDED")
    before = {code: _errors_counted(server, code) for code in codes}
    url = server.url.replace("http://", "ws://")
    token = mint_token(TEST_SECRET, "alice")
    watch = (
        "subscription W($id: ID!) "
        "{ playlistEvents(playlistId: $id, sinceVersion: 0) { __typename } }"
    )
    async with websockets.connect(  # type: ignore[list-item]
        url, subprotocols=["graphql-transport-ws"], max_size=2**22
    ) as ws:
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        assert json.loads(await ws.recv())["type"] == "connection_ack"

        async def refused(operation_id: str, payload: dict[str, Any]) -> str:
            await ws.send(json.dumps({"id": operation_id, "type": "subscribe", "payload": payload}))
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if frame.get("id") == operation_id and frame["type"] == "error":
                    [error] = frame["payload"]
                    code: str = error["extensions"]["code"]
                    return code

        long = "subscription { " + " " * 100_001 + "__typename }"
        assert await refused("long", {"query": long}) == "GRAPHQL_PARSE_FAILED"
        unknown = "subscription { noSuchField }"
        assert await refused("invalid", {"query": unknown}) == "GRAPHQL_VALIDATION_FAILED"
        for n in range(20):  # CHORUS_MAX_WS_OPERATIONS' default
            await ws.send(
                json.dumps(
                    {
                        "id": f"w{n}",
                        "type": "subscribe",
                        "payload": {"query": watch, "variables": {"id": playlist}},
                    }
                )
            )
        over = {"query": watch, "variables": {"id": playlist}}
        assert await refused("over", over) == "LIMIT_EXCEEDED"
    after = {code: _errors_counted(server, code) for code in codes}
    assert {code: after[code] - before[code] for code in codes} == dict.fromkeys(codes, 1.0)


async def test_a_field_error_over_a_socket_is_counted_once(server: ChorusServer, api: Api) -> None:
    """A query over the socket whose field fails (a cursor that is not one): its ``next``
    holds one error, and the counter of its code grows by one (strawberry keeps the
    result after the stream; the error is not counted again when the operation ends)."""
    playlist = create_playlist(api)
    url = server.url.replace("http://", "ws://")
    token = mint_token(TEST_SECRET, "alice")
    bad = 'query B($id: ID!) { playlist(id: $id) { entries(first: 2, after: "x") { totalCount } } }'
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        payload = {"query": bad, "variables": {"id": playlist}}
        for n in range(2):  # the document new, then kept
            before = _errors_counted(server, "BAD_USER_INPUT")
            await ws.send(json.dumps({"id": f"b{n}", "type": "subscribe", "payload": payload}))
            answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert (answer["id"], answer["type"]) == (f"b{n}", "next"), answer
            [error] = answer["payload"]["errors"]
            assert error["extensions"]["code"] == "BAD_USER_INPUT"
            complete = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert complete["type"] == "complete"
            assert _errors_counted(server, "BAD_USER_INPUT") == before + 1
