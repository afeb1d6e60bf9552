"""The ecosystem's clients against the committed schema and a running ``chorus serve``.

``tests/clients`` is its own Node project (``npm ci --prefix tests/clients``,
which ``scripts/test`` runs): graphql-codegen's ``typescript`` and
``typescript-operations`` type its operations and ``tsc --noEmit`` checks a
client's code against them; relay-compiler compiles fragments using
``@connection``, ``@refetchable``, ``@appendNode`` and ``@deleteRecord``, and
the operations it compiled run against the server, in relay-runtime's store
too; Apollo Client 4's
``InMemoryCache`` normalises entries and media and takes a mutation's payload
into its cache; the README's JavaScript example runs on Node 20 as written.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.e2e.conftest import Api, running_server
from tests.e2e.helpers import add, committed, create_playlist, mutate, track
from tests.servers import ChorusServer

ROOT = Path(__file__).parents[2]
CLIENTS = ROOT / "tests" / "clients"
BIN = CLIENTS / "node_modules" / ".bin"


def node() -> str:
    found = shutil.which("node")
    if found is None or not (BIN / "relay-compiler").exists():
        pytest.fail("node and `npm ci --prefix tests/clients` (scripts/test runs it) are needed")
    return found


def run(*command: str, timeout: float = 120) -> str:
    """``command`` run in tests/clients; its stdout. Fails the test, with its output, on a
    non-zero exit."""
    done = subprocess.run(
        command, cwd=CLIENTS, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_codegen_types_the_operations_and_tsc_accepts_a_client_using_them() -> None:
    node()
    generated = CLIENTS / "codegen" / "__generated__"
    shutil.rmtree(generated, ignore_errors=True)
    run(shutil.which("npm") or "npm", "run", "--silent", "codegen")  # as docs/clients.md says
    operations = (generated / "operations.ts").read_text()
    # The subscription's union and its changes' union come out as tagged unions.
    assert "__typename: 'ResyncRequired', currentVersion: number" in operations
    assert "removedEntryIds: Array<string>" in operations
    assert "export type Media = {" in (generated / "schema.ts").read_text()
    run(shutil.which("npm") or "npm", "run", "--silent", "typecheck")


def relay_artifacts() -> dict[str, str]:
    """relay-compiler's artifacts of ``tests/clients/relay``, by name."""
    node()
    generated = CLIENTS / "relay" / "__generated__"
    shutil.rmtree(generated, ignore_errors=True)
    run(str(BIN / "relay-compiler"))
    return {p.name.removesuffix(".graphql.js"): p.read_text() for p in generated.glob("*.js")}


def operation_text(artifact: str) -> str:
    """The document a compiled Relay operation sends."""
    match = re.search(r'"text": ("(?:[^"\\]|\\.)*")', artifact)
    assert match, artifact[:500]
    text: str = json.loads(match.group(1))
    return text


@pytest.fixture(scope="module")
def relay() -> dict[str, str]:
    return relay_artifacts()


def test_relay_compiles_connections_refetch_append_and_delete(relay: dict[str, str]) -> None:
    assert '"handle": "connection"' in relay["PlaylistViewQuery"]
    assert '"handle": "appendNode"' in relay["PlaylistViewAddMutation"]
    assert '"handle": "deleteRecord"' in relay["PlaylistViewRemoveMutation"]
    # @refetchable refetches the playlist through Query.node.
    assert "node(id: $id)" in operation_text(relay["PlaylistViewPaginationQuery"])


