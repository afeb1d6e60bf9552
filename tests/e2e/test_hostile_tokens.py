"""Hostile tokens against a running ``chorus serve``: UNAUTHENTICATED or 4403, never a crash.

Tokens signed with the server's own secret whose claims have the wrong type
or range (``exp``/``nbf``/``iat`` as strings, lists, booleans, huge numbers,
NaN; ``sub`` not a string, empty, huge, with spaces), odd headers, claims
that are not a JSON object or not UTF-8, and tokens that are not base64 at
all: over HTTP each is the ``UNAUTHENTICATED`` error (HTTP 200, no data),
over WebSocket (``connection_init``) a close with 4403. Also the forms of
the ``Authorization`` header, and ``chorus token`` with hostile user ids.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chorus.auth import MAX_NUMERIC_DATE, MAX_TOKEN_LENGTH
from tests.e2e.conftest import Api, running_server
from tests.e2e.helpers import error_codes
from tests.e2e.raw import first_answer
from tests.servers import TEST_SECRET, ChorusServer, free_port
from tests.switches import child_environ

VIEWER = "{ viewer { user { id } } }"
LATER = int(time.time()) + 3600
HS256 = b'{"alg": "HS256", "typ": "JWT"}'


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def signed(payload: bytes, header: bytes = HS256) -> str:
    """A token of raw header and claims bytes, signed by hand with the server's secret."""
    signing_input = f"{_b64(header)}.{_b64(payload)}"
    signature = hmac.new(TEST_SECRET.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def claims(**values: Any) -> str:
    """A signed token of ``{"sub": "alice", "exp": LATER}`` with ``values`` put over it."""
    return signed(json.dumps({"sub": "alice", "exp": LATER, **values}).encode())


HOSTILE = {
    "exp string": claims(exp=str(LATER)),
    "exp list": claims(exp=[LATER]),
    "exp object": claims(exp={"at": LATER}),
    "exp true": claims(exp=True),
    "exp null": claims(exp=None),
    "exp huge integer": claims(exp=10**400),
    "exp huge float": claims(exp=1e300),
    "exp past year 9999": claims(exp=253_402_300_800),
    "exp negative": claims(exp=-(10**12)),
    "exp NaN": signed(b'{"sub": "alice", "exp": NaN}'),
    "exp Infinity": signed(b'{"sub": "alice", "exp": Infinity}'),
    "exp 1e400": signed(b'{"sub": "alice", "exp": 1e400}'),
    "nbf string": claims(nbf="yesterday"),
    "nbf list": claims(nbf=[]),
    "nbf false": claims(nbf=False),
    "nbf huge": claims(nbf=10**30),
    "nbf -Infinity": signed(b'{"sub": "alice", "exp": 9999999999, "nbf": -Infinity}'),
    "iat string": claims(iat="now"),
    "iat object": claims(iat={}),
    "iat huge": claims(iat=10**400),
    "iat NaN": signed(b'{"sub": "alice", "exp": 9999999999, "iat": NaN}'),
    "sub integer": claims(sub=7),
    "sub list": claims(sub=["alice"]),
    "sub object": claims(sub={"id": "alice"}),
    "sub null": claims(sub=None),
    "sub true": claims(sub=True),
    "sub empty": claims(sub=""),
    "sub huge": claims(sub="a" * 2000),
    "sub with spaces": claims(sub="alice smith"),
    "sub with a newline": claims(sub="alice\n"),
    "sub NUL": claims(sub="\x00"),
    "sub lone surrogate": signed(b'{"sub": "\\udcff", "exp": 9999999999}'),
    "aud object": claims(aud={"a": 1}),
    "claims an array": signed(b'[{"sub": "alice", "exp": 9999999999}]'),
    "claims a string": signed(b'"alice"'),
    "claims null": signed(b"null"),
    "claims not JSON": signed(b"{sub: alice}"),
    "claims not UTF-8": signed(b'{"sub": "\xff\xfe", "exp": 9999999999}'),
    "claims deeply nested": signed(b"[" * 1500),
    "header an array": signed(b'{"sub": "alice", "exp": 9999999999}', b'["HS256"]'),
    "header alg list": signed(b'{"sub": "alice", "exp": 9999999999}', b'{"alg": ["HS256"]}'),
    "header alg none": signed(b'{"sub": "alice", "exp": 9999999999}', b'{"alg": "none"}'),
    "header alg object": signed(b'{"sub": "alice", "exp": 9999999999}', b'{"alg": {}}'),
    "header kid object": signed(
        b'{"sub": "alice", "exp": 9999999999}', b'{"alg": "HS256", "kid": {"k": 1}}'
    ),
    "header crit": signed(
        b'{"sub": "alice", "exp": 9999999999}', b'{"alg": "HS256", "crit": [{}]}'
    ),
    "header not UTF-8": signed(b'{"sub": "alice", "exp": 9999999999}', b'{"alg": "\xff"}'),
    "header deeply nested": f"{_b64(b'[' * 1500)}.e30.x",
    "header b64 false": signed(
        b'{"sub": "alice", "exp": 9999999999}', b'{"alg": "HS256", "b64": false}'
    ),
    "not base64": "!!!.@@@.###",
    "two parts": "abc.def",
    "four parts": "a.b.c.d",
    "too long": "a" * (MAX_TOKEN_LENGTH + 1),
}
"""Tokens that must be refused, every one signed with the right secret where it is a JWT."""

ACCEPTED = {
    "exp a float": claims(exp=LATER + 0.5),
    "exp the last second of year 9999": claims(exp=MAX_NUMERIC_DATE),
    "nested extra claims": claims(iss=[1, {"a": None}], jti={"x": [[[]]]}, roles={"admin": True}),
    "odd typ and kid": signed(
        json.dumps({"sub": "alice", "exp": LATER}).encode(),
        b'{"alg": "HS256", "typ": {"odd": 1}, "kid": "k1"}',
    ),
    "nbf and iat now": claims(nbf=int(time.time()) - 5, iat=int(time.time()) - 5),
}
"""Unusual but valid: the claims Chorus relies on are right, the rest is ignored."""


@pytest.fixture(scope="module")
def chorus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    with running_server("sqlite", tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="module")
def api(chorus: ChorusServer) -> Iterator[Api]:
    client = Api(chorus)
    yield client
    client.http.close()


def _as(api: Api, authorization: str | bytes) -> httpx.Response:
    return api.http.post(
        api.server.url, json={"query": VIEWER}, headers={"Authorization": authorization}
    )


def _unauthenticated(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    body = response.json()
    assert "data" not in body, body  # refused before validation: a request error
    assert error_codes(body) == ["UNAUTHENTICATED"], body
    message: str = body["errors"][0]["message"]
    return message


@pytest.fixture(autouse=True)
def quiet_log(chorus: ChorusServer) -> Iterator[None]:
    """Every test adds no traceback to the server's log."""
    before = chorus.log.stat().st_size
    yield
    with chorus.log.open("rb") as log:
        log.seek(before)
        added = log.read().decode(errors="replace")
    assert "Traceback" not in added, added[-3000:]


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_token_over_http_is_unauthenticated(api: Api, kind: str) -> None:
    message = _unauthenticated(_as(api, f"Bearer {HOSTILE[kind]}"))
    assert message.startswith("the token"), message


@pytest.mark.parametrize("kind", list(ACCEPTED))
def test_unusual_but_valid_tokens_are_accepted(api: Api, kind: str) -> None:
    response = _as(api, f"Bearer {ACCEPTED[kind]}")
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"viewer": {"user": {"id": "alice"}}}, response.text


def _init_frame(authorization: object) -> str:
    return json.dumps({"type": "connection_init", "payload": {"Authorization": authorization}})


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_a_hostile_token_over_websocket_closes_with_4403(
    chorus: ChorusServer, kind: str
) -> None:
    code, reason = await first_answer(chorus, _init_frame(f"Bearer {HOSTILE[kind]}"))
    assert code == 4403, (code, reason)


@pytest.mark.parametrize(
    "frame",
    [
        # JSON escapes the server decodes into text no token can hold.
        '{"type": "connection_init", "payload": {"Authorization": "Bearer \\udcff.a.b"}}',
        '{"type": "connection_init", "payload": {"Authorization": "Bearer \\u0000"}}',
        '{"type": "connection_init", "payload": {"Authorization": "\\udcff"}}',
        _init_frame("Bearer " + "a" * 100_000),
        _init_frame("Bearer " + "é" * 1000),
        _init_frame(""),
        _init_frame("Bearer"),
        _init_frame(["Bearer", "x"]),
        _init_frame({"Bearer": "x"}),
        _init_frame(None),
    ],
    ids=[
        "surrogate",
        "nul",
        "surrogate-no-scheme",
        "100kb",
        "non-ascii",
        "empty",
        "bearer-only",
        "list",
        "object",
        "null",
    ],
)
async def test_hostile_authorization_values_over_websocket_close_with_4403(
    chorus: ChorusServer, frame: str
) -> None:
    code, reason = await first_answer(chorus, frame)
    assert code == 4403, (code, reason)


async def test_unusual_but_valid_tokens_open_a_websocket(chorus: ChorusServer) -> None:
    for token in ACCEPTED.values():
        code, ack = await first_answer(chorus, _init_frame(f"Bearer {token}"))
        assert code == 0, ack
        assert json.loads(ack)["type"] == "connection_ack"


# --- the forms of the Authorization header ---------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        "",
        "Bearer",
        "bearer",
        "Basic YWxpY2U6c2VjcmV0",
        "Token abc",
        "Bearer a.b.c",
        "Bearer " + "a" * 20_000,  # under the head's 32 KiB bound, over the token's
        "Bearer\tabc",
        "Bearer é.é.é".encode(),
        b"Bearer \xff\xfe.\x80.\x81",
        "Bearer %s" % ("e30." * 3),
    ],
    ids=[
        "empty",
        "bearer-only",
        "lowercase-bearer-only",
        "basic",
        "other-scheme",
        "garbage-parts",
        "20kb",
        "tab",
        "utf8",
        "latin1-bytes",
        "dots",
    ],
)
def test_hostile_authorization_headers_are_unauthenticated(
    api: Api, authorization: str | bytes
) -> None:
    assert _unauthenticated(_as(api, authorization))


