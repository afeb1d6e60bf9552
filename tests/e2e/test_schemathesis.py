"""Property-based requests generated from the live schema by schemathesis.

Every query and mutation field of the running server's schema gets up to
30 generated requests (derandomized, so a run is repeatable), sent with a
valid bearer token. Whatever the input, the server must answer without a
5xx, and every error must carry ``extensions.code`` other than
``INTERNAL_SERVER_ERROR``, with nothing internal in the text.

Random IDs would only ever reach "not found", so the ``ID``, ``String`` and
``Int`` scalars draw half of their values from a seeded playlist (its ids,
entry ids, cursors, media ids, small versions) and half at random.

schemathesis' own pytest integration (``from_fixture``) does not run under
pytest 9 (it reads ``request.node._nodeid``), and the server only exists
once the fixture started it; so each operation's Hypothesis strategy
(``APIOperation.as_strategy``) is driven with ``@given`` here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.graphql import nodes
from schemathesis.specs.graphql.scalars import CUSTOM_SCALARS

from chorus.graphql.schema.build import build_schema
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, committed, create_playlist, entries_page, mutate, track

LEAKS = ("Traceback", "sqlalchemy", "/work/", "site-packages", "SELECT ", "asyncpg", "aiosqlite")


def _operations() -> list[str]:
    """``Query.<field>`` and ``Mutation.<field>`` of the schema, as schemathesis names them."""
    graphql_schema = build_schema()._schema
    labels = []
    for root in (graphql_schema.query_type, graphql_schema.mutation_type):
        assert root is not None
        labels += [f"{root.name}.{field}" for field in root.fields]
    return labels


OPERATIONS = _operations()


@pytest.fixture(scope="module")
def seeded(api: Api) -> Iterator[None]:
    """Real values for the generated requests: a shared playlist, its entries and cursors."""
    shared = create_playlist(api, title="Fuzzed", visibility="PUBLIC", collaborative=True)
    committed(
        mutate(api, "setMemberRole", playlistId=shared, baseVersion=0, userId="bob", role="EDITOR")
    )
    entries = add(api, shared, [track(n) for n in range(1, 9)], base=1)["entries"]
    committed(
        mutate(api, "removeEntries", playlistId=shared, baseVersion=2, entryIds=[entries[0]["id"]])
    )
    private = create_playlist(api, "bob", title="Not alice's")
    cursors = [e["cursor"] for e in entries_page(api, shared, first=5)["edges"]]
    ids = [shared, private, *(e["id"] for e in entries)]
    strings = [*ids, *cursors, track(9), "chinook:track:999999", "love", "bob", "alice", "op-1"]
    saved = dict(CUSTOM_SCALARS)
    schemathesis.graphql.scalar("ID", st.one_of(st.sampled_from(ids), st.text()).map(nodes.String))
    schemathesis.graphql.scalar(
        "String", st.one_of(st.sampled_from(strings), st.text()).map(nodes.String)
    )
    schemathesis.graphql.scalar(
        "Int",
        st.one_of(st.integers(-1, 12), st.integers(-(2**31), 2**31 - 1)).map(nodes.Int),
    )
    yield
    CUSTOM_SCALARS.clear()
    CUSTOM_SCALARS.update(saved)


@pytest.fixture(scope="module")
def live_schema(api: Api, seeded: None) -> Any:
    """The schema, introspected from the running server with alice's token."""
    return schemathesis.graphql.from_url(
        api.server.url, headers={"Authorization": f"Bearer {api.token('alice')}"}, timeout=30
    )


def test_every_operation_is_covered(live_schema: Any) -> None:
    found = [result.ok().label for result in live_schema.get_all_operations()]
    assert sorted(found) == sorted(OPERATIONS)


def check_response(status: int, text: str, body: Any) -> None:
    assert status < 500, text[:500]
    for leak in LEAKS:
        assert leak not in text, text[:500]
    assert isinstance(body, dict), text[:500]
    assert "data" in body or "errors" in body, text[:500]
    for error in body.get("errors") or []:
        code = (error.get("extensions") or {}).get("code")
        assert code, error
        assert code != "INTERNAL_SERVER_ERROR", error


@pytest.mark.parametrize("label", OPERATIONS)
def test_generated_requests(live_schema: Any, api: Api, label: str) -> None:
    operation = live_schema.find_operation_by_label(label)
    assert operation is not None, label
    headers = {"Authorization": f"Bearer {api.token('alice')}"}
    sent = []

    @settings(
        max_examples=30,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def generated(case: Any) -> None:
        response = case.call(headers=headers, timeout=30)
        sent.append(case.body)
        check_response(response.status_code, response.text, response.json())

    generated()
    assert sent, f"nothing was generated for {label}"
