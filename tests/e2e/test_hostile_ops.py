"""Hostile operations against a running ``chorus serve``: the metrics and the embedded database.

Class 9 of issue 10: made-up operation names sent without a token must not
become ``operation_name`` labels (nor crowd out the real ones), and
``/metrics`` answers only the bearer of ``CHORUS_METRICS_TOKEN`` when it is
set. Class 10: a second ``chorus serve`` on one SQLite file (or one PostgreSQL
database) is refused with one line (exit 2), a killed server leaves no lock behind, and an edit
committed by a separate ``chorus`` CLI process reaches a running server's
WebSocket subscribers, in order, once each. Every wait is bounded; nothing
asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from chorus.auth import mint_token
from chorus.graphql.execution.operation_metrics import MAX_OPERATION_NAMES_PER_USER
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add
from tests.servers import (
    TEST_SECRET,
    ChorusServer,
    create_database,
    drop_database,
    postgres_url,
)

METRICS_TOKEN = "scrape-" + "s" * 24
CONFIGURED = "PublicStatus"
LABEL = re.compile(r"^chorus_graphql_request_seconds_count\{([^}]*)\}", re.MULTILINE)
PROTOCOL = Subprotocol("graphql-transport-ws")
WAIT_S = patience(20.0)
"""A generous bound on any one wait for the server."""
DELIVERY_WAIT_S = patience(5.0)
"""How long a subscriber waits for an edit another process committed: generous for a
prompt delivery, yet shorter than the streams' 15 s idle check, which would find it too."""

SUBSCRIPTION = """
subscription Events($playlistId: ID!, $sinceVersion: Int!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: $sinceVersion) {
    __typename
    ... on PlaylistChanged { version operationId changes { __typename } }
  }
}
"""


def _sqlite(data_dir: Path, **env: str) -> ChorusServer:
    return ChorusServer(f"sqlite+aiosqlite:///{data_dir / 'chorus.db'}", data_dir, **env)


def _auth(user: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(TEST_SECRET, user)}"}


# --- class 9: metrics ---------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    """A server whose /metrics needs a token, with one operation name always labelled."""
    server = _sqlite(
        tmp_path_factory.mktemp("metrics"),
        CHORUS_METRICS_TOKEN=METRICS_TOKEN,
        CHORUS_METRICS_OPERATION_NAMES=f"{CONFIGURED}, OtherConfigured",
    )
    server.start()
    yield server
    server.stop()


def _names(server: ChorusServer) -> set[str]:
    """The ``operation_name`` labels of the request latency histogram, as scraped."""
    scraped = httpx.get(
        f"{server.base_url}/metrics",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
        timeout=WAIT_S,
    )
    assert scraped.status_code == 200, scraped.text
    names = set()
    for labels in LABEL.findall(scraped.text):
        found = re.search(r'operation_name="([^"]*)"', labels)
        assert found is not None, labels
        names.add(found.group(1))
    return names


def _query(server: ChorusServer, name: str, user: str | None, body: str = "__typename") -> None:
    headers = _auth(user) if user else {}
    document = {"query": f"query {name} {{ {body} }}", "operationName": name}
    answer = httpx.post(server.url, json=document, headers=headers, timeout=WAIT_S)
    assert answer.status_code in (200, 400), answer.text


def test_made_up_names_without_a_token_add_no_labels(guarded: ChorusServer) -> None:
    _query(guarded, "Warmup", None)  # the first scrape then shows the series of "other"
    before = _names(guarded)
    made_up = [f"Made{uuid.uuid4().hex}" for _ in range(300)]
    with httpx.Client(timeout=WAIT_S) as client:
        for name in made_up:
            answer = client.post(
                guarded.url, json={"query": f"query {name} {{ __typename }}", "operationName": name}
            )
            assert answer.status_code == 200, answer.text
    after = _names(guarded)
    assert after == before | {"other"}
    assert not after & set(made_up)

    # A real operation of an authenticated caller is still labelled afterwards,
    # and so is a configured name, whoever sends it.
    _query(guarded, "MyPlaylists", "alice", "viewer { user { id } }")
    _query(guarded, CONFIGURED, None)
    assert {"MyPlaylists", CONFIGURED} <= _names(guarded)


def test_a_refused_operation_teaches_no_name(guarded: ChorusServer) -> None:
    _query(guarded, "NoSuchField", "alice", "noSuchField")  # fails validation
    entries = "entries(first: 100) { edges { node { media { title } } } }"
    pages = f"viewer {{ playlists(first: 100) {{ edges {{ node {{ {entries} }} }} }} }}"
    _query(guarded, "TooExpensive", "alice", pages)  # over the cost limit: refused
    assert not {"NoSuchField", "TooExpensive"} & _names(guarded)


