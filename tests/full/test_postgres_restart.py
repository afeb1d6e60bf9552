"""Failure table: PostgreSQL is stopped under a running Chorus, then started again.

While it is away, queries and mutations answer at once with a top-level
error ``SERVICE_UNAVAILABLE`` (never hang, never ``INTERNAL_SERVER_ERROR``)
and commit nothing; ``/healthz`` stays 200 while ``/readyz`` names the
database. Once it is back, the same server process serves again, and the
retries of what failed commit exactly once. A PostgreSQL that stops answering
without closing anything (frozen) fails them too, after the statement timeout,
instead of holding them for as long as it stays frozen.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from chorus.auth import mint_token
from chorus.db.engine import CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_S
from tests.e2e.helpers import PLAYLIST, error_codes, mutation_document, track
from tests.servers import TEST_SECRET, ChorusServer, PostgresCluster

PROMPT_S = 2 * CONNECT_TIMEOUT_S
"""A request while the database is away answers once the connect timeout fires.

Not a speed claim: it tells "refused, said so" from "hung until the client's
own 30 s timeout"; the margin absorbs a loaded machine.
"""

CHANGES = """
query Changes($id: ID!) {
  playlist(id: $id) {
    version
    entryCount
    changes(sinceVersion: 0, first: 100) { currentVersion hasMore versions { version operationId } }
  }
}
"""


@pytest.fixture
def chorus(private_postgres: PostgresCluster, tmp_path: Path) -> Iterator[ChorusServer]:
    server = ChorusServer(private_postgres.url, tmp_path)
    server.start()
    yield server
    server.stop()


def _post(server: ChorusServer, query: str, **variables: Any) -> tuple[dict[str, Any], float]:
    """The response body (asserting HTTP 200) and how long it took."""
    headers = {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'alice')}"}
    started = time.monotonic()
    response = httpx.post(
        server.url, json={"query": query, "variables": variables}, headers=headers, timeout=30
    )
    took = time.monotonic() - started
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body, took


def _add(server: ChorusServer, playlist_id: str, operation_id: str, media_id: str) -> Any:
    return _post(
        server,
        mutation_document("addEntries"),
        input={
            "playlistId": playlist_id,
            "operationId": operation_id,
            "baseVersion": 0,
            "mediaIds": [media_id],
        },
    )


def _create(server: ChorusServer) -> str:
    body, _ = _post(
        server,
        mutation_document("createPlaylist"),
        input={"operationId": "create", "title": "Through a restart"},
    )
    assert "errors" not in body, body
    playlist_id: str = body["data"]["createPlaylist"]["playlist"]["id"]
    return playlist_id


def _committed(body: dict[str, Any], server: ChorusServer | None = None) -> dict[str, Any]:
    """``body``'s ``addEntries`` payload, which committed; a failure after the restart
    shows the end of ``server``'s log (what the pool and the driver said)."""
    if "errors" in body and server is not None:
        raise AssertionError(f"{body}\n--- chorus log:\n{server.log.read_text()[-4000:]}")
    assert "errors" not in body, body
    payload: dict[str, Any] = body["data"]["addEntries"]
    assert payload["userErrors"] == [], payload
    assert payload["version"] is not None, payload
    return payload


def _unavailable(body: dict[str, Any], took: float | None) -> None:
    """``body`` is the database-unavailable error, answered within PROMPT_S if ``took`` is given."""
    assert error_codes(body) == ["SERVICE_UNAVAILABLE"], body
    assert "database is not available" in body["errors"][0]["message"]
    if took is not None:
        assert took < PROMPT_S


def test_requests_fail_cleanly_while_postgres_is_away_and_work_after(
    chorus: ChorusServer, private_postgres: PostgresCluster
) -> None:
    playlist_id = _create(chorus)
    assert _committed(_add(chorus, playlist_id, "before", track(1))[0])["version"] == 1

    private_postgres.stop()

    body, took = _post(chorus, PLAYLIST, id=playlist_id)
    _unavailable(body, took)
    assert body["data"] == {"playlist": None}
    body, took = _add(chorus, playlist_id, "during", track(2))
    _unavailable(body, took)
    assert body["data"] is None
    body, took = _post(
        chorus,
        mutation_document("createPlaylist"),
        input={"operationId": "create-during", "title": "Never"},
    )
    _unavailable(body, took)

    assert httpx.get(f"{chorus.base_url}/healthz", timeout=5).status_code == 200
    ready = httpx.get(f"{chorus.base_url}/readyz", timeout=5)
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    assert ready.json()["checks"]["postgresql"].startswith("down: "), ready.json()
    assert httpx.get(f"{chorus.base_url}/metrics", timeout=5).status_code == 200

    private_postgres.start()

    assert httpx.get(f"{chorus.base_url}/readyz", timeout=5).status_code == 200
    body, _ = _post(chorus, PLAYLIST, id=playlist_id)
    assert body["data"]["playlist"]["version"] == 1, body  # "during" wrote nothing
    retried = _committed(_add(chorus, playlist_id, "during", track(2))[0], chorus)
    assert (retried["version"], retried["replayed"]) == (2, False)
    again = _committed(_add(chorus, playlist_id, "during", track(2))[0])
    assert (again["version"], again["replayed"]) == (2, True)
    final = _post(chorus, CHANGES, id=playlist_id)[0]["data"]["playlist"]
    assert final["entryCount"] == 2
    assert [v["operationId"] for v in final["changes"]["versions"]] == ["before", "during"]


