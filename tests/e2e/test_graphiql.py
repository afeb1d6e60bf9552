"""GraphiQL served by Chorus itself, offline, in a real browser (issue 16.1).

The page and its assets are checked over HTTP (no URL of another host, each
asset served, the vendored files as ``SHA256SUMS`` lists them); then Debian's
Chromium, driven by Playwright (``tests/e2e/js/graphiql.mjs``) with every
request to another host aborted, loads ``/graphql``, runs a query with the
token typed into the Headers editor, and a subscription that shows a commit
made while it is open. On failure the screenshot and the page's console are in
``test-artifacts/`` (``CHORUS_TEST_ARTIFACTS`` overrides).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chorus.graphql.http import ide
from tests.e2e.conftest import Api, running_server
from tests.servers import ChorusServer

JS_DIR = Path(__file__).parent / "js"
ARTEFACTS = Path(os.environ.get("CHORUS_TEST_ARTIFACTS", "test-artifacts"))


@pytest.fixture(scope="module")
def chorus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    with running_server("sqlite", tmp_path_factory) as server:
        yield server


def test_the_page_names_only_its_own_assets_and_each_is_served(chorus: ChorusServer) -> None:
    page = httpx.get(chorus.url, headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert not re.findall(r"(?:src|href)=\"https?://", page.text), "an asset from another host"
    assets = re.findall(r"(?:src|href)=\"(/graphiql/[^\"]+)\"", page.text)
    assert len(assets) == 4, assets
    for path in assets:
        served = httpx.get(chorus.base_url + path)
        assert served.status_code == 200, path
        assert served.content == (ide.ASSETS_PATH / Path(path).name).read_bytes()
    assert httpx.get(chorus.base_url + "/graphiql/../settings.py").status_code == 404


BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        (BROWSER, True),
        ("text/html", True),
        ("*/*", False),
        (None, False),
        ("application/json", False),
    ],
)
def test_only_a_browser_gets_graphiql(chorus: ChorusServer, accept: str | None, html: bool) -> None:
    """A GET with no query: the page for an ``Accept`` naming ``text/html``; for any other
    (curl's and fetch's ``*/*``, none) the JSON refusal of a request with no query."""
    headers = {"Accept": accept} if accept is not None else {}
    with httpx.Client() as client:
        client.headers.pop("accept", None)
        answer = client.get(chorus.url, headers=headers)
    if html:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/html")
        assert answer.headers["vary"] == "Accept"  # the same URL answers others with JSON
        return
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


def test_the_vendored_assets_are_what_scripts_vendor_graphiql_recorded() -> None:
    listed = (ide.ASSETS_PATH / "SHA256SUMS").read_text().split("\n")
    sums = dict(reversed(line.split()) for line in listed if line.strip())
    assert sorted(sums) == sorted(
        p.name for p in ide.ASSETS_PATH.iterdir() if p.suffix in {".js", ".css"}
    )
    for name, digest in sums.items():
        assert hashlib.sha256((ide.ASSETS_PATH / name).read_bytes()).hexdigest() == digest
    for package in ("graphiql", "react", "react-dom"):
        assert "MIT License" in (ide.ASSETS_PATH / f"{package}.LICENSE").read_text()


def browser_command() -> list[str]:
    """Node and the script; fails (never skips) when the browser cannot run."""
    node = shutil.which("node")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if node is None or not Path(chromium).exists():
        pytest.fail("node and Debian's chromium are needed (scripts/test installs chromium)")
    if not (JS_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.fail("run `npm ci --prefix tests/e2e/js` (scripts/test does) for playwright-core")
    return [node, str(JS_DIR / "graphiql.mjs")]


def test_graphiql_runs_a_query_and_a_subscription_offline(chorus: ChorusServer) -> None:
    api = Api(chorus)
    created = api.data(
        'mutation { createPlaylist(input: {operationId: "gi", title: "GraphiQL", '
        "visibility: PUBLIC}) { playlist { id } } }"
    )
    playlist = created["createPlaylist"]["playlist"]["id"]
    api.data(
        "mutation($i: AddEntriesInput!) { addEntries(input: $i) { version } }",
        i={
            "playlistId": playlist,
            "operationId": "gi-1",
            "baseVersion": 0,
            "mediaIds": ["chinook:track:1"],
        },
    )
    done = subprocess.run(
        [*browser_command(), chorus.base_url, api.token("alice"), playlist, str(ARTEFACTS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    api.http.close()
    steps: dict[str, dict[str, Any]] = {}
    for line in done.stdout.splitlines():
        step = json.loads(line)
        steps[step.pop("step")] = step
    assert done.returncode == 0, (steps.get("failed"), done.stderr[-2000:])
    assert steps["loaded"]["status"] == 200
    assert steps["rendered"]["title"] == "Chorus · GraphiQL"
    assert steps["query"]["result"]["data"]["viewer"]["user"]["id"] == "alice"
    assert steps["query"]["result"]["data"]["viewer"]["playlists"]["totalCount"] == 1
    assert steps["subscribed"]["result"]["data"]["playlistEvents"]["version"] == 1
    assert steps["committed"]["added"]["data"]["addEntries"]["version"] == 2
    assert steps["live"]["result"]["data"]["playlistEvents"]["version"] == 2
    assert steps["live"]["external"] == [], "the page reached for another host"
    assert steps["live"]["refused"] == []  # the subscription went over the socket, not HTTP