def test_one_user_teaches_a_bounded_number_of_names(guarded: ChorusServer) -> None:
    taught = [f"Mallory{i}" for i in range(MAX_OPERATION_NAMES_PER_USER + 10)]
    for name in taught:
        _query(guarded, name, "mallory")
    assert len(_names(guarded) & set(taught)) == MAX_OPERATION_NAMES_PER_USER
    _query(guarded, "TrentQuery", "trent", "viewer { user { id } }")
    assert "TrentQuery" in _names(guarded)  # other users still have theirs


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-of-the-same-size!!"},
        {"Authorization": f"Basic {METRICS_TOKEN}"},
        {"Authorization": f"Bearer {METRICS_TOKEN}x"},
        {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'alice')}"},  # a user is not a scraper
    ],
)
def test_metrics_need_the_metrics_token(guarded: ChorusServer, headers: dict[str, str]) -> None:
    refused = httpx.get(f"{guarded.base_url}/metrics", headers=headers, timeout=WAIT_S)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert "chorus_" not in refused.text


def test_the_metrics_token_opens_metrics(guarded: ChorusServer) -> None:
    scraped = httpx.get(
        f"{guarded.base_url}/metrics",
        headers={"Authorization": f"bearer {METRICS_TOKEN}"},
        timeout=WAIT_S,
    )
    assert scraped.status_code == 200
    assert "chorus_outbox_backlog" in scraped.text
    assert httpx.get(f"{guarded.base_url}/healthz", timeout=WAIT_S).status_code == 200


# --- class 10: one embedded server per SQLite file ----------------------------------


