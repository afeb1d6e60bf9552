"""Hostile requests against a running ``chorus serve``: none stalls or crashes it, none slips by.

Deeply nested JSON and numbers too long to convert, oversized and endless
request heads, slow bodies, idle connections,
too many connections, browser origins and request ids, over real sockets:
HTTP with httpx, the transport's limits with raw sockets, WebSockets with
the websockets library. Every wait is bounded; nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from chorus.auth import mint_token
from chorus.graphql.guards.nesting import MAX_JSON_DEPTH
from chorus.transport import MAX_PIPELINED
from tests.deadlines import patience
from tests.e2e.raw import split_response
from tests.servers import TEST_SECRET, ChorusServer

APP_ORIGIN = "http://localhost:5173"
OTHER_ORIGIN = "http://evil.example"
HEAD_TIMEOUT_S = 2
BODY_TIMEOUT_S = 2
KEEP_ALIVE_TIMEOUT_S = 1
GENERATED_ID = re.compile(r"[0-9a-f]{32}")
APOLLO_HEADERS = "apollographql-client-name,apollographql-client-version,authorization,content-type"


def _server(data_dir: Path, log_level: str = "warning", **env: str) -> ChorusServer:
    return ChorusServer(
        f"sqlite+aiosqlite:///{data_dir / 'chorus.db'}", data_dir, log_level=log_level, **env
    )


@pytest.fixture(scope="module")
def chorus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    """One server with short transport bounds, two CORS origins and the access log on."""
    server = _server(
        tmp_path_factory.mktemp("hostile"),
        log_level="info",
        CHORUS_HEAD_TIMEOUT_S=str(HEAD_TIMEOUT_S),
        CHORUS_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        CHORUS_KEEP_ALIVE_TIMEOUT_S=str(KEEP_ALIVE_TIMEOUT_S),
        CHORUS_CORS_ORIGINS=f"{APP_ORIGIN}, https://App.Example.com:443",
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    """A server without CORS origins, keeping idle connections 1 s (the head bound: 10 s)."""
    server = _server(
        tmp_path_factory.mktemp("plain"), CHORUS_KEEP_ALIVE_TIMEOUT_S=str(KEEP_ALIVE_TIMEOUT_S)
    )
    server.start()
    yield server
    server.stop()


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'alice')}"}


def _ws_url(server: ChorusServer) -> str:
    return server.url.replace("http://", "ws://")


def _log_lines(server: ChorusServer) -> list[str]:
    return server.log.read_text(errors="replace").splitlines()


def _wait_for_log(server: ChorusServer, needle: str) -> list[str]:
    """The log's lines once one contains ``needle`` (at most ~10 s of polling)."""
    for _ in range(100):
        lines = _log_lines(server)
        if any(needle in line for line in lines):
            return lines
        time.sleep(0.1)
    raise AssertionError(f"no log line contains {needle!r}: {lines[-10:]}")


# Raw HTTP/1.1 over a socket.


def _connect(server: ChorusServer, timeout_s: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout_s)
    sock.settimeout(timeout_s)
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response: ``(status, headers, body)``; the body by its Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {data!r}")
        data += chunk
    status, headers, body = split_response(data)
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def _read_pipelined(sock: socket.socket, count: int) -> tuple[list[tuple[int, bytes]], bytes]:
    """``count`` responses read in turn from one buffered stream, then what follows
    until the server closes: pipelined answers may arrive in one segment, and
    :func:`_read_response` would drop what its ``recv`` read past the first."""
    stream = sock.makefile("rb")
    answers = _read_answers(stream, count)
    return answers, stream.read()


