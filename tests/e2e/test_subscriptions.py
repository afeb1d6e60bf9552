"""``playlistEvents`` over real WebSockets against ``chorus serve`` (DESIGN §6).

Two real clients speak ``graphql-transport-ws`` to the running server: the
Python ``gql`` client (``WebsocketsTransport``) and the reference JavaScript
client ``graphql-ws``, run by Node from ``tests/e2e/js/subscribe.mjs``. The
protocol edges (close codes, ping, operation limits, sockets killed without a
close frame) are driven with the bare ``websockets`` library, and
``/healthz`` shows that nothing is left behind.

The JavaScript client needs ``npm ci --prefix tests/e2e/js`` (``scripts/test``
runs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from gql import Client, GraphQLRequest
from gql.client import AsyncClientSession
from gql.transport.exceptions import TransportConnectionFailed, TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConcurrencyError, ConnectionClosed
from websockets.typing import Subprotocol

from chorus.graphql.websocket.handler import TWO_TOKENS
from chorus.resilience.tasks import cancel_and_wait
from chorus.settings import Settings
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, all_entries, committed, create_playlist, mutate, track, version
from tests.servers import TEST_SECRET, ChorusServer

JS_DIR = Path(__file__).parent / "js"
TIMEOUT_S = patience(20.0)
PROTOCOL = Subprotocol("graphql-transport-ws")

SUBSCRIPTION = """
subscription Events($playlistId: ID!, $sinceVersion: Int!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: $sinceVersion) {
    __typename
    ... on PlaylistChanged {
      playlistId version operationId actor { id } committedAt
      changes {
        __typename
        ... on EntriesAdded { entries { id positionKey mediaId } }
        ... on EntriesMoved { entries { id positionKey mediaId } }
        ... on EntriesRemoved { entryIds }
        ... on MembersChanged { user { id } role }
      }
    }
    ... on ResyncRequired { playlistId currentVersion reason }
  }
}
"""


def ws_url(server: ChorusServer) -> str:
    return server.url.replace("http://", "ws://", 1)


# --- what a subscriber keeps ----------------------------------------------------------


class Replica:
    """A client's copy of a playlist, built only from the events it received.

    It starts as the (empty) list at ``since`` and takes versions ``since + 1``,
    ``since + 2``, … strictly one after the other.
    """

    def __init__(self, since: int = 0) -> None:
        self.entries: dict[str, str] = {}
        self.versions: list[int] = []
        self.last = since

    def apply(self, event: dict[str, Any]) -> None:
        """Apply one ``playlistEvents`` value; versions must follow each other by 1."""
        assert event["__typename"] == "PlaylistChanged", event
        assert event["version"] == self.last + 1, (self.versions[-3:], event["version"])
        self.last = event["version"]
        self.versions.append(event["version"])
        for change in event["changes"]:
            kind = change["__typename"]
            if kind in ("EntriesAdded", "EntriesMoved"):
                self.entries.update({e["id"]: e["positionKey"] for e in change["entries"]})
            elif kind == "EntriesRemoved":
                for entry_id in change["entryIds"]:
                    del self.entries[entry_id]

    def order(self) -> list[tuple[str, str]]:
        return sorted(self.entries.items(), key=lambda kv: (kv[1], kv[0]))


def server_order(api: Api, playlist_id: str) -> list[tuple[str, str]]:
    return [(e["id"], e["positionKey"]) for e in all_entries(api, playlist_id)]


# --- the Python client: gql over graphql-transport-ws --------------------------------


@contextlib.asynccontextmanager
async def gql_session(server: ChorusServer, token: str | None) -> AsyncIterator[AsyncClientSession]:
    transport = WebsocketsTransport(
        url=ws_url(server),
        subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
        init_payload={"Authorization": f"Bearer {token}"} if token else {},
        # gql stops reading its socket once it starts closing. With websockets'
        # default flow control (max_queue=16) more than 16 events still in flight
        # would pause reading, the server's close frame would never be read and
        # every close would wait out close_timeout (10 s). See close_socket.
        connect_args={"max_queue": None},
    )
    async with Client(transport=transport) as session:
        yield session


class GqlSubscriber:
    """One ``playlistEvents`` subscription on a gql session, consumed by a task."""

    def __init__(self, session: AsyncClientSession, playlist_id: str, since: int) -> None:
        request = GraphQLRequest(
            SUBSCRIPTION, variable_values={"playlistId": playlist_id, "sinceVersion": since}
        )
        self.queue: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(session, request))

    async def _run(self, session: AsyncClientSession, request: GraphQLRequest) -> None:
        try:
            async for result in session.subscribe(request):
                self.queue.put_nowait(result["playlistEvents"])
        except Exception as error:
            self.queue.put_nowait(error)
            return
        self.queue.put_nowait(RuntimeError("the subscription completed"))

    async def take(self, count: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _ in range(count):
            item = await asyncio.wait_for(self.queue.get(), TIMEOUT_S)
            if isinstance(item, BaseException):
                raise AssertionError(f"failed after {len(out)} events: {item!r}") from item
            out.append(item)
        return out

    async def error(self) -> BaseException:
        item = await asyncio.wait_for(self.queue.get(), TIMEOUT_S)
        assert isinstance(item, BaseException), f"expected an error, got {item!r}"
        return item

    async def close(self) -> None:
        await cancel_and_wait(self.task)


# --- the reference JavaScript client: graphql-ws on Node -----------------------------


def node_client() -> list[str]:
    """The command that runs ``subscribe.mjs``; fails (never skips) when it cannot run."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js (node ≥ 20) is needed for the graphql-ws client tests")
    if not (JS_DIR / "node_modules" / "graphql-ws").is_dir():
        pytest.fail(
            "tests/e2e/js/node_modules is missing: run `npm ci --prefix tests/e2e/js` "
            "(scripts/test does) to install the graphql-ws client"
        )
    return [node, str(JS_DIR / "subscribe.mjs")]