def test_relay_operations_run_and_delete_record_gets_the_ids_relay_stored(
    relay: dict[str, str], api: Api
) -> None:
    pid = create_playlist(api, title="Relay")
    base = add(api, pid, [track(n) for n in (1, 2, 3)], 0)["version"]
    page = api.data(operation_text(relay["PlaylistViewQuery"]), id=pid)["playlist"]
    ids = [e["node"]["id"] for e in page["entries"]["edges"]]
    assert len(ids) == 3
    more = api.data(
        operation_text(relay["PlaylistViewPaginationQuery"]), id=pid, count=1, cursor=None
    )["node"]
    assert [e["node"]["id"] for e in more["entries"]["edges"]] == ids[:1]
    added = api.data(
        operation_text(relay["PlaylistViewAddMutation"]),
        input={"playlistId": pid, "operationId": api.op(), "baseVersion": base, "mediaIds": []},
        connections=[],
    )["addEntries"]
    assert [e["code"] for e in added["userErrors"]] == ["INVALID_INPUT"]

    remove = {
        "playlistId": pid,
        "operationId": api.op(),
        "baseVersion": base,
        "entryIds": [ids[2], ids[0]],
    }
    document = operation_text(relay["PlaylistViewRemoveMutation"])
    removed = api.data(document, input=remove)["removeEntries"]
    # The record ids Relay keeps for entries are their `id`s: @deleteRecord finds them.
    assert removed["removedEntryIds"] == [ids[2], ids[0]]
    assert removed["skippedEntryIds"] == []
    again = api.data(document, input=remove)["removeEntries"]
    assert again["replayed"]
    assert again["removedEntryIds"] == [ids[2], ids[0]]
    partly = committed(
        mutate(api, "removeEntries", playlistId=pid, baseVersion=base, entryIds=ids[:2])
    )
    assert (partly["removedEntryIds"], partly["skippedEntryIds"]) == ([ids[1]], [ids[0]])


def test_relay_runtime_appends_and_deletes_records_in_its_store(
    relay: dict[str, str], server: ChorusServer, api: Api
) -> None:
    pid = create_playlist(api, title="Relay store")
    ids = [e["id"] for e in add(api, pid, [track(n) for n in (1, 2, 3)], 0)["entries"]]
    out = run(node(), "relay/store.mjs", server.url, api.token("alice"), pid)
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    assert result["before"] == ids
    (new,) = result["added"]
    assert result["afterAdd"] == [*ids, new]
    assert result["removedEntryIds"] == [ids[0], new]
    assert result["afterRemove"] == ids[1:]
    assert result["records"] == {ids[0]: None, new: None}
    # Media are Relay records too, keyed by their catalog id.
    assert result["media"] == "Media"


def test_apollo_normalises_entries_and_media_and_takes_a_mutation_payload(
    server: ChorusServer, api: Api
) -> None:
    pid = create_playlist(api, title="Apollo")
    added = add(api, pid, [track(n) for n in (1, 2, 3, 1)], 0)
    entry_ids = [e["id"] for e in added["entries"]]
    out = run(node(), "apollo/cache.mjs", server.url, api.token("alice"), pid)
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    keys = set(result["keys"])
    assert {f"PlaylistEntry:{e}" for e in entry_ids} <= keys
    # Track 1 twice in the list is one Media record.
    assert {k for k in keys if k.startswith("Media:")} == {f"Media:{track(n)}" for n in (1, 2, 3)}
    assert f"Playlist:{pid}" in keys
    assert result["mutationErrors"] == []
    # The payload's `playlist { id title version }` updated the cached playlist:
    # the cache-only read after it made no request and sees the new title.
    assert result["cachedTitle"] == result["playlistRecordTitle"] == "Renamed by Apollo"
    assert result["cachedVersion"] == 2
    assert result["requestsAfterMutation"] == 0
    assert result["requests"] == 3
    assert result["mergedEdges"] == entry_ids


def readme_js() -> str:
    blocks = re.findall(r"^```js\n(.*?)^```$", (ROOT / "README.md").read_text(), re.M | re.S)
    assert len(blocks) == 1, "the README has one JavaScript example"
    code: str = blocks[0]
    return code


