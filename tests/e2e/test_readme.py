"""The README's five-minute tour, run as written against a fresh ``chorus serve``.

Every fenced block of the tour runs in the order the README gives it: the
shell blocks in bash (``./scripts/chorus`` is the installed ``chorus`` with
the server's database, data directory and secret; curl is pointed at the
server's port), the GraphQL blocks over HTTP with the token the shell block
minted and variables taken from earlier answers (the playlist id from
``createPlaylist``, media ids from ``searchMedia``, versions for
``baseVersion``), and each answer is checked for what the README says it
holds. The JavaScript block is run by ``tests/e2e/test_clients.py``. A block
outside the tour would be run by nothing, so there is none but the two
commands.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import ChorusServer

README = (Path(__file__).parents[2] / "README.md").read_text()
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
_TOUR = re.compile(r"^## A five-minute tour\n(.*?)(?=^## )", re.M | re.S)
_OPERATION = re.compile(r"^(?:query|mutation|subscription)\s+(\w+)")


def tour() -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of the tour, in order."""
    found = _TOUR.search(README)
    assert found, "the README has a '## A five-minute tour' section"
    return _BLOCK.findall(found.group(1))


def test_every_example_of_the_readme_is_in_the_tour_or_is_one_of_the_two_commands() -> None:
    outside = _BLOCK.findall(_TOUR.sub("", README))
    assert outside == [("sh", "./scripts/chorus serve\n"), ("sh", "./scripts/test\n")]
    assert [lang for lang, _ in tour() if lang not in ("sh", "graphql")] == ["js"]