class JsSubscriber:
    """``subscribe.mjs`` in a subprocess; each stdout line is one JSON object."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(
        cls,
        server: ChorusServer,
        token: str | None,
        playlist_id: str,
        since: int = 0,
        count: int = 1,
        retry_attempts: int = 0,
    ) -> JsSubscriber:
        args = ["--url", ws_url(server), "--playlist", playlist_id]
        args += [f"--since={since}", f"--count={count}", "--timeout-ms=30000"]
        args += [f"--retry-attempts={retry_attempts}"]
        if token is not None:
            args += ["--token", token]
        process = await asyncio.create_subprocess_exec(
            *node_client(),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT_S)
        if not raw:
            stderr = await self.stderr()
            raise AssertionError(f"graphql-ws client ended without output: {stderr}")
        line: dict[str, Any] = json.loads(raw)
        return line

    async def events(self, count: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _ in range(count):
            line = await self.line()
            assert "event" in line, (out, line)
            out.append(line["event"])
        return out

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode()

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), TIMEOUT_S)

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


# --- the bare protocol: websockets ---------------------------------------------------


async def open_socket(server: ChorusServer, token: str | None) -> ClientConnection:
    """A connection that sent ``connection_init`` with ``token`` and got its ack."""
    ws = await connect(ws_url(server), subprotocols=[PROTOCOL], open_timeout=TIMEOUT_S)
    try:
        payload = {"Authorization": f"Bearer {token}"} if token else {}
        await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        ack = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        assert ack["type"] == "connection_ack", ack
    except BaseException:
        ws.transport.abort()  # also when cancelled half-way: leave no socket open
        raise
    return ws


async def close_socket(ws: ClientConnection) -> None:
    """The closing handshake, reading (and dropping) what the server still sends.

    A client that stopped reading must keep doing so until the server's close
    frame arrives: once more than ``max_queue`` (16) messages wait unread,
    websockets pauses reading the socket, so it never sees that frame and
    ``close()`` only ends after ``close_timeout`` (10 s), as happens when a
    burst of events is in flight. Cancelled half-way, the connection is
    aborted: no socket is ever left open.
    """

    async def drain() -> None:
        with contextlib.suppress(ConnectionClosed, ConcurrencyError):
            while True:
                await ws.recv()

    reader = asyncio.create_task(drain())
    try:
        await ws.close()
    except BaseException:
        ws.transport.abort()
        raise
    finally:
        reader.cancel()  # it already ended, unless close() failed
        await asyncio.wait({reader})


@contextlib.asynccontextmanager
async def socket(server: ChorusServer, token: str) -> AsyncIterator[ClientConnection]:
    """:func:`open_socket`, closed on the way out whatever happens."""
    ws = await open_socket(server, token)
    try:
        yield ws
    finally:
        await close_socket(ws)


async def subscribe(ws: ClientConnection, op_id: str, playlist_id: str, since: int) -> None:
    variables = {"playlistId": playlist_id, "sinceVersion": since}
    message = {"id": op_id, "type": "subscribe"}
    message["payload"] = {"query": SUBSCRIPTION, "variables": variables}  # type: ignore[assignment]
    await ws.send(json.dumps(message))


async def receive(ws: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
    return message


async def refused_with(server: ChorusServer, payload: dict[str, Any]) -> tuple[int, str]:
    """Send ``connection_init`` with ``payload``; the close code and reason the server gives."""
    async with connect(ws_url(server), subprotocols=[PROTOCOL]) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), TIMEOUT_S)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


def health(server: ChorusServer) -> dict[str, int]:
    body: dict[str, Any] = httpx.get(f"{server.base_url}/healthz", timeout=5).json()
    return {k: body[k] for k in ("live_streams", "bus_subscriptions", "websocket_connections")}


async def settled(server: ChorusServer, within_s: float = 5.0) -> None:
    """``/healthz`` counts go back to 0 within ``within_s`` seconds."""
    deadline = time.monotonic() + patience(within_s)
    while True:
        counts = await asyncio.to_thread(health, server)
        if not any(counts.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not released after {within_s}s: {counts}")
        await asyncio.sleep(0.1)


def expired_token(user: str) -> str:
    return jwt.encode({"sub": user, "exp": int(time.time()) - 60}, TEST_SECRET, "HS256")


# --- authentication -------------------------------------------------------------------


async def test_a_bad_or_missing_token_closes_the_socket_with_4403(
    server: ChorusServer, api: Api
) -> None:
    wrong_secret = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, "x" * 40, "HS256")
    year_11476 = jwt.encode({"sub": "alice", "exp": 300_000_000_000}, TEST_SECRET, "HS256")
    for payload, said in (
        ({"Authorization": f"Bearer {year_11476}"}, "token"),
        ({}, "connection_init payload"),
        ({"Authorization": "Bearer not-a-jwt"}, "malformed"),
        ({"Authorization": f"Bearer {expired_token('alice')}"}, "expired"),
        ({"Authorization": f"Bearer {wrong_secret}"}, "token"),
        ({"Authorization": api.token("alice")}, "Bearer"),  # no "Bearer"
        ({"Authorization": 42}, "Bearer"),
    ):
        code, reason = await refused_with(server, payload)
        assert code == 4403, payload
        assert said in reason, (payload, reason)  # the reason HTTP gives the same token
        assert len(reason.encode()) <= 123
    # Two spellings of the token, two users: neither is taken silently.
    both = {"Authorization": f"Bearer {api.token('alice')}", "authorization": api.token("bob")}
    code, reason = await refused_with(server, both)
    assert (code, reason) == (4400, TWO_TOKENS)
    # gql does not get past connection_init either.
    with pytest.raises(TransportConnectionFailed) as failed:
        async with gql_session(server, "not-a-jwt"):
            pass
    closed = failed.value.__cause__
    assert isinstance(closed, ConnectionClosed), failed.value
    assert closed.rcvd is not None
    assert closed.rcvd.code == 4403
    # Nor does graphql-ws: it reports the close event.
    playlist_id = create_playlist(api)
    for token in ("not-a-jwt", None):
        js = await JsSubscriber.start(server, token, playlist_id)
        line = await js.line()
        assert line["closed"]["code"] == 4403, line
        assert line["closed"]["reason"] != "Forbidden", line
        assert await js.exit_code() == 2
    await settled(server)


async def test_subscribing_before_connection_init_is_4401(server: ChorusServer) -> None:
    async with connect(ws_url(server), subprotocols=[PROTOCOL]) as ws:
        await subscribe(ws, "1", "whatever", 0)
        with pytest.raises(ConnectionClosed) as closed:
            await receive(ws)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401


async def test_ping_is_answered_with_pong(server: ChorusServer, api: Api) -> None:
    async with socket(server, api.token("alice")) as ws:
        await ws.send(json.dumps({"type": "ping", "payload": {"at": 1}}))
        assert (await receive(ws))["type"] == "pong"
    transport = WebsocketsTransport(
        url=ws_url(server),
        subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
        init_payload={"Authorization": f"Bearer {api.token('alice')}"},
    )
    async with Client(transport=transport):
        transport.pong_received.clear()
        await transport.send_ping()
        await asyncio.wait_for(transport.pong_received.wait(), TIMEOUT_S)
    await settled(server)


# --- catch-up, live, errors -----------------------------------------------------------


async def test_both_clients_get_catch_up_then_live_in_order(server: ChorusServer, api: Api) -> None:
    playlist_id = create_playlist(api, collaborative=True)
    base = 0
    for n in range(1, 4):
        base = add(api, playlist_id, [track(n), track(n + 10)], base)["version"]
    async with gql_session(server, api.token("alice")) as session:
        python = GqlSubscriber(session, playlist_id, 0)
        js = await JsSubscriber.start(server, api.token("alice"), playlist_id, 0, count=7)
        python_events = await python.take(3)
        js_events = await js.events(3)
        # Live: a move, a remove and an add after the catch-up.
        entries = all_entries(api, playlist_id)
        first, last = entries[0]["id"], entries[-1]["id"]
        moved = committed(
            mutate(
                api,
                "moveEntries",
                playlistId=playlist_id,
                baseVersion=3,
                entryIds=[first],
                after=last,
            )
        )
        removed = committed(
            mutate(
                api,
                "removeEntries",
                playlistId=playlist_id,
                baseVersion=moved["version"],
                entryIds=[entries[1]["id"]],
            )
        )
        add(api, playlist_id, [track(99)], removed["version"], before=last)
        add(api, playlist_id, [track(98)], 1)  # stale base: rebased
        python_events += await python.take(4)
        js_events += await js.events(4)
        assert await js.line() == {"done": 7}
        assert await js.exit_code() == 0
        await python.close()
        # Sync and live never disagree: catching up on the same versions from the log
        # gives exactly what was delivered live.
        caught_up = GqlSubscriber(session, playlist_id, 3)
        assert await caught_up.take(4) == python_events[3:]
        await caught_up.close()
    truth = server_order(api, playlist_id)
    assert version(api, playlist_id) == 7
    for events in (python_events, js_events):
        replica = Replica()
        for event in events:
            replica.apply(event)
        assert replica.versions == list(range(1, 8))
        assert replica.order() == truth
    # The JavaScript client saw exactly what the Python client saw.
    assert js_events == python_events
    await settled(server)


async def test_a_removed_subscriber_gets_a_forbidden_error_and_nothing_more(
    server: ChorusServer, api: Api
) -> None:
    playlist_id = create_playlist(api)
    committed(
        mutate(
            api, "setMemberRole", playlistId=playlist_id, baseVersion=0, userId="bob", role="VIEWER"
        )
    )
    committed(
        mutate(
            api,
            "setMemberRole",
            playlistId=playlist_id,
            baseVersion=1,
            userId="carol",
            role="VIEWER",
        )
    )
    other = create_playlist(api, visibility="PUBLIC")
    async with (
        gql_session(server, api.token("bob")) as session,
        gql_session(server, api.token("carol")) as carol_session,
    ):
        doomed = GqlSubscriber(session, playlist_id, 0)
        survivor = GqlSubscriber(session, other, 0)
        carol = GqlSubscriber(carol_session, playlist_id, 0)
        js = await JsSubscriber.start(server, api.token("bob"), playlist_id, 0, count=10)
        assert [e["version"] for e in await doomed.take(2)] == [1, 2]
        assert [e["version"] for e in await js.events(2)] == [1, 2]
        add(api, playlist_id, [track(1)], 2)
        assert [e["version"] for e in await doomed.take(1)] == [3]
        assert [e["version"] for e in await js.events(1)] == [3]
        committed(mutate(api, "removeMember", playlistId=playlist_id, baseVersion=3, userId="bob"))
        add(api, playlist_id, [track(2)], 4)
        # Bob still gets the version that removed him, then the error; not version 5.
        removal = {"__typename": "MembersChanged", "user": {"id": "bob"}, "role": None}
        (last,) = await doomed.take(1)
        assert (last["version"], last["changes"]) == (4, [removal])
        (last,) = await js.events(1)
        assert (last["version"], last["changes"]) == (4, [removal])
        error = await doomed.error()
        assert isinstance(error, TransportQueryError), error
        assert error.errors is not None
        assert [e["extensions"]["code"] for e in error.errors] == ["FORBIDDEN"]
        ended = await js.line()
        assert "error" in ended, ended
        assert [e["extensions"]["code"] for e in ended["error"]] == ["FORBIDDEN"]
        assert await js.exit_code() == 1
        # The connection itself lives on: bob's other subscription still works.
        add(api, other, [track(3)], 0)
        assert [e["version"] for e in await survivor.take(1)] == [1]
        await survivor.close()
        # Carol, still a member, saw bob go and what followed.
        seen = await carol.take(5)
        assert [e["version"] for e in seen] == [1, 2, 3, 4, 5]
        assert seen[3]["changes"] == [removal]
        await carol.close()
    await settled(server)


async def test_deleting_a_playlist_sends_playlist_deleted_then_forbidden(
    server: ChorusServer, api: Api
) -> None:
    playlist_id = create_playlist(api)
    add(api, playlist_id, [track(1)], 0)
    async with gql_session(server, api.token("alice")) as session:
        owner = GqlSubscriber(session, playlist_id, 0)
        assert [e["version"] for e in await owner.take(1)] == [1]
        committed(mutate(api, "deletePlaylist", playlistId=playlist_id, baseVersion=1))
        (deleted,) = await owner.take(1)
        assert (deleted["version"], deleted["changes"]) == (2, [{"__typename": "PlaylistDeleted"}])
        error = await owner.error()
        assert isinstance(error, TransportQueryError), error
        assert error.errors is not None
        assert [e["extensions"]["code"] for e in error.errors] == ["FORBIDDEN"]
    await settled(server)


@pytest.mark.parametrize(
    ("since", "code"),
    [("future", "BAD_USER_INPUT"), ("negative", "BAD_USER_INPUT"), ("hidden", "NOT_FOUND")],
)
async def test_a_subscription_that_cannot_start_is_an_error_message(
    server: ChorusServer, api: Api, since: str, code: str
) -> None:
    playlist_id = create_playlist(api)
    add(api, playlist_id, [track(1)], 0)
    user, value = "alice", {"future": 2, "negative": -1, "hidden": 0}[since]
    if since == "hidden":
        user = "mallory"
    async with gql_session(server, api.token(user)) as session:
        sub = GqlSubscriber(session, playlist_id, value)
        error = await sub.error()
        assert isinstance(error, TransportQueryError), error
        assert error.errors is not None
        assert [e["extensions"]["code"] for e in error.errors] == [code]
    js = await JsSubscriber.start(server, api.token(user), playlist_id, value)
    line = await js.line()
    assert [e["extensions"]["code"] for e in line.get("error", [])] == [code], line
    assert await js.exit_code() == 1
    await settled(server)


async def test_a_malformed_subscription_is_refused_with_a_code(
    server: ChorusServer, api: Api
) -> None:
    async with socket(server, api.token("alice")) as ws:
        documents = {
            "1": (
                'subscription { playlistEvents(playlistId: "x", sinceVersion: 0) { nope } }',
                None,
            ),
            "2": (
                'subscription { playlistEvents(playlistId: "x", sinceVersion: 0) { __typename } }',
                None,
            ),
            "3": (SUBSCRIPTION, {"playlistId": "x"}),
        }
        codes = {}
        for op_id, (query, variables) in documents.items():
            payload = {"query": query, "variables": variables or {}}
            await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))
            message = await receive(ws)
            assert (message["id"], message["type"]) == (op_id, "error"), message
            codes[op_id] = [e["extensions"]["code"] for e in message["payload"]]
        assert codes == {
            "1": ["GRAPHQL_VALIDATION_FAILED"],
            "2": ["NOT_FOUND"],
            "3": ["BAD_USER_INPUT"],  # a required variable missing: the values, not the document
        }
        # A document that does not parse is an error message too (graphql-ws does the same).
        await ws.send(
            json.dumps({"id": "4", "type": "subscribe", "payload": {"query": "subscription {"}})
        )
        message = await receive(ws)
        assert (message["id"], message["type"]) == ("4", "error"), message
        assert [e["extensions"]["code"] for e in message["payload"]] == ["GRAPHQL_PARSE_FAILED"]
    await settled(server)


# --- limits ---------------------------------------------------------------------------


async def test_the_operation_past_the_limit_on_one_connection_is_refused(
    server: ChorusServer, api: Api
) -> None:
    limit = Settings().max_ws_operations  # the default the server runs with
    playlist_id = create_playlist(api)
    add(api, playlist_id, [track(1)], 0)
    async with socket(server, api.token("alice")) as ws:
        for n in range(1, limit + 1):
            await subscribe(ws, str(n), playlist_id, 0)
        started: set[str] = set()
        while len(started) < limit:
            message = await receive(ws)
            assert (message["type"], message["payload"]["data"]["playlistEvents"]["version"]) == (
                "next",
                1,
            ), message
            started.add(message["id"])
        assert health(server)["live_streams"] >= limit
        await subscribe(ws, str(limit + 1), playlist_id, 0)
        refused = await receive(ws)
        assert (refused["id"], refused["type"]) == (str(limit + 1), "error"), refused
        assert str(limit) in refused["payload"][0]["message"], refused
        assert refused["payload"][0]["extensions"]["code"] == "LIMIT_EXCEEDED", refused
        # The others keep streaming; completing one frees a place for another.
        add(api, playlist_id, [track(2)], 1)
        live: dict[str, int] = {}
        while len(live) < limit:
            message = await receive(ws)
            assert message["type"] == "next", message
            live[message["id"]] = message["payload"]["data"]["playlistEvents"]["version"]
        assert set(live.values()) == {2}
        await ws.send(json.dumps({"id": "7", "type": "complete"}))
        for _ in range(50):  # the server forgets the operation asynchronously
            await subscribe(ws, "next-one", playlist_id, 1)
            message = await receive(ws)
            if message["type"] == "next":
                break
            assert message["type"] == "error", message
            await asyncio.sleep(0.05)
        assert (message["id"], message["payload"]["data"]["playlistEvents"]["version"]) == (
            "next-one",
            2,
        )
    await settled(server)


async def test_each_user_may_hold_a_bounded_number_of_connections(tmp_path: Path) -> None:
    chorus = ChorusServer(
        f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}",
        tmp_path,
        CHORUS_MAX_WS_CONNECTIONS_PER_USER="3",
    )
    chorus.start()
    try:
        api = Api(chorus)
        try:
            alice = [await open_socket(chorus, api.token("alice")) for _ in range(3)]
            code, reason = await refused_with(
                chorus, {"Authorization": f"Bearer {api.token('alice')}"}
            )
            assert (code, reason) == (1013, "too many connections")
            bob = await open_socket(chorus, api.token("bob"))  # another user is not affected
            assert health(chorus)["websocket_connections"] == 4
            # A clean close and an abrupt kill both give the place back.
            await alice[0].close()
            alice[1].transport.abort()
            for _ in range(2):
                alice.append(await _open_when_allowed(chorus, api.token("alice")))
            code, _ = await refused_with(chorus, {"Authorization": f"Bearer {api.token('alice')}"})
            assert code == 1013
            # graphql-ws retries 1013 (it gives up on 4429): once one of
            # alice's sockets is gone, her retrying client gets in and is live.
            playlist_id = create_playlist(api)
            js = await JsSubscriber.start(
                chorus, api.token("alice"), playlist_id, since=0, retry_attempts=5
            )
            try:
                first = await js.line()
                assert first == {"retrying": {"code": 1013, "reason": "too many connections"}}
                await alice.pop().close()
                deadline = time.monotonic() + patience(TIMEOUT_S)  # graphql-ws waits 1.3–4 s first
                while health(chorus)["websocket_connections"] < 4:  # her retry got in
                    assert time.monotonic() < deadline, "graphql-ws did not reconnect"
                    await asyncio.sleep(0.1)
                add(api, playlist_id, [track(1)], 0)
                (event,) = await js.events(1)
                assert event["version"] == 1, event
                assert await js.exit_code() == 0
            finally:
                await js.kill()
            for ws in [*alice[2:], bob]:
                await ws.close()
            await settled(chorus)
        finally:
            api.http.close()
    finally:
        chorus.stop()


async def test_a_subscriber_too_far_behind_gets_resync_and_one_users_catch_ups_take_turns(
    tmp_path: Path,
) -> None:
    # One user's 200 subscriptions from version 0 replayed the whole log 200
    # times at once (an attacker's pass): past the lag limit the stream resyncs,
    # and within it the user's catch-ups take turns (one here) and all arrive.
    chorus = ChorusServer(
        f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}",
        tmp_path,
        CHORUS_MAX_SUBSCRIBER_LAG="5",
        CHORUS_CATCH_UPS_PER_USER="1",
    )
    chorus.start()
    try:
        api = Api(chorus)
        try:
            playlist_id = create_playlist(api)
            for v in range(6):
                add(api, playlist_id, [track(v + 1)], v)
            async with socket(chorus, api.token("alice")) as ws:
                await subscribe(ws, "far", playlist_id, 0)
                first = await receive(ws)
                assert first["id"] == "far", first
                assert first["payload"]["data"]["playlistEvents"] == {
                    "__typename": "ResyncRequired",
                    "playlistId": playlist_id,
                    "currentVersion": 6,
                    "reason": "too far behind",
                }
                for n in range(4):
                    await subscribe(ws, f"near-{n}", playlist_id, 1)
                got: dict[str, list[int]] = {f"near-{n}": [] for n in range(4)}
                while sum(map(len, got.values())) < 4 * 5:
                    message = await receive(ws)
                    assert message["type"] == "next", message
                    got[message["id"]].append(
                        message["payload"]["data"]["playlistEvents"]["version"]
                    )
                assert all(versions == [2, 3, 4, 5, 6] for versions in got.values()), got
                add(api, playlist_id, [track(9)], 6)
                live = {(await receive(ws))["id"] for _ in range(5)}
                assert live == {"far", *got}
            await settled(chorus)
        finally:
            api.http.close()
    finally:
        chorus.stop()


async def _open_when_allowed(server: ChorusServer, token: str) -> ClientConnection:
    """A connection, retried while the server has not yet released a closed one."""
    deadline = time.monotonic() + patience(5)
    while True:
        try:
            return await open_socket(server, token)
        except ConnectionClosed:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


# --- sockets killed without a close frame --------------------------------------------


async def test_200_sockets_killed_abruptly_leave_nothing_behind(
    server: ChorusServer, api: Api
) -> None:
    playlists = []
    for _ in range(5):
        playlist_id = create_playlist(api, visibility="PUBLIC")
        add(api, playlist_id, [track(1)], 0)
        playlists.append(playlist_id)
    await settled(server)

    async def doomed(n: int) -> ClientConnection:
        ws = await open_socket(server, api.token(f"listener-{n % 10}"))
        if n % 4 != 3:  # one in four dies idle, right after the ack
            await subscribe(ws, "1", playlists[n % 5], 0)
            if n % 4 != 2:  # one in four dies before its stream has answered
                message = await receive(ws)
                assert message["type"] == "next", message
        return ws

    for batch in range(10):
        sockets = await asyncio.gather(*(doomed(batch * 20 + i) for i in range(20)))
        if batch == 0:
            counts = health(server)
            assert counts["websocket_connections"] == 20, counts
            assert counts["live_streams"] >= 10, counts
            assert counts["bus_subscriptions"] == 5, counts
        for ws in sockets:
            ws.transport.abort()  # no close frame: the TCP connection just goes
    await settled(server, within_s=5.0)
    # The server still serves a new subscriber normally afterwards.
    async with gql_session(server, api.token("alice")) as session:
        sub = GqlSubscriber(session, playlists[0], 0)
        assert [e["version"] for e in await sub.take(1)] == [1]
        await sub.close()
    await settled(server)