def _read_answers(stream: BinaryIO, count: int) -> list[tuple[int, bytes]]:
    """``count`` responses, ``(status, body)``, read in turn from ``stream``."""
    answers = []
    for _ in range(count):
        status_line = stream.readline()
        if not status_line:
            raise ConnectionError(f"closed before response {len(answers) + 1}")
        length = 0
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        answers.append((int(status_line.split()[1]), stream.read(length)))
    return answers


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset) within its timeout."""
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send what the server reads before it refuses; a refusal may reset the rest."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def _request(path: str = "/healthz", extra: bytes = b"") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() + extra + b"\r\n"


def _healthy(server: ChorusServer) -> None:
    response = httpx.get(f"{server.base_url}/healthz", timeout=10)
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def _errors_counted(server: ChorusServer, code: str) -> float:
    """``chorus_graphql_errors_total{code}`` on the server's ``/metrics`` (0 before the first)."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    found = re.search(rf'^chorus_graphql_errors_total{{code="{code}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


# 1. Deeply nested JSON.


def _graphql_error(response: httpx.Response, code: str) -> str:
    body = response.json()
    assert list(body) == ["errors"], body
    [error] = body["errors"]
    assert error["extensions"] == {"code": code}
    message: str = error["message"]
    return message


@pytest.mark.parametrize(
    "body",
    [
        "[" * 5000,
        "[" * 5000 + "]" * 5000,
        '{"query": "{ __typename }", "variables": {"x": ' + "[" * 5000 + "]" * 5000 + "}}",
        '{"query": "{ __typename }", "variables": {"x": '
        + '{"a":' * 3000
        + "1"
        + "}" * 3000
        + "}}",
        '{"query": "{ __typename }", "variables": ' + "[" * 100_000,
    ],
    ids=["open", "balanced", "variables-arrays", "variables-objects", "100k-open"],
)
def test_deeply_nested_json_is_a_400_bad_request_and_at_most_one_log_line(
    chorus: ChorusServer, body: str
) -> None:
    message = _refused_body(chorus, body, f"deep-{len(body)}-{body[-1] == ']'}")
    assert f"deeper than {MAX_JSON_DEPTH}" in message


def _refused_body(chorus: ChorusServer, body: str, request_id: str) -> str:
    """The message of the ``BAD_REQUEST`` that ``body`` is answered with; the server
    logged at most the access line for it (no traceback) and still answers."""
    before = len(_log_lines(chorus))
    response = httpx.post(
        chorus.url,
        content=body,
        headers={**_auth(), "Content-Type": "application/json", "X-Request-Id": request_id},
        timeout=10,
    )
    assert response.status_code == 400, response.text[:500]
    message = _graphql_error(response, "BAD_REQUEST")
    new = _wait_for_log(chorus, request_id)[before:]
    assert len(new) <= 1, new
    _healthy(chorus)
    return message


def test_nesting_up_to_the_limit_and_brackets_in_strings_are_answered(chorus: ChorusServer) -> None:
    depth = MAX_JSON_DEPTH - 2  # the body object and "variables" are two levels
    body = {
        "query": "{ __typename }",
        "variables": {"x": "[" * 10_000, "nested": json.loads("[" * depth + "]" * depth)},
    }
    response = httpx.post(chorus.url, json=body, headers=_auth(), timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"__typename": "Query"}, response.text[:500]


async def _init(ws: ClientConnection) -> dict[str, object]:
    await ws.send(json.dumps({"type": "connection_init", "payload": _auth()}))
    ack: dict[str, object] = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert ack["type"] == "connection_ack", ack
    return ack


async def _close_after(server: ChorusServer, frame: str) -> websockets.frames.Close:
    """The close the server answers ``frame`` with, on an acknowledged socket."""
    async with websockets.connect(_ws_url(server), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await _init(ws)
        await ws.send(frame)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd


@pytest.mark.parametrize(
    "frame", ["[" * 5000, '{"type": "ping", "payload": ' + "[" * 5000 + "]" * 5000 + "}"]
)
async def test_a_deeply_nested_websocket_frame_closes_with_4400(
    chorus: ChorusServer, frame: str
) -> None:
    close = await _close_after(chorus, frame)
    assert (close.code, close.reason) == (
        4400,
        f"WebSocket message nests arrays and objects deeper than {MAX_JSON_DEPTH}",
    )
    _healthy(chorus)


@pytest.mark.parametrize(
    "body",
    [
        '{"query": "{ __typename }", "v": 1' + "0" * 5000 + "}",
        '{"query": "{ __typename }", "variables": {"x": [-' + "9" * 100_000 + "]}}",
    ],
    ids=["5000-digits", "variables-100k-digits"],
)
def test_a_json_number_too_long_to_convert_is_a_400_bad_request_and_one_log_line(
    chorus: ChorusServer, body: str
) -> None:
    message = _refused_body(chorus, body, f"long-number-{len(body)}")
    assert message == "the request body has a number of more than 4300 digits"


def test_long_numbers_that_convert_are_answered(chorus: ChorusServer) -> None:
    body = (
        '{"query": "{ __typename }", "variables": {"i": 1'
        + "0" * 4299
        + ', "f": 1.'
        + "5" * 10_000
        + "}}"
    )
    response = httpx.post(
        chorus.url,
        content=body,
        headers={**_auth(), "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text[:500]
    assert response.json()["data"] == {"__typename": "Query"}


async def test_a_websocket_frame_with_a_number_too_long_closes_with_4400(
    chorus: ChorusServer,
) -> None:
    close = await _close_after(chorus, '{"type": "ping", "x": 1' + "0" * 5000 + "}")
    assert (close.code, close.reason) == (
        4400,
        "WebSocket message has a number of more than 4300 digits",
    )
    assert "Traceback" not in chorus.log.read_text(errors="replace")
    _healthy(chorus)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ('{"type": "ping", "payload": {"x": NaN}}', "NaN is not a JSON number"),
        ('{"type": "ping", "type": "pong"}', "the key 'type' appears twice in one object"),
        ('\ufeff{"type": "ping"}', "it starts with a byte order mark"),
    ],
    ids=["nan", "repeated-key", "bom"],
)
async def test_a_websocket_frame_that_is_not_standard_json_closes_4400_saying_why(
    chorus: ChorusServer, frame: str, reason: str
) -> None:
    close = await _close_after(chorus, frame)
    assert close.code == 4400
    assert close.reason.startswith(f"WebSocket message is not standard JSON: {reason}")


# 2. HTTP transport limits.


def _refused_with(sock: socket.socket, status: int, code: str) -> dict[str, str]:
    got, headers, body = _read_response(sock)
    assert got == status, body
    assert json.loads(body)["errors"][0]["extensions"]["code"] == code
    assert headers["connection"] == "close"
    assert GENERATED_ID.fullmatch(headers["x-request-id"])
    assert _closed_by_server(sock)
    return headers


@pytest.mark.parametrize("size", [40_000, 4_000_000], ids=["40k", "4M"])
def test_a_huge_header_is_refused_with_431(chorus: ChorusServer, size: int) -> None:
    counted = _errors_counted(chorus, "HEADERS_TOO_LARGE")
    with _connect(chorus) as sock:
        sender = threading.Thread(
            target=_send_quietly, args=(sock, _request(extra=b"X-Big: " + b"a" * size + b"\r\n"))
        )
        sender.start()
        _refused_with(sock, 431, "HEADERS_TOO_LARGE")
        sender.join(10)
        assert not sender.is_alive()
    _healthy(chorus)
    assert _errors_counted(chorus, "HEADERS_TOO_LARGE") == counted + 1


@pytest.mark.parametrize("count", [101, 20_000])
def test_too_many_headers_are_refused_with_431(chorus: ChorusServer, count: int) -> None:
    headers = b"".join(b"X-H-%d: v\r\n" % i for i in range(count))
    with _connect(chorus) as sock:
        sender = threading.Thread(target=_send_quietly, args=(sock, _request(extra=headers)))
        sender.start()
        _refused_with(sock, 431, "HEADERS_TOO_LARGE")
        sender.join(10)
    _healthy(chorus)


def test_a_head_at_the_limits_is_answered(chorus: ChorusServer) -> None:
    headers = b"".join(b"X-H-%d: v\r\n" % i for i in range(98))  # with Host and X-Big: 100
    with _connect(chorus) as sock:
        sock.sendall(_request(extra=headers + b"X-Big: " + b"a" * 20_000 + b"\r\n"))
        status, _, _ = _read_response(sock)
    assert status == 200


def test_a_slow_head_is_answered_408_within_the_bound_and_others_are_served(
    chorus: ChorusServer,
) -> None:
    lines_sent = 0
    with _connect(chorus, timeout_s=1.0) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        reply = b""
        for lines_sent in range(1, 31):  # 30 lines, one a second: far past the 2 s bound
            try:
                reply = sock.recv(65536)
                break
            except TimeoutError:
                pass
            # Meanwhile every other client is served.
            _healthy(chorus)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"X-Slow-%d: still here\r\n" % lines_sent)
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert b'"REQUEST_TIMEOUT"' in reply
    assert lines_sent < 30


def test_a_slow_head_after_a_response_is_answered_408_within_the_bound(
    chorus: ChorusServer,
) -> None:
    """On a kept-alive connection the next head is timed from its first bytes."""
    lines_sent = 0
    with _connect(chorus, timeout_s=1.0) as sock:
        sock.sendall(_request())
        status, _, _ = _read_response(sock)
        assert status == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        reply = b""
        for lines_sent in range(1, 31):  # one header line a second: past the 2 s bound
            try:
                reply = sock.recv(65536)
                break
            except TimeoutError:
                pass
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"X-Slow-%d: still here\r\n" % lines_sent)
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert b'"REQUEST_TIMEOUT"' in reply
    assert lines_sent < 30


def _post_head(length: int) -> bytes:
    return (
        f"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _trickle_until_answered(sock: socket.socket, rounds: int = 30) -> tuple[bytes, int]:
    """Send a byte of body every second until the server answers; ``(reply, bytes sent)``."""
    for sent in range(1, rounds + 1):
        try:
            reply = sock.recv(65536)
            return reply, sent
        except TimeoutError:
            pass
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b" ")
    return b"", rounds


def test_a_slow_body_is_answered_408_and_closed_within_the_bound(chorus: ChorusServer) -> None:
    with _connect(chorus, timeout_s=1.0) as sock:
        sock.sendall(_post_head(100_000) + b"{")
        reply, sent = _trickle_until_answered(sock)
        assert reply.startswith(b"HTTP/1.1 408 "), reply
        assert b'"REQUEST_TIMEOUT"' in reply
        assert b"request body did not arrive within 2 s" in reply
        assert sent < 30
        sock.settimeout(10)
        assert _closed_by_server(sock)
    _healthy(chorus)


def test_a_body_behind_an_unsupported_upgrade_holds_nothing(chorus: ChorusServer) -> None:
    """``Upgrade: h2c`` is answered as plain HTTP (the parser ends the message at the
    head: a 400 for the missing body), never left waiting for the rest."""
    head = _post_head(100_000).replace(
        b"\r\n\r\n", b"\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
    )
    with _connect(chorus, timeout_s=1.0) as sock:
        sock.sendall(head + b"{")
        reply, sent = _trickle_until_answered(sock)
        assert sent < 30, "the body was never timed"
        assert reply.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 408 ")), reply
    _healthy(chorus)


def _upgrade_post(body: bytes, upgrade: bytes = b"h2c") -> bytes:
    token = mint_token(TEST_SECRET, "alice").encode()
    return (
        b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + token + b"\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: " + upgrade + b"\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )


TYPENAME = json.dumps({"query": "{ __typename }"}).encode()


@pytest.mark.parametrize("later", [False, True], ids=["with-head", "after-head"])
def test_an_unsupported_upgrade_is_ignored_and_its_body_read(
    chorus: ChorusServer, later: bool
) -> None:
    """``Upgrade: h2c`` (``curl --http2``): answered as HTTP/1.1 with its body, and the
    connection goes on; the body, whenever it comes, is never read as a request."""
    with _connect(chorus) as sock:
        if later:
            sock.sendall(_upgrade_post(TYPENAME))
            time.sleep(0.3)
            sock.sendall(TYPENAME + _request())
        else:
            sock.sendall(_upgrade_post(TYPENAME) + TYPENAME + _request())
        answers, _ = _read_pipelined_then_stop(sock, 2)
    assert answers[0][0] == 200
    assert json.loads(answers[0][1])["data"] == {"__typename": "Query"}
    assert answers[1][0] == 200
    assert json.loads(answers[1][1])["status"] == "ok"


def test_a_body_that_looks_like_a_request_is_one_request(chorus: ChorusServer) -> None:
    """A proxy passes one request on: it gets one answer, whatever its body holds."""
    smuggled = _request("/readyz")
    with _connect(chorus) as sock:
        sock.sendall(_upgrade_post(smuggled))
        time.sleep(0.3)
        sock.sendall(smuggled)
        sock.sendall(_request())
        answers, _ = _read_pipelined_then_stop(sock, 2)
    assert answers[0][0] == 400  # the body is not JSON
    assert json.loads(answers[1][1])["status"] == "ok"  # /healthz's answer, not /readyz's


def test_an_unsupported_upgrade_with_a_chunked_body_is_refused(chorus: ChorusServer) -> None:
    head = _upgrade_post(b"").replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
    with _connect(chorus) as sock:
        sock.sendall(head + b"1\r\n{\r\n0\r\n\r\n")
        _refused_with(sock, 400, "BAD_REQUEST")


def _read_pipelined_then_stop(
    sock: socket.socket, count: int
) -> tuple[list[tuple[int, bytes]], bytes]:
    """:func:`_read_pipelined` on a connection the server keeps open: ``count`` answers,
    then whatever else came within a short wait (``b""``: nothing)."""
    stream = sock.makefile("rb")
    answers = _read_answers(stream, count)
    sock.settimeout(0.5)
    extra = b""
    with contextlib.suppress(TimeoutError):
        extra = stream.read1(65536)
    assert extra == b"", f"more than {count} answers: {extra!r}"
    return answers, extra


def test_an_oversized_head_after_a_request_is_refused_after_its_answer(
    chorus: ChorusServer,
) -> None:
    """In one send: a request, then a head past the limit (the second began in the read
    that ended the first). The first is answered, then 431."""
    big = _request(extra=b"X-Big: " + b"a" * 40_000 + b"\r\n")
    with _connect(chorus) as sock:
        _send_quietly(sock, _request() + big)
        answers, _ = _read_pipelined(sock, 2)
    assert [status for status, _ in answers] == [200, 431]


def test_a_head_request_refused_gets_no_body(chorus: ChorusServer) -> None:
    head = b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n"
    with _connect(chorus) as sock:
        _send_quietly(sock, head)
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                data += chunk
    assert data.startswith(b"HTTP/1.1 431 "), data
    assert data.endswith(b"\r\n\r\n"), data  # the head, and nothing after it


def test_a_padded_head_after_a_request_is_refused_after_its_answer(chorus: ChorusServer) -> None:
    """Whitespace after a value is not kept by the parser, but counts."""
    padded = _request(extra=b"X-Pad: v" + b" " * 40_000 + b"\r\n")
    with _connect(chorus) as sock:
        _send_quietly(sock, _request() + padded)
        answers, _ = _read_pipelined(sock, 2)
    assert [status for status, _ in answers] == [200, 431]


def test_a_refused_head_request_gets_no_body_even_before_its_target(
    chorus: ChorusServer,
) -> None:
    with _connect(chorus) as sock:
        _send_quietly(sock, b"HEAD /he\x7fz HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                data += chunk
    assert data.startswith(b"HTTP/1.1 400 "), data
    assert data.endswith(b"\r\n\r\n"), data


def test_a_half_closed_client_gets_its_answers(chorus: ChorusServer) -> None:
    """``shutdown(SHUT_WR)`` after whole requests: each is answered, then the close."""
    with _connect(chorus) as sock:
        sock.sendall(_request() + _request("/readyz"))
        sock.shutdown(socket.SHUT_WR)
        answers, rest = _read_pipelined(sock, 2)
    assert [status for status, _ in answers] == [200, 200]
    assert rest == b""


def test_a_websocket_upgrade_pipelined_behind_a_request_is_refused_in_turn(
    chorus: ChorusServer,
) -> None:
    upgrade = (
        b"GET /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
    )
    with _connect(chorus) as sock:
        sock.sendall(_request() + upgrade)
        answers, _ = _read_pipelined(sock, 2)
    assert [status for status, _ in answers] == [200, 400]
    assert b"pipelined" in answers[1][1]


def test_a_slow_reader_that_reads_is_not_dropped(tmp_path: Path) -> None:
    server = _server(tmp_path, CHORUS_SEND_TIMEOUT_S="1")
    server.start()
    try:
        whole = len(httpx.get(f"{server.base_url}/graphiql/graphiql.min.js", timeout=10).content)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(10)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(_request("/graphiql/graphiql.min.js"))
            received = 0
            deadline = time.monotonic() + 4  # four send bounds, reading all along
            while time.monotonic() < deadline:
                received += len(sock.recv(2048))
                time.sleep(0.05)
            sock.settimeout(30)
            while received < whole and (chunk := sock.recv(65536)):
                received += len(chunk)
        assert received > whole  # the whole answer, head included
        assert not any("read nothing of its answers" in line for line in _log_lines(server))
    finally:
        server.stop()


def test_a_client_that_reads_nothing_is_dropped_after_the_send_bound(tmp_path: Path) -> None:
    """Answers it never reads fill the server's send buffer: the connection is dropped
    after CHORUS_SEND_TIMEOUT_S, and its slot is free again."""
    server = _server(tmp_path, CHORUS_SEND_TIMEOUT_S="1", CHORUS_MAX_CONNECTIONS="2")
    server.start()
    try:
        sent = 0
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(10)
            sock.connect(("127.0.0.1", server.port))
            asset = _request("/graphiql/graphiql.min.js")
            for _ in range(4):
                sock.sendall(asset)
            time.sleep(4)  # reading nothing, past the 1 s bound
            received = 0
            with contextlib.suppress(ConnectionResetError):
                while chunk := sock.recv(65536):
                    received += len(chunk)
            sent = received
        whole = len(httpx.get(f"{server.base_url}/graphiql/graphiql.min.js", timeout=10).content)
        assert 0 < sent < 4 * whole, "the connection was not dropped"
        assert any("read nothing of its answers" in line for line in _log_lines(server))
    finally:
        server.stop()


def test_a_body_in_pieces_within_the_bound_is_answered(chorus: ChorusServer) -> None:
    body = json.dumps({"query": "{ __typename }"}).encode()
    with _connect(chorus) as sock:
        sock.sendall(_post_head(len(body)))
        for start in range(0, len(body), 8):
            sock.sendall(body[start : start + 8])
        status, _, answer = _read_response(sock)
        assert status == 200, answer
        assert json.loads(answer)["data"] == {"__typename": "Query"}
        # The connection is kept alive: the next request is answered on it.
        sock.sendall(_request())
        status, _, _ = _read_response(sock)
        assert status == 200


def test_slow_bodies_holding_every_connection_are_closed_and_the_server_serves_again(
    tmp_path: Path,
) -> None:
    server = _server(tmp_path, CHORUS_MAX_CONNECTIONS="3", CHORUS_BODY_TIMEOUT_S="2")
    server.start()
    slow: list[socket.socket] = []
    try:
        slow += [_connect(server, timeout_s=0.3) for _ in range(3)]
        for sock in slow:
            sock.sendall(_post_head(100_000) + b"{")
        with _connect(server) as sock:  # every connection is taken (/healthz is still answered)
            sock.sendall(_request("/readyz"))
            status, _, _ = _read_response(sock)
        assert status == 503
        for sock in slow:
            reply, _ = _trickle_until_answered(sock, rounds=100)
            assert reply.startswith(b"HTTP/1.1 408 "), reply
            sock.close()
        for _ in range(50):  # the server hears the closes at once; allow it a moment
            if httpx.get(f"{server.base_url}/readyz", timeout=10).status_code == 200:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("still refused after the slow bodies were closed")
    finally:
        for sock in slow:
            sock.close()  # also when an assertion failed: no socket left to the collector
        server.stop()


def test_a_connection_that_sends_nothing_is_closed_after_the_head_bound(
    chorus: ChorusServer,
) -> None:
    with _connect(chorus, timeout_s=HEAD_TIMEOUT_S * 5) as sock:
        assert sock.recv(65536) == b""  # closed without a word: no request began


def test_an_idle_keep_alive_connection_is_closed_after_the_bound(plain: ChorusServer) -> None:
    # Waiting 8 s at most: before the 10 s head bound, only the keep-alive bound closes it.
    with _connect(plain, timeout_s=8) as sock:
        for _ in range(2):  # the connection is kept alive between requests
            sock.sendall(_request())
            status, headers, _ = _read_response(sock)
            assert status == 200
            assert headers.get("connection") != "close"
        assert _closed_by_server(sock)


def test_a_head_in_pieces_within_the_bound_is_answered(chorus: ChorusServer) -> None:
    with _connect(chorus) as sock:
        for piece in (b"GET /hea", b"lthz HTTP/1.1\r\nHo", b"st: 127.0.0.1\r\n", b"\r\n"):
            sock.sendall(piece)
        status, _, body = _read_response(sock)
    assert status == 200
    assert json.loads(body)["status"] == "ok"


def test_connections_over_the_limit_get_503_until_some_close(tmp_path: Path) -> None:
    server = _server(tmp_path, CHORUS_MAX_CONNECTIONS="3", CHORUS_HEAD_TIMEOUT_S="60")
    server.start()
    try:
        idle = [_connect(server) for _ in range(3)]
        for path in ("/readyz", "/graphql"):
            with _connect(server) as sock:
                sock.sendall(_request(path))
                status, headers, body = _read_response(sock)
            assert status == 503, path
            assert json.loads(body)["errors"][0]["extensions"]["code"] == "SERVICE_UNAVAILABLE"
            assert GENERATED_ID.fullmatch(headers["x-request-id"])
        # Liveness is answered whatever the count: the process is alive, and a
        # probe failing now would have it restarted for an attacker's sockets.
        with _connect(server) as sock:
            sock.sendall(_request("/healthz"))
            status, _, body = _read_response(sock)
        assert status == 200
        assert json.loads(body)["status"] == "ok"
        for sock in idle:
            sock.close()
        for _ in range(50):  # the server hears the closes at once; allow it a moment
            with httpx.Client(timeout=10) as client:
                if client.get(f"{server.base_url}/readyz").status_code == 200:
                    break
            time.sleep(0.1)
        else:
            raise AssertionError("still refused after the idle connections closed")
    finally:
        server.stop()


def _rss_kib(server: ChorusServer) -> int:
    assert server.process is not None
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1))  # type: ignore[union-attr]


def test_pipelined_requests_are_answered_in_order_up_to_the_bound(chorus: ChorusServer) -> None:
    with _connect(chorus) as sock, sock.makefile("rb") as answers:
        sock.sendall(b"".join(_request(f"/healthz?n={n}") for n in range(MAX_PIPELINED)))
        for n in range(MAX_PIPELINED):
            assert answers.readline().split()[1] == b"200", n
            length = 0
            while (line := answers.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            assert json.loads(answers.read(length))["status"] == "ok"


def test_pipelined_requests_never_read_close_the_connection_and_memory_stays_bounded(
    tmp_path: Path,
) -> None:
    server = _server(tmp_path)
    server.start()
    try:
        _healthy(server)
        before = _rss_kib(server)
        burst = _request() * 100_000  # 3.5 MB of requests whose answers are never read
        for _ in range(4):
            with _connect(server) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                _send_quietly(sock, burst)
                deadline = time.monotonic() + patience(20)  # the answers it sent, then its close
                with contextlib.suppress(ConnectionResetError):
                    while sock.recv(65536):
                        assert time.monotonic() < deadline, "still answering queued requests"
            _healthy(server)
        grown_mib = (_rss_kib(server) - before) / 1024
        # Unbounded, each burst queued ~100,000 requests: ~200 MiB each.
        assert grown_mib < 64, f"RSS grew {grown_mib:.0f} MiB"
        lines = _wait_for_log(server, "pipelined requests unread")
        assert not [line for line in lines if "Traceback" in line or "ERROR" in line], lines
    finally:
        server.stop()


# 3. Browser apps on another origin.


def _preflight(server: ChorusServer, origin: str) -> httpx.Response:
    return httpx.options(
        server.url,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": APOLLO_HEADERS
            + ",x-request-id,apollo-require-preflight",
        },
        timeout=10,
    )


@pytest.mark.parametrize("origin", [APP_ORIGIN, "https://app.example.com"])
def test_a_listed_origin_may_preflight_with_apollo_headers_and_cache_it(
    chorus: ChorusServer, origin: str
) -> None:
    response = _preflight(chorus, origin)
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == origin
    allowed = {
        h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")
    }
    assert set(APOLLO_HEADERS.split(",")) | {"x-request-id", "apollo-require-preflight"} <= allowed
    assert response.headers["access-control-max-age"] == "600"
    query = httpx.post(
        chorus.url, json={"query": "{ __typename }"}, headers={"Origin": origin}, timeout=10
    )
    assert query.headers["access-control-allow-origin"] == origin
    assert "x-request-id" in query.headers["access-control-expose-headers"].lower()


def test_an_unlisted_origin_gets_no_cors(chorus: ChorusServer) -> None:
    response = _preflight(chorus, OTHER_ORIGIN)
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers
    refusal = response.json()["errors"][0]  # JSON, as every other refusal
    assert (refusal["message"], refusal["extensions"]["code"]) == (
        "Disallowed CORS origin",
        "BAD_REQUEST",
    )
    query = httpx.post(
        chorus.url, json={"query": "{ __typename }"}, headers={"Origin": OTHER_ORIGIN}, timeout=10
    )
    assert "access-control-allow-origin" not in query.headers


async def _ws_status(server: ChorusServer, origin: str | None) -> int:
    """101 when the handshake is accepted (and the socket acknowledged), else its HTTP status."""
    headers = {"Origin": origin} if origin else {}
    try:
        async with websockets.connect(
            _ws_url(server),
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            origin=None,
            additional_headers=headers,
        ) as ws:
            await _init(ws)
            return 101
    except websockets.InvalidStatus as refused:
        return int(refused.response.status_code)


@pytest.mark.parametrize(
    ("origin", "status"),
    [(APP_ORIGIN, 101), ("https://app.example.com", 101), (OTHER_ORIGIN, 403), (None, 101)],
)
async def test_websockets_follow_the_same_origin_list(
    chorus: ChorusServer, origin: str | None, status: int
) -> None:
    assert await _ws_status(chorus, origin) == status


async def test_an_unlisted_origin_is_told_why_its_websocket_is_refused(
    chorus: ChorusServer,
) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(
            _ws_url(chorus),
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            origin=None,
            additional_headers={"Origin": OTHER_ORIGIN, "X-Request-Id": "refused-origin-1"},
        ):
            pass
    response = refused.value.response
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"] == "refused-origin-1"
    error = json.loads(response.body)["errors"][0]
    assert error["extensions"]["code"] == "FORBIDDEN"
    assert "CHORUS_CORS_ORIGINS" in error["message"]


async def test_without_cors_origins_only_the_own_origin_may_open_a_websocket(
    plain: ChorusServer,
) -> None:
    assert await _ws_status(plain, APP_ORIGIN) == 403
    assert await _ws_status(plain, plain.base_url) == 101
    assert await _ws_status(plain, None) == 101
    preflight = _preflight(plain, APP_ORIGIN)
    assert "access-control-allow-origin" not in preflight.headers


# 4. Request ids.


@pytest.mark.parametrize("given", ["abc-123", "a.b_c:d-E", "x" * 128])
def test_a_well_formed_request_id_is_echoed_and_logged(chorus: ChorusServer, given: str) -> None:
    response = httpx.post(
        chorus.url,
        json={"query": "{ __typename }"},
        headers={**_auth(), "X-Request-Id": given},
        timeout=10,
    )
    assert response.headers["x-request-id"] == given
    [line] = [line for line in _wait_for_log(chorus, f"[{given}]") if f"[{given}]" in line]
    assert "POST /graphql" in line  # uvicorn's access line


@pytest.mark.parametrize("given", [None, "", "has space", "x" * 129, "semi;colon", "ünï".encode()])
def test_a_missing_or_malformed_request_id_is_replaced(
    chorus: ChorusServer, given: str | None
) -> None:
    headers = {"X-Request-Id": given} if given is not None else {}
    first = httpx.get(f"{chorus.base_url}/healthz", headers=headers, timeout=10)
    second = httpx.get(f"{chorus.base_url}/healthz", headers=headers, timeout=10)
    assert GENERATED_ID.fullmatch(first.headers["x-request-id"])
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


def test_refusals_carry_a_request_id_too(chorus: ChorusServer) -> None:
    too_large = httpx.post(chorus.url, content=b"x" * 2_000_000, headers={"X-Request-Id": "big-1"})
    assert (too_large.status_code, too_large.headers["x-request-id"]) == (413, "big-1")
    not_json = httpx.post(chorus.url, content=b"{", headers={"X-Request-Id": "bad-1"})
    assert (not_json.status_code, not_json.headers["x-request-id"]) == (400, "bad-1")
    preflight = _preflight(chorus, OTHER_ORIGIN)
    assert GENERATED_ID.fullmatch(preflight.headers["x-request-id"])


async def test_connection_ack_carries_the_request_id(chorus: ChorusServer) -> None:
    async with websockets.connect(
        _ws_url(chorus),
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        additional_headers={"X-Request-Id": "ws-given-1"},
    ) as ws:
        assert ws.response is not None
        assert ws.response.headers["X-Request-Id"] == "ws-given-1"
        assert await _init(ws) == {"type": "connection_ack", "payload": {"requestId": "ws-given-1"}}
    async with websockets.connect(_ws_url(chorus), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        payload = (await _init(ws))["payload"]
        assert isinstance(payload, dict)
        assert GENERATED_ID.fullmatch(payload["requestId"])


def test_a_body_over_the_limit_is_refused_and_the_connection_closed(chorus: ChorusServer) -> None:
    # Its body is never read: the connection cannot carry another request.
    with contextlib.closing(_connect(chorus, timeout_s=3)) as sock:
        sock.sendall(
            b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 5000000\r\n\r\n{"
        )
        status, headers, body = _read_response(sock)
        assert (status, headers.get("connection")) == (413, "close")
        assert json.loads(body)["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
        assert sock.recv(65536) == b""  # closed at once, not after the keep-alive


def test_whole_pipelined_requests_are_answered_before_the_bad_bytes_after_them(
    chorus: ChorusServer,
) -> None:
    body = b'{"query": "{ __typename }"}'
    post = (
        b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    burst = b"".join(_request(f"/healthz?n={n}") for n in range(3)) + post * 2 + b"GARBAGE\r\n\r\n"
    with contextlib.closing(_connect(chorus)) as sock:
        sock.sendall(burst)
        answers, after = _read_pipelined(sock, 6)
        assert after == b""  # then closed
    assert [status for status, _ in answers] == [200, 200, 200, 200, 200, 400]
    assert json.loads(answers[3][1])["data"] == {"__typename": "Query"}
    assert json.loads(answers[5][1])["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
    assert "write_eof" not in chorus.log.read_text()
    assert "Traceback" not in chorus.log.read_text()