def _second_serve(server: ChorusServer, **env: str) -> subprocess.CompletedProcess[str]:
    """``chorus serve`` on ``server``'s database and a port of its own, run to its end."""
    second = _sqlite(Path(server.env["CHORUS_DATA_DIR"]))
    return subprocess.run(
        [sys.executable, "-m", "chorus.cli", "serve", "--log-level", "warning"],
        env={**second.env, "CHORUS_DATABASE_URL": server.database_url, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_serve_on_the_same_database_is_refused(tmp_path: Path) -> None:
    first = _sqlite(tmp_path)
    first.start()
    try:
        refused = _second_serve(first)
        assert refused.returncode == 2, refused
        assert refused.stdout == ""
        lines = refused.stderr.splitlines()
        assert len(lines) == 1, refused.stderr
        assert "another chorus serve" in lines[0]
        assert str(tmp_path / "chorus.db") in lines[0]
        assert "full profile" in lines[0]
        assert "PostgreSQL" in lines[0]
        # The same file by another spelling of its path is the same file.
        relative = _second_serve(
            first, CHORUS_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/./chorus.db"
        )
        assert relative.returncode == 2, relative
        assert httpx.get(f"{first.base_url}/healthz", timeout=WAIT_S).status_code == 200
    finally:
        first.stop()


def test_a_second_serve_on_one_postgres_database_is_refused(
    tmp_path: Path, postgres_template: str
) -> None:
    # PostgreSQL has no file to lock: a session advisory lock stands in, and a
    # kill -9 releases it as the end of its connection.
    name = create_database(template=postgres_template)
    first = ChorusServer(postgres_url(name), tmp_path)
    first.start()
    assert first.process is not None
    pid = first.process.pid
    try:
        refused = _second_serve(first)
        assert refused.returncode == 2, refused
        lines = refused.stderr.splitlines()
        assert len(lines) == 1, refused.stderr
        assert f"another chorus serve (chorus serve {pid} on " in lines[0]
        assert "full profile" in lines[0]
        assert httpx.get(f"{first.base_url}/healthz", timeout=WAIT_S).status_code == 200
        first.kill()
        first.stop()
        second = ChorusServer(postgres_url(name), tmp_path)
        second.start()
        second.stop()
    finally:
        first.stop()
        drop_database(name)


def test_a_killed_server_does_not_block_the_next_start(tmp_path: Path) -> None:
    first = _sqlite(tmp_path)
    first.start()
    first.kill()
    first.stop()  # nothing left to stop: closes its log
    assert (tmp_path / "chorus.db.serve-lock").exists()  # left behind by kill -9
    second = _sqlite(tmp_path)
    second.start()
    try:
        assert httpx.get(f"{second.base_url}/healthz", timeout=WAIT_S).status_code == 200
    finally:
        second.stop()
    third = _sqlite(tmp_path)  # and a clean stop releases it too
    third.start()
    third.stop()


def _slice(path: Path, tracks: int) -> Path:
    """A Million Playlist Dataset slice of one playlist (pid 7) with ``tracks`` tracks."""
    items = [
        {
            "pos": i,
            "track_uri": f"spotify:track:ops{i:04d}",
            "track_name": f"Track {i}",
            "artist_name": "Artist",
            "album_name": "Album",
            "duration_ms": 1000 + i,
        }
        for i in range(tracks)
    ]
    playlist = {"pid": 7, "name": "Beside", "collaborative": "false", "tracks": items}
    path.write_text(json.dumps({"playlists": [playlist]}))
    return path


def _import(server: ChorusServer, path: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "chorus.cli", "import", "mpd", str(path), "--owner", "alice"],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


async def _subscribe(server: ChorusServer, playlist_id: str, since: int) -> ClientConnection:
    ws = await connect(
        server.url.replace("http://", "ws://"), subprotocols=[PROTOCOL], open_timeout=WAIT_S
    )
    await ws.send(json.dumps({"type": "connection_init", "payload": _auth()}))
    ack = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
    assert ack["type"] == "connection_ack", ack
    variables = {"playlistId": playlist_id, "sinceVersion": since}
    await ws.send(
        json.dumps(
            {
                "id": "1",
                "type": "subscribe",
                "payload": {"query": SUBSCRIPTION, "variables": variables},
            }
        )
    )
    return ws


async def _event(ws: ClientConnection, timeout_s: float = WAIT_S) -> dict[str, Any]:
    message = json.loads(await asyncio.wait_for(ws.recv(), timeout_s))
    assert message["type"] == "next", message
    event: dict[str, Any] = message["payload"]["data"]["playlistEvents"]
    return event


def _wait_for_streams(server: ChorusServer, count: int) -> None:
    for _ in range(200):
        health = httpx.get(f"{server.base_url}/healthz", timeout=WAIT_S).json()
        if health["live_streams"] == count:
            return
        time.sleep(0.05)
    raise AssertionError(f"the server never had {count} live streams: {health}")


def _version(api: Api, playlist_id: str) -> int:
    version: int = api.data("query($id: ID!) { playlist(id: $id) { version } }", id=playlist_id)[
        "playlist"
    ]["version"]
    return version


def test_a_cli_edit_reaches_a_running_servers_subscriber(tmp_path: Path) -> None:
    server = _sqlite(tmp_path)
    server.start()
    api = Api(server)
    try:
        first = _import(server, _slice(tmp_path / "first.json", 100))
        playlist_id = first.stdout.split()[0]  # created (v0) and 100 entries added (v1)

        # Read twice: the second answer comes from the response cache.
        for _ in range(2):
            assert _version(api, playlist_id) == 1

        async def watch() -> list[int]:
            ws = await _subscribe(server, playlist_id, since=1)
            try:
                # The stream is live (it found nothing after v1) before the CLI runs.
                await asyncio.to_thread(_wait_for_streams, server, 1)
                # 250 tracks: the first 100 replay, two more adds commit v2 and v3.
                await asyncio.to_thread(_import, server, _slice(tmp_path / "more.json", 250))
                versions = [(await _event(ws, DELIVERY_WAIT_S))["version"] for _ in range(2)]
                # The relay that delivered them also ended the cached answer at v1.
                assert await asyncio.to_thread(_version, api, playlist_id) == 3
                # No repeat after them: the next event is the next edit, made over the API.
                await asyncio.to_thread(add, api, playlist_id, ["chinook:track:1"], 3)
                versions.append((await _event(ws))["version"])
                return versions
            finally:
                await ws.close()

        assert asyncio.run(watch()) == [2, 3, 4]
    finally:
        api.http.close()
        server.stop()


def test_serve_on_port_0_prints_the_port_it_listens_on(tmp_path: Path) -> None:
    server = _sqlite(tmp_path)
    with subprocess.Popen(
        [sys.executable, "-m", "chorus.cli", "serve", "--log-level", "warning"],
        env={**server.env, "CHORUS_DATABASE_URL": server.database_url, "CHORUS_PORT": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            banner = process.stdout.readline()
            found = re.search(r"on http://127\.0\.0\.1:(\d+)/graphql", banner)
            assert found, banner
            port = int(found.group(1))
            assert port != 0, banner
            deadline = time.monotonic() + patience(30)
            while True:
                try:
                    alive = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the printed port never answered"
                    time.sleep(0.1)
            assert alive.json()["status"] == "ok"
        finally:
            process.terminate()
            process.wait(timeout=30)