def test_mutations_in_flight_when_postgres_stops_commit_once_on_retry(
    chorus: ChorusServer, private_postgres: PostgresCluster
) -> None:
    playlist_id = _create(chorus)
    operations = {f"flight-{i}": track(i + 1) for i in range(60)}
    outcomes: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    enough = threading.Event()

    def send(operation_id: str, media_id: str) -> None:
        # Sixty requests queue for the pool's twenty connections, so how long
        # one took says nothing; a hang still fails at the client's 30 s.
        body, _ = _add(chorus, playlist_id, operation_id, media_id)
        if "errors" in body:
            _unavailable(body, None)
        else:
            _committed(body)
        with lock:
            outcomes[operation_id] = body
            if len(outcomes) >= 5:
                enough.set()

    with ThreadPoolExecutor(max_workers=len(operations)) as pool:
        futures = [pool.submit(send, op, media) for op, media in operations.items()]
        assert enough.wait(timeout=60)
        private_postgres.stop()
        for future in futures:
            future.result()  # every answer was a commit or SERVICE_UNAVAILABLE
    failed = [op for op, body in outcomes.items() if "errors" in body]
    assert failed, "every mutation finished before PostgreSQL stopped"

    private_postgres.start()
    retried = {
        op: _committed(_add(chorus, playlist_id, op, m)[0], chorus) for op, m in operations.items()
    }
    for op, body in outcomes.items():
        # A commit answered before the stop (perhaps without its `playlist`,
        # read after the commit) replays as it was.
        first = (body["data"] or {}).get("addEntries")
        if first is not None:
            assert retried[op]["replayed"] is True
            assert retried[op]["version"] == first["version"]
            assert retried[op]["entries"] == first["entries"]
    assert sorted(p["version"] for p in retried.values()) == list(range(1, len(operations) + 1))
    final = _post(chorus, CHANGES, id=playlist_id)[0]["data"]["playlist"]
    assert final["version"] == final["entryCount"] == len(operations)
    log = final["changes"]["versions"]
    assert [v["version"] for v in log] == list(range(1, len(operations) + 1))
    assert sorted(v["operationId"] for v in log) == sorted(operations)


@contextmanager
def _frozen(cluster: PostgresCluster) -> Iterator[None]:
    """PostgreSQL answers nothing and closes nothing (``SIGSTOP`` to the postmaster, then to
    every backend), as a hung host or a network partition looks to its clients."""
    assert cluster.process is not None
    postmaster = cluster.process.pid
    os.kill(postmaster, signal.SIGSTOP)  # first: it forks no backend meanwhile
    stopped = [postmaster]
    try:
        for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
            os.kill(int(child), signal.SIGSTOP)
            stopped.append(int(child))
        yield
    finally:
        for pid in reversed(stopped):
            os.kill(pid, signal.SIGCONT)


def test_requests_fail_instead_of_hanging_while_postgres_is_frozen_and_work_after(
    chorus: ChorusServer, private_postgres: PostgresCluster
) -> None:
    playlist_id = _create(chorus)
    assert _committed(_add(chorus, playlist_id, "before", track(1))[0])["version"] == 1

    with _frozen(private_postgres), ThreadPoolExecutor(max_workers=2) as pool:
        # Each answers within the statement timeout (plus a connect timeout, if the
        # connection it had was dropped): well inside the client's 30 s, which would
        # raise here instead.
        assert STATEMENT_TIMEOUT_S + CONNECT_TIMEOUT_S < 30
        read = pool.submit(_post, chorus, PLAYLIST, id=playlist_id)
        write = pool.submit(_add, chorus, playlist_id, "frozen", track(2))
        read_body, _ = read.result()
        write_body, _ = write.result()
    _unavailable(read_body, None)
    assert read_body["data"] == {"playlist": None}
    _unavailable(write_body, None)
    assert write_body["data"] is None

    retried = _committed(_add(chorus, playlist_id, "frozen", track(2))[0], chorus)
    assert (retried["version"], retried["replayed"]) == (2, False)
    final = _post(chorus, CHANGES, id=playlist_id)[0]["data"]["playlist"]
    assert final["entryCount"] == 2
    assert [v["operationId"] for v in final["changes"]["versions"]] == ["before", "frozen"]
