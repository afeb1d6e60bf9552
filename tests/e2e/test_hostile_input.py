"""Hostile input a second attacker's pass found, against a running ``chorus serve``.

Malformed HTTP the parser refuses, request bodies and frames that are not
standard JSON, ``subscribe`` payloads of the wrong shape, unauthenticated
mutations with malformed arguments, and ``Authorization`` spelled with tabs.
Raw sockets for the transport, httpx for HTTP, websockets for sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import Iterator

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from chorus.auth import mint_token
from chorus.graphql.guards.nesting import MAX_JSON_VALUES
from tests.e2e.conftest import running_server
from tests.e2e.helpers import mutation_document
from tests.e2e.raw import split_response
from tests.servers import TEST_SECRET, ChorusServer

GENERATED_ID = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(scope="module")
def chorus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    with running_server("sqlite", tmp_path_factory) as server:
        yield server


def _token() -> str:
    return mint_token(TEST_SECRET, "alice")


def _ws_url(server: ChorusServer) -> str:
    return server.url.replace("http://", "ws://")


def _healthy(server: ChorusServer) -> None:
    assert httpx.get(f"{server.base_url}/healthz", timeout=10).status_code == 200


# Malformed HTTP: the parser's refusal is a GraphQL-shaped 400 with a request id.


def _exchange(server: ChorusServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):  # the server closes after its refusal
            data += chunk
    return split_response(data)


_POST = b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "raw",
    [
        _POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\x01b\r\n\r\n",
        _POST + b"Content-Length: -1\r\n\r\n",
        _POST + b"Content-Length: 99999999999999999999\r\n\r\n",
        b"HELLO THERE\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello
        _POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
        _POST + b"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
        _POST + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX",
    ],
    ids=[
        "cl-and-te",
        "control-char",
        "cl-negative",
        "cl-20-digits",
        "garbage",
        "tls",
        "chunk-size-not-hex",
        "chunk-size-17-digits",
        "chunk-bad-terminator",
    ],
)
def test_malformed_http_is_a_json_400_with_a_request_id(chorus: ChorusServer, raw: bytes) -> None:
    status, headers, body = _exchange(chorus, raw)
    assert status == 400, body
    assert headers["content-type"] == "application/json"
    assert GENERATED_ID.fullmatch(headers["x-request-id"])
    assert headers["connection"] == "close"
    [error] = json.loads(body)["errors"]
    assert error["extensions"] == {"code": "BAD_REQUEST"}
    assert error["message"].startswith("the request is not valid HTTP/1.1")
    _healthy(chorus)


# Bodies and frames that Python decodes but standard JSON does not allow.

NOT_STANDARD = {
    "NaN": b'{"query": "{ __typename }", "variables": {"x": NaN}}',
    "Infinity": b'{"query": "{ __typename }", "variables": {"x": -Infinity}}',
    "1e999": b'{"query": "{ __typename }", "variables": {"x": 1e999}}',
    "UTF-16": '{"query": "{ __typename }"}'.encode("utf-16"),
    "UTF-16 without BOM": '{"query": "{ __typename }"}'.encode("utf-16-le"),
    "UTF-8 BOM": b'\xef\xbb\xbf{"query": "{ __typename }"}',
    "a key twice": b'{"query": "{ __typename }", "query": "mutation { x }"}',
    "large NaN": b'{"query": "{ __typename }", "variables": {"x": NaN, "pad": "'
    + b"p" * 4000
    + b'"}}',
}


@pytest.mark.parametrize("body", list(NOT_STANDARD.values()), ids=list(NOT_STANDARD))
def test_a_body_that_is_not_standard_json_is_a_400(chorus: ChorusServer, body: bytes) -> None:
    response = httpx.post(
        chorus.url,
        content=body,
        headers={"Authorization": f"Bearer {_token()}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 400, response.text
    [error] = response.json()["errors"]
    assert error["extensions"] == {"code": "BAD_REQUEST"}
    assert error["message"].startswith("the request body is not standard JSON"), error


@pytest.mark.parametrize("variables", ["NaN", '{"x": Infinity}', '{"x": 1e999}'])
def test_get_variables_that_are_not_standard_json_are_a_400(
    chorus: ChorusServer, variables: str
) -> None:
    response = httpx.get(
        chorus.url,
        params={"query": "{ __typename }", "variables": variables},
        headers={"Authorization": f"Bearer {_token()}", "Accept": "application/json"},
        timeout=10,
    )
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["extensions"] == {"code": "BAD_REQUEST"}


@pytest.mark.parametrize("items", [MAX_JSON_VALUES, 200_000], ids=["just-over", "1-MB"])
def test_a_body_of_too_many_values_is_a_400_without_a_token(
    chorus: ChorusServer, items: int
) -> None:
    """A 1 MB body of one-letter strings held /healthz for seconds while it was decoded."""
    body = json.dumps({"query": "{ __typename }", "variables": {"m": ["x"] * items}})
    response = httpx.post(
        chorus.url, content=body, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert response.status_code == 400, response.text
    [error] = response.json()["errors"]
    assert error["extensions"] == {"code": "BAD_REQUEST"}
    assert error["message"] == f"the request body holds more than {MAX_JSON_VALUES} JSON values"


def test_a_body_just_within_the_values_bound_is_answered(chorus: ChorusServer) -> None:
    # The body object, its query, its variables object and the list: 4 values.
    items = ["x"] * (MAX_JSON_VALUES - 4)
    body = {"query": "{ __typename }", "variables": {"m": items}}
    response = httpx.post(chorus.url, json=body, headers={"Authorization": f"Bearer {_token()}"})
    assert response.json()["data"] == {"__typename": "Query"}


async def test_a_frame_of_too_many_values_closes_with_4400(chorus: ChorusServer) -> None:
    async with websockets.connect(_ws_url(chorus), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await _init(ws, f"Bearer {_token()}")
        await ws.send(json.dumps({"type": "ping", "payload": {"m": [0] * 50_000}}))
        code, _ = await _closed_with(ws)
    assert code == 4400
    _healthy(chorus)


async def test_an_over_long_document_is_refused_on_the_socket_as_over_http(
    chorus: ChorusServer,
) -> None:
    query = "{ __typename }" + "#" * 100_000  # within the 1 MiB frame, over 100,000 characters
    async with websockets.connect(_ws_url(chorus), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await _init(ws, f"Bearer {_token()}")
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
        answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert (answer["id"], answer["type"]) == ("1", "error"), answer
    assert answer["payload"][0]["extensions"]["code"] == "GRAPHQL_PARSE_FAILED"
    assert "the limit is 100000" in answer["payload"][0]["message"]
    _healthy(chorus)


def test_standard_numbers_still_work(chorus: ChorusServer) -> None:
    response = httpx.post(
        chorus.url,
        json={"query": "{ __typename }", "variables": {"x": 1.5e308, "y": -0.0, "s": "NaN"}},
        headers={"Authorization": f"Bearer {_token()}"},
        timeout=10,
    )
    assert response.json()["data"] == {"__typename": "Query"}


async def _closed_with(ws: ClientConnection) -> tuple[int, str]:
    """The close code and reason, once the server closes ``ws`` (frames before it dropped)."""
    with contextlib.suppress(websockets.ConnectionClosed):
        for _ in range(10):
            await asyncio.wait_for(ws.recv(), 10)
    await asyncio.wait_for(ws.wait_closed(), 10)
    assert ws.close_code is not None, "the server did not close the socket"
    return ws.close_code, ws.close_reason or ""


async def _init(ws: ClientConnection, authorization: str) -> None:
    await ws.send(
        json.dumps({"type": "connection_init", "payload": {"Authorization": authorization}})
    )
    ack = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert ack["type"] == "connection_ack", ack


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "ping", "payload": {"x": NaN}}',
        '{"type": "ping", "payload": {"x": Infinity}}',
        '{"type": "ping", "payload": {"x": 1e999}}',
        '\ufeff{"type": "ping"}',
    ],
    ids=["NaN", "Infinity", "1e999", "BOM"],
)
async def test_a_frame_that_is_not_standard_json_closes_with_4400(
    chorus: ChorusServer, frame: str
) -> None:
    async with websockets.connect(_ws_url(chorus), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await _init(ws, f"Bearer {_token()}")
        await ws.send(frame)
        code, _ = await _closed_with(ws)
    assert code == 4400


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"variables": [1]}, "subscribe's variables must be a JSON object"),
        ({"variables": 0}, "subscribe's variables must be a JSON object"),
        ({"extensions": "x"}, "subscribe's extensions must be a JSON object"),
        ({"operationName": 7}, "subscribe's operationName must be a string"),
    ],
)
async def test_a_subscribe_payload_part_of_the_wrong_type_closes_with_its_reason(
    chorus: ChorusServer, extra: dict[str, object], reason: str
) -> None:
    async with websockets.connect(_ws_url(chorus), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await _init(ws, f"Bearer {_token()}")
        payload = {"query": 'subscription { playlistEvents(playlistId: "x") { __typename } }'}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {**payload, **extra}}))
        assert await _closed_with(ws) == (4400, reason)


# Authentication comes first; Authorization's white space.


@pytest.mark.parametrize("name", ["addEntries", "updatePlaylist", "deletePlaylist"])
@pytest.mark.parametrize("authorization", [None, "Bearer nonsense"])
def test_an_unauthenticated_mutation_with_a_malformed_id_is_unauthenticated(
    chorus: ChorusServer, name: str, authorization: str | None
) -> None:
    fields: dict[str, object] = {"playlistId": "x", "operationId": "op-1", "baseVersion": 0}
    if name == "addEntries":
        fields["mediaIds"] = ["m"]
    response = httpx.post(
        chorus.url,
        json={"query": mutation_document(name), "variables": {"input": fields}},
        headers={"Authorization": authorization} if authorization else {},
        timeout=10,
    )
    body = response.json()
    assert "data" not in body, body  # refused before validation: a request error
    assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAUTHENTICATED"]


@pytest.mark.parametrize("authorization", ["BEARER\t{t}", "bearer \t \t{t}", "BeArEr\t\t{t}"])
def test_tabs_and_any_case_in_authorization_are_accepted_over_http(
    chorus: ChorusServer, authorization: str
) -> None:
    # Around the value HTTP itself drops white space (httpx refuses to send it).
    response = httpx.post(
        chorus.url,
        json={"query": "{ viewer { user { id } } }"},
        headers={"Authorization": authorization.format(t=_token())},
        timeout=10,
    )
    assert response.json()["data"] == {"viewer": {"user": {"id": "alice"}}}


@pytest.mark.parametrize("authorization", ["BEARER\t{t}", "bearer \t {t}\t", "\tBearer\t\t{t}"])
async def test_tabs_and_any_case_in_connection_init_are_accepted(
    chorus: ChorusServer, authorization: str
) -> None:
    async with websockets.connect(_ws_url(chorus), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await _init(ws, authorization.format(t=_token()))