def lines_of(stream: IO[str]) -> Iterator[str]:
    """Each line of ``stream`` as it comes, within 30 s each (a reader thread)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    while True:
        yield lines.get(timeout=30)


def start_readme_example(
    server: ChorusServer, api: Api, pid: str, name: str, stderr: Path, token: str | None = None
) -> subprocess.Popen[str]:
    """The README's ``watch.mjs`` watching ``pid`` as alice (or with ``token``), its stdout
    a pipe."""
    env = {
        **os.environ,
        "CHORUS_TOKEN": api.token("alice") if token is None else token,
        "CHORUS_PLAYLIST": pid,
        "CHORUS_WS_URL": server.url.replace("http://", "ws://"),
    }
    # Inside tests/clients, so that its bare imports resolve from node_modules there.
    script = CLIENTS / "__generated__" / name
    script.parent.mkdir(exist_ok=True)
    script.write_text(readme_js())
    with stderr.open("w") as errors:
        return subprocess.Popen(
            [node(), str(script)],
            cwd=CLIENTS,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )


def test_the_readme_javascript_example_runs_on_node_as_written(
    server: ChorusServer, api: Api, tmp_path: Path
) -> None:
    pid = create_playlist(api, title="README")
    entries = add(api, pid, [track(1), track(2)], 0)["entries"]
    stderr = tmp_path / "stderr"
    example = start_readme_example(server, api, pid, "watch.mjs", stderr)
    try:
        assert example.stdout
        events = lines_of(example.stdout)
        replayed = json.loads(next(events))
        assert replayed["__typename"] == "PlaylistChanged"
        assert replayed["version"] == 1
        assert [e["id"] for e in replayed["changes"][0]["entries"]] == [e["id"] for e in entries]
        mutate(api, "removeEntries", playlistId=pid, baseVersion=1, entryIds=[entries[0]["id"]])
        live = json.loads(next(events))
        assert live["version"] == 2
        assert live["changes"] == [{"__typename": "EntriesRemoved", "entryIds": [entries[0]["id"]]}]
    finally:
        example.kill()
        example.wait(timeout=10)
        example.stdout.close()
    assert stderr.read_text() == ""


def test_the_readme_javascript_example_stops_and_says_why_on_a_refused_token(
    server: ChorusServer, api: Api, tmp_path: Path
) -> None:
    # A fresh user's find: on 4403 (a token expired, or none) it reconnected every
    # second, forever, printing nothing.
    pid = create_playlist(api, title="README")
    stderr = tmp_path / "stderr"
    example = start_readme_example(server, api, pid, "watch-refused.mjs", stderr, "not-a-token")
    try:
        assert example.wait(timeout=30) == 0
    finally:
        example.kill()
        if example.stdout:
            example.stdout.close()
    assert stderr.read_text().startswith("closed 4403: ")


def test_the_readme_javascript_example_resumes_after_a_restart_without_repeats(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The new user's finding: graphql-ws gave up on a refused reconnect, and its own
    retry re-sent ``sinceVersion`` 0, printing every version again. The example
    resubscribes itself from the last version applied: across a ``kill -9`` and a
    restart it prints each version once."""
    with running_server("sqlite", tmp_path_factory) as server:
        api = Api(server)
        pid = create_playlist(api, title="README")
        entries = add(api, pid, [track(1), track(2)], 0)["entries"]
        example = start_readme_example(server, api, pid, "watch-restart.mjs", tmp_path / "stderr")
        try:
            assert example.stdout
            events = lines_of(example.stdout)
            assert json.loads(next(events))["version"] == 1
            server.kill()
            server.start()  # the same port and data; the example retries meanwhile
            mutate(api, "removeEntries", playlistId=pid, baseVersion=1, entryIds=[entries[0]["id"]])
            mutate(api, "removeEntries", playlistId=pid, baseVersion=2, entryIds=[entries[1]["id"]])
            assert [json.loads(next(events))["version"] for _ in range(2)] == [2, 3]
        finally:
            example.kill()
            example.wait(timeout=10)
            if example.stdout:
                example.stdout.close()
            api.http.close()
