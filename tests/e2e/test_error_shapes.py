"""Request errors and field errors as the specifications shape them, from outside.

GraphQL §7.1.1: a request error (raised before execution begins) has no
``data`` entry; a field error keeps ``data`` (null when it reached the
root). GraphQL over HTTP: under ``application/graphql-response+json`` an
answer without ``data`` is 4xx, an executed one 200. ``graphql-transport-ws``:
``error`` is for an operation that could not run; an event whose field
errors nulled its ``data`` is a ``next`` and the stream goes on.

Every answer is asked of two servers, one with every fast path on (the
response cache, the field executor, introspection answers) and one with
every one off, and by text and as a persisted document: the same bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from chorus.auth import mint_token
from tests.deadlines import patience
from tests.e2e.conftest import Api, running_server
from tests.e2e.helpers import add, create_playlist, track
from tests.servers import TEST_SECRET, ChorusServer

GRAPHQL_RESPONSE = "application/graphql-response+json"
JSON = "application/json"
TIMEOUT_S = patience(20.0)

PLAIN = {
    "CHORUS_RESPONSE_CACHE": "false",
    "CHORUS_FAST_FIELD_EXECUTION": "false",
    "CHORUS_INTROSPECTION_ANSWERS": "false",
    "CHORUS_COMPILED_EXECUTION": "false",
}
"""Every fast path off: the plain twin."""

CREATE = """
mutation Create($vis: Visibility) {
  createPlaylist(input: {operationId: "never-committed", title: "t", visibility: $vis}) {
    playlist { id }
  }
}
"""
"""A nullable variable feeding a non-null input field: ``null`` fails inside execution."""

REQUEST_ERRORS: dict[str, dict[str, Any]] = {
    "variable that does not coerce": {
        "query": "query Q($id: ID!) { playlist(id: $id) { id } }",
        "variables": {"id": {"an": "object"}},
    },
    "missing variable": {"query": "query Q($id: ID!) { playlist(id: $id) { id } }"},
    "two anonymous operations": {"query": "{ viewer { user { id } } } { __typename }"},
    "parse error": {"query": "{ viewer { user { id } }"},
    "validation error": {"query": "{ viewer { nope } }"},
}

FIELD_ERRORS: dict[str, dict[str, Any]] = {
    "argument coerced inside execution": {"query": CREATE, "variables": {"vis": None}},
    "page size refused": {"query": "query P { viewer { playlists(first: -1) { totalCount } } }"},
}


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChorusServer, ChorusServer]]:
    """A server with every fast path on (the defaults) and its twin with every one off."""
    with (
        running_server("sqlite", tmp_path_factory) as fast,
        running_server("sqlite", tmp_path_factory, **PLAIN) as plain,
    ):
        yield fast, plain


def _post(
    server: ChorusServer, body: dict[str, Any], accept: str, user: str = "alice"
) -> httpx.Response:
    headers = {"Accept": accept, "Authorization": f"Bearer {mint_token(TEST_SECRET, user)}"}
    return httpx.post(server.url, json=body, headers=headers, timeout=TIMEOUT_S)


def _persisted(server: ChorusServer, body: dict[str, Any], accept: str) -> httpx.Response:
    """``body`` as an automatic persisted document: registered with its text, then by hash."""
    digest = hashlib.sha256(body["query"].encode()).hexdigest()
    extensions = {"persistedQuery": {"version": 1, "sha256Hash": digest}}
    _post(server, {**body, "extensions": extensions}, accept)
    by_hash = {k: v for k, v in body.items() if k != "query"}
    return _post(server, {**by_hash, "extensions": extensions}, accept)


def _answers(
    twins: tuple[ChorusServer, ChorusServer], body: dict[str, Any], accept: str
) -> httpx.Response:
    """The answer to ``body``, asserted the same on both twins, by text and by hash."""
    fast, plain = twins
    answers = [_post(fast, body, accept), _post(plain, body, accept)]
    if body["query"] != REQUEST_ERRORS["parse error"]["query"]:
        # A document that does not parse is never registered: by hash it is not found.
        answers += [_persisted(fast, body, accept), _persisted(plain, body, accept)]
    first = answers[0]
    for other in answers[1:]:
        assert (other.status_code, other.content) == (first.status_code, first.content)
    return first


@pytest.mark.parametrize("case", list(REQUEST_ERRORS))
def test_a_request_error_has_no_data_entry(
    twins: tuple[ChorusServer, ChorusServer], case: str
) -> None:
    for accept, status in ((JSON, 200), (GRAPHQL_RESPONSE, 400)):
        answer = _answers(twins, REQUEST_ERRORS[case], accept)
        body = answer.json()
        assert "data" not in body, body
        assert body["errors"], body
        assert all("path" not in e for e in body["errors"]), body
        assert answer.status_code == status, body
        assert answer.headers["content-type"] == accept


def test_an_argument_refused_inside_execution_is_a_field_error_with_data(
    twins: tuple[ChorusServer, ChorusServer],
) -> None:
    for accept in (JSON, GRAPHQL_RESPONSE):
        for case in FIELD_ERRORS.values():
            answer = _answers(twins, case, accept)
            body = answer.json()
            assert answer.status_code == 200, body
            assert "data" in body, body
            assert body["data"] is None, body
            assert body["errors"][0]["path"], body
    # Refused before anything committed.
    mine = {"query": "{ viewer { playlists { totalCount } } }"}
    for server in twins:
        failed = _post(server, FIELD_ERRORS["argument coerced inside execution"], JSON, "dora")
        assert failed.json()["errors"][0]["path"] == ["createPlaylist"], failed.text
        count = _post(server, mine, JSON, "dora").json()
        assert count["data"]["viewer"]["playlists"]["totalCount"] == 0, count


# --- graphql-transport-ws -------------------------------------------------------------------

BAD_CURSOR = """
subscription Events($playlistId: ID!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: 0) {
    ... on PlaylistChanged { version actor { playlists(first: 1, after: "bad") { totalCount } } }
  }
}
"""
"""An invalid cursor below the root: every event's ``data`` is nulled by a field error."""