def test_two_spaces_and_a_lowercase_scheme_still_carry_the_token(api: Api) -> None:
    token = api.token("alice")
    for authorization in (f"Bearer  {token}", f"bearer {token}", f"BEARER {token}"):
        response = _as(api, authorization)
        assert response.json()["data"] == {"viewer": {"user": {"id": "alice"}}}, authorization


def _raw_post(server: ChorusServer, authorization: bytes) -> tuple[int, dict[str, Any]]:
    """POST the viewer query with this exact header value (httpx refuses trailing spaces)."""
    body = json.dumps({"query": VIEWER}).encode()
    request = (
        b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: " + authorization + b"\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    head, _, content = response.partition(b"\r\n\r\n")
    answer: dict[str, Any] = json.loads(content)
    return int(head.split()[1]), answer


@pytest.mark.parametrize("authorization", [b"Bearer ", b"Bearer    ", b"Bearer \t ", b" "])
def test_bearer_with_only_white_space_is_unauthenticated(
    chorus: ChorusServer, authorization: bytes
) -> None:
    status, body = _raw_post(chorus, authorization)
    assert status == 200, body
    assert "data" not in body, body  # refused before validation: a request error
    assert error_codes(body) == ["UNAUTHENTICATED"], body


def test_trailing_white_space_after_a_token_is_ignored(api: Api) -> None:
    status, body = _raw_post(api.server, f"Bearer {api.token('alice')}   ".encode())
    assert status == 200, body
    assert body["data"] == {"viewer": {"user": {"id": "alice"}}}, body


def test_a_100_kb_token_is_refused_by_the_head_bound(api: Api) -> None:
    response = _as(api, "Bearer " + "a" * 100_000)
    assert response.status_code == 431, response.text
    assert response.json()["errors"][0]["extensions"]["code"] == "HEADERS_TOO_LARGE"
    assert _as(api, f"Bearer {api.token('alice')}").status_code == 200


# --- chorus token -----------------------------------------------------------------------


def _chorus_token(*argv: str | bytes, data_dir: Path) -> subprocess.CompletedProcess[bytes]:
    env = {
        **child_environ(),
        "CHORUS_JWT_SECRET": TEST_SECRET,
        "CHORUS_DATA_DIR": str(data_dir),
    }
    return subprocess.run(
        [sys.executable, "-m", "chorus.cli", "token", *argv],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "user",
    ["", " ", "alice smith", "alice\n", "\t", "a" * 129, "\u200b", "a\u0000b", b"\xff\xfe", "-x"],
    ids=["empty", "space", "spaces", "newline", "tab", "129", "zwsp", "nul", "not-utf8", "option"],
)
def test_chorus_token_refuses_a_hostile_user_id_in_one_line(
    user: str | bytes, tmp_path: Path
) -> None:
    if isinstance(user, str) and "\x00" in user:
        # argv cannot hold NUL: the OS refuses it before chorus runs.
        with pytest.raises(ValueError, match="null"):
            _chorus_token(user, data_dir=tmp_path)
        return
    done = _chorus_token(user, data_dir=tmp_path)
    assert done.returncode == 2, done
    assert done.stdout == b""
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr
    assert "error:" in stderr.splitlines()[-1], stderr


@pytest.mark.parametrize("user", ["ünï-cødé", "a" * 128, "😀", "alice@example.com", "-x"])
def test_chorus_token_of_an_unusual_user_id_is_accepted_by_the_server(
    api: Api, user: str, tmp_path: Path
) -> None:
    argv = ("--", user) if user.startswith("-") else (user,)
    done = _chorus_token(*argv, data_dir=tmp_path)
    assert done.returncode == 0, done
    token = done.stdout.decode().strip()
    response = _as(api, f"Bearer {token}")
    assert response.json()["data"] == {"viewer": {"user": {"id": user}}}, response.text


# --- the kept secret and the data directory ---------------------------------------------


def _chorus_without_secret(
    command: str, data_dir: Path, tmp_path: Path
) -> subprocess.CompletedProcess[bytes]:
    """``chorus token alice`` or ``chorus serve`` with no CHORUS_JWT_SECRET: the kept one."""
    env = {
        **child_environ(),
        "CHORUS_DATA_DIR": str(data_dir),
        "CHORUS_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}",
        "CHORUS_PORT": str(free_port()),
    }
    argv = ["token", "alice"] if command == "token" else ["serve"]
    return subprocess.run(
        [sys.executable, "-m", "chorus.cli", *argv],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )


def _one_line_refusal(done: subprocess.CompletedProcess[bytes]) -> str:
    assert done.returncode == 2, done
    assert done.stdout == b""
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    return stderr


@pytest.mark.parametrize("kept", ["", "\n", "abcde\n", " " * 40, "x" * 31], ids=repr)
@pytest.mark.parametrize("command", ["token", "serve"])
def test_a_kept_secret_too_short_exits_2_in_one_line(
    tmp_path: Path, command: str, kept: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "jwt-secret").write_text(kept)
    stderr = _one_line_refusal(_chorus_without_secret(command, data_dir, tmp_path))
    assert f"{data_dir / 'jwt-secret'} is too short" in stderr
    assert "at least 32" in stderr
    assert (data_dir / "jwt-secret").read_text() == kept  # nothing is lost or replaced


@pytest.mark.parametrize("command", ["token", "serve"])
def test_a_data_directory_that_is_a_file_exits_2_in_one_line(tmp_path: Path, command: str) -> None:
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0\n")
    stderr = _one_line_refusal(_chorus_without_secret(command, a_file, tmp_path))
    assert f"the data directory {a_file} is not a directory" in stderr
    # Beneath a file, the data directory cannot be created.
    stderr = _one_line_refusal(_chorus_without_secret(command, a_file / "data", tmp_path))
    assert f"cannot use {a_file / 'data'}" in stderr
    assert a_file.read_text() == "root:x:0:0\n"


def test_a_secret_of_32_characters_is_kept_and_generated_ones_are_used(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    done = _chorus_without_secret("token", data_dir, tmp_path)  # generated on first use
    assert done.returncode == 0, done
    generated = (data_dir / "jwt-secret").read_text().strip()
    assert len(generated) >= 32
    assert (data_dir / "jwt-secret").stat().st_mode & 0o777 == 0o600
    (data_dir / "jwt-secret").write_text("k" * 32 + "\n")
    done = _chorus_without_secret("token", data_dir, tmp_path)
    assert done.returncode == 0, done
    [_, claims_part, _] = done.stdout.decode().strip().split(".")
    signing_input = done.stdout.decode().strip().rsplit(".", 1)[0].encode()
    signature = hmac.new(b"k" * 32, signing_input, hashlib.sha256).digest()
    assert done.stdout.decode().strip().endswith(_b64(signature))
    assert json.loads(base64.urlsafe_b64decode(claims_part + "=="))["sub"] == "alice"


@pytest.mark.parametrize("command", ["token", "serve"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_kept_secret_that_is_no_regular_file_exits_2_without_hanging(
    tmp_path: Path, command: str, kind: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    kept = data_dir / "jwt-secret"
    if kind == "fifo":
        os.mkfifo(kept)  # reading it would wait for a writer forever
    else:
        kept.symlink_to("/dev/zero")  # reading it would never end
    stderr = _one_line_refusal(_chorus_without_secret(command, data_dir, tmp_path))
    assert f"{kept} is not a file of at most 4096 bytes" in stderr


@pytest.mark.parametrize("command", ["token", "serve"])
def test_a_data_directory_whose_parent_is_missing_is_not_created(
    tmp_path: Path, command: str
) -> None:
    """A mistyped CHORUS_DATA_DIR would get a new secret, and tokens the server refuses."""
    mistyped = tmp_path / "no-such-parent" / "data"
    stderr = _one_line_refusal(_chorus_without_secret(command, mistyped, tmp_path))
    assert "No such file or directory" in stderr
    assert not mistyped.parent.exists()