class Tour:
    """One reader following the tour: the answers so far, and how to send the next block."""

    def __init__(self, server: ChorusServer, scripts: Path) -> None:
        self.server = server
        self.scripts = scripts
        self.http = httpx.Client(timeout=60)
        self.documents: dict[str, str] = {}
        self.token = ""
        self.playlist = ""
        self.music = ""
        self.media: list[str] = []
        self.entries: list[str] = []
        self.version = -1
        self.shell_blocks = 0

    def shell(self, code: str) -> str:
        """``code`` run by bash from a folder whose ``./scripts/chorus`` is this server's."""
        assert shutil.which("curl"), "curl is needed"
        if "curl" in code:
            assert "http://127.0.0.1:8000" in code
        code = code.replace("http://127.0.0.1:8000", self.server.base_url)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=self.scripts.parent,
            env=self.server.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def send(self, name: str, **variables: Any) -> dict[str, Any]:
        """The ``data`` of the README's operation ``name``; asserts it had no errors."""
        response = self.http.post(
            self.server.url,
            json={"query": self.documents[name], "variables": variables},
            headers={"Authorization": f"Bearer {self.token}"},
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data


def op() -> str:
    return str(uuid.uuid4())


def token_and_import(t: Tour, out: str) -> None:
    lines = out.splitlines()
    t.token = lines[0]
    assert re.fullmatch(r"[\w-]+\.[\w-]+\.[\w-]+", t.token), out[:200]
    assert lines[-1] == "18 playlists owned by alice"
    t.music = next(line.split()[0] for line in lines if line.endswith("3290 entries  Music"))


def curl_lists_the_playlists(t: Tour, out: str) -> None:
    body = json.loads(out)
    assert "errors" not in body, body
    playlists = body["data"]["viewer"]["playlists"]
    assert playlists["totalCount"] == 18
    assert len(playlists["edges"]) == 5


SHELL = [token_and_import, curl_lists_the_playlists]


def create_playlist(t: Tour) -> None:
    payload = t.send("CreatePlaylist", op=op())["createPlaylist"]
    assert (payload["userErrors"], payload["version"]) == ([], 0), payload
    assert payload["replayed"] is False
    assert payload["playlist"]["title"] == "Road trip"
    assert payload["playlist"]["viewerRole"] == "OWNER"
    t.playlist, t.version = payload["playlist"]["id"], payload["version"]


def find_tracks(t: Tour) -> None:
    found = t.send("FindTracks")["searchMedia"]
    t.media = [edge["node"]["id"] for edge in found["edges"]]
    assert len(t.media) == 3, found
    assert found["totalCount"] >= 3, found
    assert all(m.startswith("chinook:track:") for m in t.media)


def add_entries(t: Tour) -> None:
    payload = t.send("AddEntries", playlist=t.playlist, op=op(), base=t.version, media=t.media)
    payload = payload["addEntries"]
    assert (payload["userErrors"], payload["version"]) == ([], 1), payload
    assert (payload["replayed"], payload["rebased"]) == (False, False)
    assert [e["mediaId"] for e in payload["entries"]] == t.media
    t.entries, t.version = [e["id"] for e in payload["entries"]], payload["version"]


def page(t: Tour, playlist: str, after: str | None = None) -> dict[str, Any]:
    found = t.send("Page", playlist=playlist, after=after)["playlist"]
    assert found is not None
    connection: dict[str, Any] = found["entries"]
    assert connection["version"] == found["version"]
    return connection


def read_pages(t: Tour) -> None:
    mine = page(t, t.playlist)
    assert (mine["version"], mine["totalCount"]) == (1, 3)
    assert [e["node"]["id"] for e in mine["edges"]] == t.entries
    assert all(e["node"]["media"]["title"] for e in mine["edges"])
    assert mine["pageInfo"]["hasNextPage"] is False
    # The next page from endCursor, on the 3,290 entries of the imported "Music".
    first = page(t, t.music)
    second = page(t, t.music, after=first["pageInfo"]["endCursor"])
    assert len(first["edges"]) == len(second["edges"]) == 50
    assert first["pageInfo"]["hasNextPage"]
    assert second["pageInfo"]["hasNextPage"]
    keys = [(e["node"]["positionKey"], e["node"]["id"]) for e in first["edges"] + second["edges"]]
    assert keys == sorted(keys, key=lambda k: (k[0].encode(), k[1].encode()))
    assert len(set(keys)) == 100


def move_entries(t: Tour) -> None:
    # "Play the other person": AddEntries from version 1 commits version 2.
    other = t.send("AddEntries", playlist=t.playlist, op=op(), base=1, media=t.media[:1])
    assert other["addEntries"]["version"] == 2, other
    added = other["addEntries"]["entries"][0]["id"]
    move = {
        "playlist": t.playlist,
        "op": op(),
        "base": 1,
        "entry": t.entries[-1],
        "before": t.entries[0],
    }
    payload = t.send("MoveEntries", **move)["moveEntries"]
    assert (payload["userErrors"], payload["version"]) == ([], 3), payload
    assert (payload["rebased"], payload["replayed"]) == (True, False)
    order = [e["node"]["id"] for e in page(t, t.playlist)["edges"]]
    assert order == [t.entries[2], t.entries[0], t.entries[1], added]
    retry = t.send("MoveEntries", **move)["moveEntries"]
    assert (retry["replayed"], retry["version"]) == (True, 3), retry
    strict = t.send("MoveEntries", **{**move, "op": op(), "strict": True})["moveEntries"]
    assert strict["version"] is None, strict
    assert [(e["code"], e["currentVersion"]) for e in strict["userErrors"]] == [
        ("VERSION_CONFLICT", 3)
    ]


GRAPHQL: dict[str, Callable[[Tour], None]] = {
    "CreatePlaylist": create_playlist,
    "FindTracks": find_tracks,
    "AddEntries": add_entries,
    "Page": read_pages,
    "MoveEntries": move_entries,
}


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    """A ``scripts/`` folder whose ``chorus`` is this checkout's installed command line."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    chorus = folder / "chorus"
    chorus.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -m chorus.cli "$@"\n')
    chorus.chmod(0o755)
    return folder


def test_the_tour_runs_as_written(server: ChorusServer, scripts: Path) -> None:
    reader = Tour(server, scripts)
    ran: list[str] = []
    for lang, code in tour():
        if lang == "sh":
            assert reader.shell_blocks < len(SHELL), f"a shell block nothing checks:\n{code}"
            SHELL[reader.shell_blocks](reader, reader.shell(code))
            ran.append(SHELL[reader.shell_blocks].__name__)
            reader.shell_blocks += 1
        elif lang == "graphql":
            found = _OPERATION.match(code)
            name = found.group(1) if found else ""
            assert name in GRAPHQL, f"a GraphQL block nothing runs:\n{code}"
            reader.documents[name] = code
            GRAPHQL[name](reader)
            ran.append(name)
    assert ran == [f.__name__ for f in SHELL] + list(GRAPHQL)
    reader.http.close()