@asynccontextmanager
async def _socket(server: ChorusServer, user: str) -> AsyncIterator[ClientConnection]:
    url = server.url.replace("http://", "ws://", 1)
    async with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        token = mint_token(TEST_SECRET, user)
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))["type"] == "connection_ack"
        yield ws


async def _receive(ws: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
    return message


async def _subscribe(ws: ClientConnection, op_id: str, query: str, **variables: Any) -> None:
    payload = {"query": query, "variables": variables}
    await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))


async def _field_errored_events(server: ChorusServer) -> list[dict[str, Any]]:
    """Three subscribers (two of one group, one another viewer's) over two versions.

    Asserts on the way that a stream that cannot start is an ``error`` message.
    """
    api = Api(server)
    try:
        pid = create_playlist(api, visibility="PUBLIC")
        add(api, pid, [track(1)], 0)
        async with _socket(server, "alice") as alice, _socket(server, "bob") as bob:
            await _subscribe(alice, "a1", BAD_CURSOR, playlistId=pid)
            await _subscribe(alice, "a2", BAD_CURSOR, playlistId=pid)
            await _subscribe(bob, "b1", BAD_CURSOR, playlistId=pid)
            first = [await _receive(alice), await _receive(alice), await _receive(bob)]
            add(api, pid, [track(2)], 1)  # live this time: the stream went on
            second = [await _receive(alice), await _receive(alice), await _receive(bob)]
            for ws, op_id in ((alice, "a1"), (alice, "a2"), (bob, "b1")):
                await ws.send(json.dumps({"id": op_id, "type": "complete"}))
            # A stream that cannot start is still the `error` message (no path).
            await _subscribe(alice, "x", BAD_CURSOR, playlistId="no-such-playlist")
            refused = await _receive(alice)
        assert (refused["id"], refused["type"]) == ("x", "error"), refused
        assert [e["extensions"]["code"] for e in refused["payload"]] == ["NOT_FOUND"]
        return first + second
    finally:
        api.http.close()


async def test_a_subscription_event_with_field_errors_is_a_next_and_the_stream_goes_on(
    twins: tuple[ChorusServer, ChorusServer],
) -> None:
    fast, plain = twins
    seen = sorted(await _field_errored_events(fast), key=lambda m: str(m["id"]))
    assert sorted(m["id"] for m in seen) == ["a1", "a1", "a2", "a2", "b1", "b1"]
    for message in seen:
        assert message["type"] == "next", message
        payload = message["payload"]
        assert payload["data"] is None, payload
        (error,) = payload["errors"]
        assert error["path"] == ["playlistEvents", "actor", "playlists"], error
        assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert sorted(await _field_errored_events(plain), key=lambda m: str(m["id"])) == seen


async def test_a_mutation_over_the_socket_with_a_field_error_is_a_next_then_complete(
    twins: tuple[ChorusServer, ChorusServer],
) -> None:
    frames = []
    for server in twins:
        async with _socket(server, "alice") as ws:
            await _subscribe(ws, "m", CREATE, vis=None)
            frames.append([await _receive(ws), await _receive(ws)])
    answer, done = frames[0]
    assert answer["type"] == "next", answer
    assert answer["payload"]["data"] is None
    assert answer["payload"]["errors"][0]["path"] == ["createPlaylist"]
    assert done == {"id": "m", "type": "complete"}
    assert frames[1] == frames[0]
