"""Behind a load balancer, against a running ``chorus serve`` (docs/deploying.md).

Proxy headers honoured only from ``CHORUS_TRUSTED_PROXIES`` (seen in the
access log, where the client's address shows, and in a redirect, which is
built from the scheme); the stop sequence on SIGTERM (``/readyz`` 503 while
everything is still served, a request in flight finishing, subscription
sockets closed 1012, exit 0), SIGINT and a second signal; WebSocket ping
frames on an idle socket and a dead peer closed. Requests from an untrusted
peer come from 127.0.0.2, another loopback address of the same machine.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from chorus.auth import mint_token
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import create_playlist
from tests.servers import TEST_SECRET, ChorusServer

PROTOCOL = Subprotocol("graphql-transport-ws")
UNTRUSTED_PEER = "127.0.0.2"
CLIENT = "203.0.113.7"
WAIT_S = patience(10.0)


def _server(data_dir: Path, **env: str) -> ChorusServer:
    return ChorusServer(
        f"sqlite+aiosqlite:///{data_dir / 'chorus.db'}", data_dir, log_level="info", **env
    )


@pytest.fixture(scope="module")
def trusting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    """A server behind a proxy on 127.0.0.1 (and one more network)."""
    server = _server(
        tmp_path_factory.mktemp("trusting"), CHORUS_TRUSTED_PROXIES="10.0.0.0/8, 127.0.0.1"
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    """A server with no trusted proxy (the default)."""
    server = _server(tmp_path_factory.mktemp("default"))
    server.start()
    yield server
    server.stop()


def _get(server: ChorusServer, path: str, peer: str = "127.0.0.1", **headers: str) -> str:
    """GET ``path`` from ``peer`` with ``headers`` and a fresh request id; that id."""
    request_id = uuid.uuid4().hex
    transport = httpx.HTTPTransport(local_address=peer)
    with httpx.Client(transport=transport, timeout=WAIT_S) as client:
        client.get(f"{server.base_url}{path}", headers={"X-Request-Id": request_id, **headers})
    return request_id


def _log_line(server: ChorusServer, request_id: str, marker: str = "uvicorn.access") -> str:
    """The log line of request ``request_id`` holding ``marker`` (the log is written as it goes)."""
    deadline = time.monotonic() + patience(WAIT_S)
    while time.monotonic() < deadline:
        for line in server.log.read_text().splitlines():
            if f"[{request_id}]" in line and marker in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no log line with {marker!r} for {request_id}")


def _client_of(server: ChorusServer, request_id: str) -> str:
    """The client address the access log gives request ``request_id`` (without the port)."""
    line = _log_line(server, request_id)
    address = line.split(f"[{request_id}] ", 1)[1].split(" - ", 1)[0]
    return address.rsplit(":", 1)[0]


def _redirect(server: ChorusServer, peer: str = "127.0.0.1", **headers: str) -> str:
    """Where ``GET /graphiql`` is redirected to (built from the request's scheme)."""
    transport = httpx.HTTPTransport(local_address=peer)
    with httpx.Client(transport=transport, timeout=WAIT_S) as client:
        response = client.get(f"{server.base_url}/graphiql", headers=headers)
    assert response.status_code == 307, response.text
    return response.headers["location"]


# --- proxy headers --------------------------------------------------------------------


def test_a_trusted_proxy_gives_the_client_address_and_scheme(trusting: ChorusServer) -> None:
    forwarded = {"X-Forwarded-For": CLIENT, "X-Forwarded-Proto": "https"}
    assert _client_of(trusting, _get(trusting, "/healthz", **forwarded)) == CLIENT
    assert _redirect(trusting, **forwarded).startswith("https://")


def test_the_client_is_the_nearest_address_no_trusted_proxy_added(
    trusting: ChorusServer,
) -> None:
    # The client spoofed the first item; its own address was appended by a
    # trusted proxy (10.1.2.3) and the one that connected (127.0.0.1).
    chain = f"198.51.100.66, {CLIENT}, 10.1.2.3"
    assert _client_of(trusting, _get(trusting, "/healthz", **{"X-Forwarded-For": chain})) == CLIENT


def test_an_untrusted_peer_cannot_spoof_its_address_or_scheme(trusting: ChorusServer) -> None:
    forwarded = {"X-Forwarded-For": CLIENT, "X-Forwarded-Proto": "https"}
    request_id = _get(trusting, "/healthz", UNTRUSTED_PEER, **forwarded)
    assert _client_of(trusting, request_id) == UNTRUSTED_PEER
    assert _redirect(trusting, UNTRUSTED_PEER, **forwarded).startswith("http://")


def test_without_trusted_proxies_the_headers_are_ignored_even_from_localhost(
    default: ChorusServer,
) -> None:
    # uvicorn alone trusts 127.0.0.1; Chorus trusts nobody unless told.
    forwarded = {"X-Forwarded-For": CLIENT, "X-Forwarded-Proto": "https"}
    assert _client_of(default, _get(default, "/healthz", **forwarded)) == "127.0.0.1"
    assert _redirect(default, **forwarded).startswith("http://")


# Issue 30, finding 9: any X-Forwarded-For text was taken for the client. Only
# an IP address is; an item that is not one ends the reading, and the client
# is then the address to its right (the nearest proxy's report), or the TCP
# peer (127.0.0.1 here) when it is the rightmost item.
PEER = "127.0.0.1"
FORWARDED_FOR = [
    ("evil-host", PEER),
    ('1.2.3.4"} {"client": "x', PEER),
    ("9" * 5_000, PEER),
    ("a" * 5_000, PEER),
    ("fe80::1%eth0", PEER),
    ('fe80::1%"}{evil-host', PEER),
    ("unknown", PEER),
    (f"{CLIENT}, evil-host", PEER),
    (f"evil-host, {CLIENT}", CLIENT),
    ("evil-host, 10.1.2.3", "10.1.2.3"),  # the trusted proxy's report is the nearest
    (f"{CLIENT}:4711", CLIENT),
    ("[2001:db8::7]:4711", "2001:db8::7"),
    ("[2001:db8::7]", "2001:db8::7"),
    ("2001:DB8:0::7", "2001:db8::7"),
    (f"{CLIENT}:99999999", PEER),
    ("[2001:db8::7]x", PEER),
    (",,", PEER),
]


@pytest.fixture(scope="module")
def trusting_json(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    """A server behind a proxy on 127.0.0.1, logging JSON lines (the app's access record)."""
    server = _server(
        tmp_path_factory.mktemp("trusting-json"),
        CHORUS_TRUSTED_PROXIES="127.0.0.1, 10.0.0.0/8",
        CHORUS_LOG_FORMAT="json",
    )
    server.start()
    yield server
    server.stop()


def _json_lines(server: ChorusServer, request_id: str) -> list[dict[str, object]]:
    """The JSON log lines of request ``request_id``, once its access record is written."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        lines = [json.loads(x) for x in server.log.read_text().splitlines() if x.startswith("{")]
        mine = [line for line in lines if line.get("request_id") == request_id]
        if any(line["logger"] == "chorus.access" for line in mine):
            return mine
        time.sleep(0.05)
    raise AssertionError(f"no access record for {request_id}")


def test_only_an_ip_address_is_taken_from_x_forwarded_for(
    trusting: ChorusServer, trusting_json: ChorusServer
) -> None:
    for forwarded, client in FORWARDED_FOR:
        headers = {"X-Forwarded-For": forwarded}
        request_id = _get(trusting, "/healthz", **headers)
        assert _client_of(trusting, request_id) == client, forwarded
        line = _log_line(trusting, request_id)
        assert not [bad for bad in ("evil", '"}', "%", "aaaa") if bad in line], line
        lines = _json_lines(trusting_json, _get(trusting_json, "/graphql", **headers))
        (access,) = [x for x in lines if x["logger"] == "chorus.access"]
        assert access["client"] == client, forwarded
        written = json.dumps(lines)
        assert not [bad for bad in ("evil", "%", "aaaa") if bad in written], written[:300]


async def test_a_websocket_through_a_trusted_proxy_logs_the_client(
    trusting: ChorusServer,
) -> None:
    request_id = uuid.uuid4().hex
    url = trusting.url.replace("http://", "ws://")
    headers = {"X-Forwarded-For": CLIENT, "X-Request-Id": request_id}
    async with connect(url, subprotocols=[PROTOCOL], additional_headers=headers):
        pass
    line = _log_line(trusting, request_id, '"WebSocket /graphql"')
    assert f'{CLIENT}:0 - "WebSocket /graphql" [accepted]' in line, line


# --- stopping -------------------------------------------------------------------------

DRAIN_S = 3.0
SHUTDOWN_TIMEOUT_S = 10.0
SUBSCRIPTION = """
subscription Watch($id: ID!) { playlistEvents(playlistId: $id, sinceVersion: 0) { __typename } }
"""


def _running(data_dir: Path, **env: str) -> ChorusServer:
    server = _server(data_dir, **env)
    server.start()
    return server


async def _until_draining(http: httpx.AsyncClient, server: ChorusServer) -> httpx.Response:
    """``/readyz`` once it answers 503 (bounded: it flips on the signal, not later)."""
    deadline = time.monotonic() + patience(WAIT_S)
    while True:
        response = await http.get(f"{server.base_url}/readyz")
        if response.status_code == 503 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.02)


def _slow_request(server: ChorusServer, body: bytes) -> socket.socket:
    """A POST whose head and first bytes of body are sent: a request in flight."""
    head = (
        f"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)
    conn.sendall(head + body[:5])
    return conn


def _rest_of_response(conn: socket.socket) -> bytes:
    answer = b""
    while chunk := conn.recv(65536):
        answer += chunk
    return answer


async def test_sigterm_drains_then_closes_sockets_1012_and_exits_0(tmp_path: Path) -> None:
    server = _running(
        tmp_path, CHORUS_DRAIN_S=str(DRAIN_S), CHORUS_SHUTDOWN_TIMEOUT_S=str(SHUTDOWN_TIMEOUT_S)
    )
    api = Api(server)
    try:
        playlist_id = create_playlist(api)
        ws = await connect(server.url.replace("http://", "ws://"), subprotocols=[PROTOCOL])
        token = mint_token(TEST_SECRET, "alice")
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        assert json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["type"] == "connection_ack"
        subscribe = {"query": SUBSCRIPTION, "variables": {"id": playlist_id}}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
        body = json.dumps({"query": "{ __typename }"}).encode()
        in_flight = await asyncio.to_thread(_slow_request, server, body)
        await asyncio.sleep(0.2)  # its head is in

        assert server.process is not None
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        async with httpx.AsyncClient(timeout=WAIT_S) as http:
            readyz = await _until_draining(http, server)
            assert readyz.status_code == 503, readyz.text
            assert readyz.json()["status"] == "draining"
            # Still alive, and still serving whatever the load balancer sends meanwhile.
            healthz = await http.get(f"{server.base_url}/healthz")
            assert healthz.status_code == 200
            assert healthz.json()["draining"] is True
            query = await http.post(server.url, json={"query": "{ __typename }"})
            assert query.status_code == 200, query.text
            assert query.json()["data"] == {"__typename": "Query"}
            assert query.headers["connection"] == "close"
        assert time.monotonic() - signalled < DRAIN_S, "the drain ended before the checks"

        await asyncio.wait_for(ws.wait_closed(), DRAIN_S + WAIT_S)
        closed_after = time.monotonic() - signalled
        assert ws.close_code == 1012
        assert closed_after >= DRAIN_S - 0.2, closed_after  # not before the drain is over

        # The request in flight when the listener closed still gets its answer.
        in_flight.sendall(body[5:])
        answer = await asyncio.to_thread(_rest_of_response, in_flight)
        in_flight.close()
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert b'{"data":{"__typename":"Query"}' in answer

        status = await asyncio.to_thread(server.process.wait, SHUTDOWN_TIMEOUT_S + WAIT_S)
        assert status == 0, server.log.read_text()[-2000:]
        assert time.monotonic() - signalled < DRAIN_S + SHUTDOWN_TIMEOUT_S
        log = server.log.read_text()
        assert "drain over" in log
        assert "Application shutdown complete" in log  # the services were closed
        assert "Traceback" not in log, log[-3000:]
    finally:
        api.http.close()
        server.stop()


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    server = _running(tmp_path, CHORUS_DRAIN_S="60")
    try:
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + patience(WAIT_S)
        while httpx.get(f"{server.base_url}/readyz", timeout=WAIT_S).status_code != 503:
            assert time.monotonic() < deadline, "never drained"
            time.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=5) == 128 + signal.SIGTERM
        assert "second SIGTERM: exiting at once" in server.log.read_text()
    finally:
        server.stop()


def test_sigint_stops_without_a_drain(tmp_path: Path) -> None:
    server = _running(tmp_path, CHORUS_DRAIN_S="60")
    try:
        assert server.process is not None
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=WAIT_S) == 0, server.log.read_text()[-2000:]
    finally:
        server.stop()


# --- keep-alive pings -----------------------------------------------------------------

PING_S = 0.5
PING_TIMEOUT_S = 1.0


class _RawSocket:
    """A graphql-transport-ws client on websockets' sans-I/O protocol: it sees every ping
    frame, and answers (flushes its pongs) only while told to."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.protocol = ClientProtocol(parse_uri("ws://127.0.0.1/graphql"), subprotocols=[PROTOCOL])
        self.answering = True

    def flush(self) -> None:
        if self.answering:
            self.writer.write(b"".join(self.protocol.data_to_send()))

    async def events(self, timeout_s: float) -> list[object]:
        data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
        events: list[object] = list(self.protocol.events_received())
        self.flush()
        return events


async def _idle_socket(server: ChorusServer) -> _RawSocket:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw = _RawSocket(reader, writer)
    raw.protocol.send_request(raw.protocol.connect())
    raw.flush()
    assert isinstance((await raw.events(WAIT_S))[0], Response)
    token = mint_token(TEST_SECRET, "alice")
    init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
    raw.protocol.send_text(json.dumps(init).encode())
    raw.flush()
    (ack,) = await raw.events(WAIT_S)
    assert json.loads(getattr(ack, "data"))["type"] == "connection_ack"  # noqa: B009
    return raw


async def test_an_idle_socket_is_pinged_and_a_dead_peer_closed(tmp_path: Path) -> None:
    server = _running(
        tmp_path, CHORUS_WS_PING_S=str(PING_S), CHORUS_WS_PING_TIMEOUT_S=str(PING_TIMEOUT_S)
    )
    try:
        raw = await _idle_socket(server)
    except BaseException:
        server.stop()
        raise
    try:
        pings: list[float] = []
        while len(pings) < 4:  # answered: the socket stays open
            for event in await raw.events(WAIT_S):
                assert getattr(event, "opcode", None) == Opcode.PING, event
                pings.append(time.monotonic())
        gaps = [b - a for a, b in itertools.pairwise(pings)]
        assert all(PING_S * 0.7 < gap < PING_S * 2 for gap in gaps), gaps

        raw.answering = False  # a peer that died without closing
        stopped = time.monotonic()
        while raw.protocol.close_rcvd is None:
            await raw.events(PING_S + PING_TIMEOUT_S + WAIT_S)
        assert raw.protocol.close_rcvd.code == 1011  # keepalive ping timeout
        assert time.monotonic() - stopped < PING_S + PING_TIMEOUT_S + 1.0
    finally:
        raw.writer.close()
        server.stop()


# --- compression ----------------------------------------------------------------------


async def _negotiated(server: ChorusServer) -> tuple[str | None, list[str]]:
    """The ``Sec-WebSocket-Extensions`` the server answered a client offering
    permessage-deflate (as browsers and ``websockets`` do), and the frame types of
    an init and a subscribe over that socket."""
    url = f"ws://127.0.0.1:{server.port}/graphql"
    async with connect(url, subprotocols=[PROTOCOL], compression="deflate") as ws:
        offered = ws.request.headers.get("Sec-WebSocket-Extensions") if ws.request else None
        assert offered is not None
        assert "permessage-deflate" in offered
        answered = ws.response.headers.get("Sec-WebSocket-Extensions") if ws.response else None
        token = mint_token(TEST_SECRET, "alice")
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        frames = [json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["type"]]
        await ws.send(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": "{ __typename }"}})
        )
        frames += [json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["type"] for _ in range(2)]
        return answered, frames


async def test_websocket_compression_is_off_unless_a_setting_turns_it_on(
    default: ChorusServer, tmp_path: Path
) -> None:
    answered, frames = await _negotiated(default)
    assert answered is None  # no extension: frames go uncompressed
    assert frames == ["connection_ack", "next", "complete"]
    server = _running(tmp_path, CHORUS_WS_PER_MESSAGE_DEFLATE="true")
    try:
        answered, frames = await _negotiated(server)
        assert answered is not None
        assert answered.startswith("permessage-deflate"), answered
        assert frames == ["connection_ack", "next", "complete"]
    finally:
        server.stop()
