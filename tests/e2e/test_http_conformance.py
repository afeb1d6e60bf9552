"""GraphQL over HTTP against ``chorus serve``: the ``graphql-http`` audits and the status codes.

``tests/e2e/js/http-audit.mjs`` runs the npm package ``graphql-http``'s
server audits (every MUST, SHOULD and MAY of the GraphQL-over-HTTP
specification it checks), with a token and without; every one must pass.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Api
from tests.servers import ChorusServer

JS_DIR = Path(__file__).parent / "js"
GRAPHQL_RESPONSE = "application/graphql-response+json"


def audit(server: ChorusServer, token: str) -> list[dict[str, str]]:
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "graphql-http").is_dir():
        pytest.fail("node and `npm ci --prefix tests/e2e/js` (scripts/test runs it) are needed")
    done = subprocess.run(
        [node, str(JS_DIR / "http-audit.mjs"), server.url, token],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("who", ["alice", None])
def test_every_graphql_http_audit_passes(server: ChorusServer, api: Api, who: str | None) -> None:
    results = audit(server, api.token(who) if who else "")
    assert len(results) > 50
    assert [r for r in results if r["status"] != "ok"] == []


def post(
    server: ChorusServer, body: object, accept: str, token: str | None = None
) -> httpx.Response:
    headers = {"Accept": accept, **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(server.url, json=body, headers=headers)


def test_status_codes_follow_the_media_type(server: ChorusServer, api: Api) -> None:
    token = api.token("alice")
    invalid = {"query": "{ nope }"}
    legacy = post(server, invalid, "application/json", token)
    assert legacy.status_code == 200
    assert "data" not in legacy.json()  # a request error has no data entry, either type
    spec = post(server, invalid, GRAPHQL_RESPONSE, token)
    assert spec.status_code == 400
    assert spec.headers["content-type"] == GRAPHQL_RESPONSE
    assert "data" not in spec.json()
    assert spec.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"

    viewer = {"query": "{ viewer { user { id } } }"}
    anonymous = post(server, viewer, GRAPHQL_RESPONSE)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert post(server, viewer, "application/json").status_code == 200
    ok = post(server, viewer, f"{GRAPHQL_RESPONSE}, application/json", token)
    assert ok.status_code == 200
    assert ok.json()["data"]["viewer"]["user"]["id"] == "alice"
    assert ok.headers["content-type"] == GRAPHQL_RESPONSE
    assert "Accept" in ok.headers["vary"]

    refused = post(server, viewer, "text/plain", token)
    assert refused.status_code == 406
    assert refused.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
    page = httpx.get(server.url, headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert "GraphiQL" in page.text


def test_a_path_or_method_chorus_does_not_serve_is_a_json_error(server: ChorusServer) -> None:
    base = server.base_url
    missing = httpx.get(base + "/graphq", headers={"X-Request-Id": "typo-1"})
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/json"
    assert missing.headers["x-request-id"] == "typo-1"
    assert missing.json() == {
        "errors": [{"message": "Not Found", "extensions": {"code": "NOT_FOUND"}}]
    }
    static = httpx.get(base + "/graphiql/no-such-asset.js")
    assert static.status_code == 404
    assert static.json()["errors"][0]["extensions"]["code"] == "NOT_FOUND"

    wrong = httpx.put(server.url, json={"query": "{ __typename }"})
    assert wrong.status_code == 405
    # In one order, whatever the process's string hashes (processes behind a proxy agree).
    assert wrong.headers["allow"] == "GET, POST"
    head = httpx.head(server.url)
    assert head.status_code == 405  # not listed in Allow, and refused: the two agree
    assert head.headers["allow"] == "GET, POST"
    assert httpx.post(base + "/healthz").headers["allow"] == "GET, HEAD"
    assert wrong.json() == {
        "errors": [{"message": "Method Not Allowed", "extensions": {"code": "METHOD_NOT_ALLOWED"}}]
    }
