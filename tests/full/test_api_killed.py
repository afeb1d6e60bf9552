"""Failure table: the API process is killed (SIGKILL) while mutations are in flight.

Many clients add entries at once, each with its own operation id; the
server dies under them; a new server starts on the same database and every
client retries with the same operation id and input. Each logical operation
must have committed exactly once: the ones that had committed answer
``replayed: true`` with their first answer, the others commit now, and the
log has no gap and no double.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from chorus.auth import mint_token
from tests.e2e.helpers import mutation_document, track
from tests.servers import TEST_SECRET, ChorusServer

OPERATIONS = 80
KILL_AFTER_ANSWERS = 5

CHANGES = """
query Changes($id: ID!) {
  playlist(id: $id) {
    version
    entryCount
    entries(first: 100) { totalCount edges { node { id mediaId } } }
    changes(sinceVersion: 0, first: 100) {
      currentVersion hasMore versions { version operationId }
    }
  }
}
"""


def _post(url: str, query: str, **variables: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'alice')}"}
    response = httpx.post(
        url, json={"query": query, "variables": variables}, headers=headers, timeout=30
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _add_entry(url: str, playlist_id: str, operation_id: str, media_id: str) -> dict[str, Any]:
    """The committed payload of one ``addEntries`` (asserts it committed)."""
    body = _post(
        url,
        mutation_document("addEntries"),
        input={
            "playlistId": playlist_id,
            "operationId": operation_id,
            "baseVersion": 0,
            "mediaIds": [media_id],
        },
    )
    assert "errors" not in body, body
    payload: dict[str, Any] = body["data"]["addEntries"]
    assert payload["userErrors"] == [], payload
    assert payload["version"] is not None, payload
    return payload


def test_retries_after_a_kill_commit_each_operation_once(pg_url: str, tmp_path: Path) -> None:
    first = ChorusServer(pg_url, tmp_path)
    first.start()
    created = _post(
        first.url,
        mutation_document("createPlaylist"),
        input={"operationId": "create", "title": "Crash test"},
    )
    playlist_id: str = created["data"]["createPlaylist"]["playlist"]["id"]
    operations = {f"kill-{i}": track(i + 1) for i in range(OPERATIONS)}

    answers: dict[str, dict[str, Any]] = {}
    lost: dict[str, str] = {}
    lock = threading.Lock()
    enough = threading.Event()

    def send(operation_id: str, media_id: str) -> None:
        try:
            payload = _add_entry(first.url, playlist_id, operation_id, media_id)
        except httpx.HTTPError as error:  # the server died under this request
            with lock:
                lost[operation_id] = type(error).__name__
            return
        with lock:
            answers[operation_id] = payload
            if len(answers) >= KILL_AFTER_ANSWERS:
                enough.set()

    try:
        with ThreadPoolExecutor(max_workers=OPERATIONS) as pool:
            futures = [pool.submit(send, op, media) for op, media in operations.items()]
            assert enough.wait(timeout=60), "no mutation answered"
            first.kill()
            for future in futures:
                future.result()
    finally:
        first.stop()
    assert answers, "nothing committed before the kill"
    assert lost, "every mutation finished before the kill: nothing was in flight"
    assert len(answers) + len(lost) == OPERATIONS

    second = ChorusServer(pg_url, tmp_path)
    second.start()
    try:
        retried = {
            op: _add_entry(second.url, playlist_id, op, media) for op, media in operations.items()
        }
        final = _post(second.url, CHANGES, id=playlist_id)["data"]["playlist"]
    finally:
        second.stop()

    # Those answered before the kill replay their first answer exactly.
    for op, payload in answers.items():
        again = retried[op]
        assert again["replayed"] is True, again
        assert again["version"] == payload["version"]
        assert again["entries"] == payload["entries"]

    # One version per logical operation: 1..N, none twice, none missing.
    versions = sorted(p["version"] for p in retried.values())
    assert versions == list(range(1, OPERATIONS + 1))
    assert final["version"] == OPERATIONS
    assert final["entryCount"] == final["entries"]["totalCount"] == OPERATIONS
    media = sorted(edge["node"]["mediaId"] for edge in final["entries"]["edges"])
    assert media == sorted(operations.values())

    log = final["changes"]
    assert log["hasMore"] is False
    assert log["currentVersion"] == OPERATIONS
    assert [v["version"] for v in log["versions"]] == list(range(1, OPERATIONS + 1))
    assert sorted(v["operationId"] for v in log["versions"]) == sorted(operations)
    for op, payload in retried.items():
        logged = log["versions"][payload["version"] - 1]
        assert logged["operationId"] == op
