"""``chorus_graphql_errors_total{code}`` counts exactly the errors each answer holds.

Requests that fail in every way an HTTP client can make them fail (before
execution, in validation, in variables, in a field, in the transport's own
refusals through the app, on another path) are sent to the app with its
lifespan; after each, the counter grew by the number of errors of each code
in that answer's body, and by nothing for an answer without errors.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from chorus.auth import mint_token
from chorus.domain.commands import CreatePlaylist
from chorus.graphql.schema.common import ids
from tests.integration.test_lean_route_differential import (
    SECRET,
    migrated,
    running,
    settings,
)

__all__ = ["migrated"]  # the fixture, imported for these tests

PAGE = "query Page($id: ID!) { playlist(id: $id) { title entries(first: 2) { totalCount } } }"


def _counts() -> Counter[str]:
    counts: Counter[str] = Counter()
    for metric in REGISTRY.collect():
        if metric.name == "chorus_graphql_errors":
            for sample in metric.samples:
                if sample.name == "chorus_graphql_errors_total":
                    counts[sample.labels["code"]] = int(sample.value)
    return counts


def _codes(body: bytes) -> Counter[str]:
    answer = json.loads(body) if body else {}
    errors = answer.get("errors", []) if isinstance(answer, dict) else []
    return Counter(e["extensions"]["code"] for e in errors)


async def test_each_answer_counts_its_errors_by_code(migrated: str, tmp_path: Path) -> None:
    token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
    async with running(settings(migrated, tmp_path, True, max_body_bytes=4096)) as (
        client,
        services,
        _,
    ):
        created = await services.store.create(CreatePlaylist("c1", "Mix"), "alice")
        pid = ids.playlist_global_id(created.outcome.playlist_id)
        requests: list[tuple[str, dict[str, Any]]] = [
            ("answered", {"method": "POST", "json": {"query": PAGE, "variables": {"id": pid}}}),
            ("parse", {"method": "POST", "json": {"query": "query {"}}),
            ("no token", {"method": "POST", "json": {"query": "{ me { id } }"}, "anon": True}),
            ("validation", {"method": "POST", "json": {"query": "{ nope }"}}),
            ("variables", {"method": "POST", "json": {"query": PAGE, "variables": {"id": None}}}),
            (
                "field",
                {
                    "method": "POST",
                    "json": {
                        "query": "query B($id: ID!) { playlist(id: $id) "
                        '{ entries(first: 2, after: "not-a-cursor") { totalCount } } }',
                        "variables": {"id": pid},
                    },
                },
            ),
            (
                "operation name",
                {"method": "POST", "json": {"query": PAGE, "operationName": "Other"}},
            ),
            (
                "mutation over GET",
                {
                    "method": "GET",
                    "params": {"query": 'mutation { follow(playlistId: "x") { ok } }'},
                },
            ),
            ("body too large", {"method": "POST", "content": b"{" + b" " * 5000 + b"}"}),
            ("no such path", {"method": "GET", "url": "/nowhere"}),
        ]
        seen: dict[str, Counter[str]] = {}
        for name, request in requests:
            headers = {} if request.pop("anon", False) else dict(token)
            if "content" in request:
                headers["Content-Type"] = "application/json"
            url = request.pop("url", "/graphql")
            before = _counts()
            response = await client.request(url=url, headers=headers, **request)
            grown = _counts() - before
            expected = _codes(response.content)
            seen[name] = expected
            assert grown == expected, (name, response.status_code, response.text[:300])

    assert seen["answered"] == Counter()
    assert seen["parse"] == {"GRAPHQL_PARSE_FAILED": 1}
    assert seen["no token"] == {"UNAUTHENTICATED": 1}
    assert seen["validation"] == {"GRAPHQL_VALIDATION_FAILED": 1}
    assert seen["variables"] == {"BAD_USER_INPUT": 1}
    assert seen["field"] == {"BAD_USER_INPUT": 1}
    assert seen["operation name"] == {"BAD_REQUEST": 1}
    assert seen["mutation over GET"] == {"METHOD_NOT_ALLOWED": 1}
    assert seen["body too large"] == {"PAYLOAD_TOO_LARGE": 1}
    assert seen["no such path"] == {"NOT_FOUND": 1}
