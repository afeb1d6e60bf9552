"""The reference web client (``/web/``, ``examples/web/``) in a real browser (issue 16.2–3).

Two pages of it, two users, in Debian's Chromium (Playwright,
``tests/e2e/js/webclient.mjs``), edit one collaborative playlist at once by
clicking — add a searched media, move up and down, remove — while one page's
socket is cut halfway. Each must settle with nothing pending at the server's
version, in the server's order, and show both users present and editing.
Screenshots of the pages are in ``test-artifacts/`` when it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api
from tests.servers import ChorusServer

JS_DIR = Path(__file__).parent / "js"
ARTEFACTS = Path(os.environ.get("CHORUS_TEST_ARTIFACTS", "test-artifacts"))
EXAMPLES = Path(__file__).parents[2] / "examples" / "web"


def test_the_client_is_served_and_is_the_examples_folder(server: ChorusServer) -> None:
    page = httpx.get(f"{server.base_url}/web/")
    assert page.status_code == 200
    assert not re.findall(r"(?:src|href)=\"https?://", page.text)
    for name in ("chorus.js", "app.js", "vendor/graphql-ws.min.js"):
        served = httpx.get(f"{server.base_url}/web/{name}")
        assert served.status_code == 200, name
        assert served.content == (EXAMPLES / name).read_bytes()
    assert "MIT" in (EXAMPLES / "vendor" / "graphql-ws.LICENSE").read_text()


def test_the_client_may_not_be_framed_and_loads_only_its_own_origin(
    server: ChorusServer,
) -> None:
    # Issue 30, finding 8: /web/ had no policy, so another site could frame it.
    graphiql = httpx.get(server.url, headers={"Accept": "text/html"})
    for path in ("/web/", "/web/index.html", "/web/app.js", "/web/vendor/graphql-ws.min.js"):
        served = httpx.get(f"{server.base_url}{path}")
        assert served.status_code == 200, path
        policy = served.headers.get("content-security-policy", "")
        directives = dict(d.strip().partition(" ")[::2] for d in policy.split(";"))
        assert directives.get("frame-ancestors") == "'none'", path
        assert directives.get("default-src") == "'self'", path
        assert directives.get("script-src") == "'self'", path  # no inline script at all
        assert served.headers.get("x-frame-options") == "DENY", path
    assert graphiql.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in graphiql.headers["content-security-policy"]


def shared_playlist(api: Api) -> str:
    created = api.data(
        'mutation { createPlaylist(input: {operationId: "web", title: "Web", '
        "collaborative: true}) { playlist { id } } }"
    )
    playlist: str = created["createPlaylist"]["playlist"]["id"]
    member = api.data(
        "mutation($i: SetMemberRoleInput!) { setMemberRole(input: $i) { version } }",
        i={
            "playlistId": playlist,
            "operationId": "web-bob",
            "baseVersion": 0,
            "userId": "bob",
            "role": "EDITOR",
        },
    )
    seeded = api.data(
        "mutation($i: AddEntriesInput!) { addEntries(input: $i) { version } }",
        i={
            "playlistId": playlist,
            "operationId": "web-seed",
            "baseVersion": 1,
            "mediaIds": [f"chinook:track:{n}" for n in range(1, 6)],
        },
    )
    assert (member["setMemberRole"]["version"], seeded["addEntries"]["version"]) == (1, 2)
    return playlist


def server_order(api: Api, playlist: str) -> tuple[int, list[str]]:
    data = api.data(
        "query($id: ID!) { playlist(id: $id) { version"
        " entries(first: 100) { edges { node { id } } } } }",
        id=playlist,
    )["playlist"]
    return data["version"], [e["node"]["id"] for e in data["entries"]["edges"]]


def test_two_pages_editing_at_once_converge_to_the_servers_order(
    server: ChorusServer, api: Api
) -> None:
    node = shutil.which("node")
    if node is None or not Path(os.environ.get("CHROMIUM", "/usr/bin/chromium")).exists():
        pytest.fail("node and Debian's chromium are needed (scripts/test installs chromium)")
    playlist = shared_playlist(api)
    tokens = [api.token(user) for user in ("alice", "bob")]
    done = subprocess.run(
        [
            node,
            str(JS_DIR / "webclient.mjs"),
            server.base_url,
            playlist,
            str(ARTEFACTS),
            "8",
            *tokens,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    steps: dict[str, dict[str, Any]] = {}
    for line in done.stdout.splitlines():
        step = json.loads(line)
        steps[step.pop("step")] = step
    assert done.returncode == 0, (steps.get("failed"), done.stderr[-2000:])
    assert sum(steps["edited"]["done"].values()) == 16
    version, order = server_order(api, playlist)
    states = steps["settled"]["states"]
    assert [s["version"] for s in states] == [version, version]
    assert [s["order"] for s in states] == [order, order]
    assert version > 2  # the pages' edits committed
    # The pages took their tokens from the URL's fragment: no request carried one
    # (a query string would have put it in the server's access log).
    assert steps["settled"]["leaked"] == []
    # Under its policy the pages ran with nothing refused (scripts, styles, sockets),
    # and a page that frames /web/ gets no client in the frame.
    assert steps["settled"]["violations"] == [[], []]
    assert steps["framed"] == {"client": False}
    # Each page sees both users present; both edited, so both said EDITING.
    assert [s["presence"] for s in states] == [{"alice": "EDITING", "bob": "EDITING"}] * 2
