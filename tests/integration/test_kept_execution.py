"""A kept, planned operation executed without ``Schema.execute`` (``KeptExecution``).

The lean route hands a kept query or mutation to :class:`KeptExecution`, which
builds the schema's executor itself and applies the extensions' effects. These
tests hold it to ``Schema.execute``: the same answer (data, errors, extensions),
the same request context afterwards (operation, cost allowance, cacheability)
and the same counters, for every document below; and they check that it is taken
where it should be and declines, touching nothing, where strawberry must answer.
The byte-for-byte HTTP comparison of both apps is ``test_lean_route_differential.py``.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from graphql import get_operation_ast, parse
from starlette.requests import Request
from strawberry.types.graphql import OperationType

from chorus.auth import Identity, mint_token
from chorus.graphql.endpoint import ChorusGraphQL
from chorus.graphql.http.lean import LeanRoute
from chorus.graphql.schema.kept_execution import KeptExecution
from chorus.metrics import ERRORS, PLANNED, REQUEST_SECONDS
from chorus.resolvers.context import RequestContext, Services
from tests.integration.test_lean_route_differential import (
    CREATE,
    PAGE,
    SECRET,
    _lean_of,
    _seed,
    running,
    settings,
)

ALLOWED = frozenset({OperationType.QUERY, OperationType.MUTATION})

QUERIES: list[tuple[str, str, dict[str, Any], str | None]] = [
    # (case, document, variables: "$pid" and "$private" are filled in, operation name)
    ("a page", PAGE, {"id": "$pid"}, None),
    ("a page, named", PAGE, {"id": "$pid"}, "Page"),
    (
        "aliases, a fragment, @skip by a variable",
        """query Parts($id: ID!, $hide: Boolean!) { a: playlist(id: $id) { ...Head }
        b: playlist(id: $id) { t: title entries(first: 2) @skip(if: $hide) { totalCount } } }
        fragment Head on Playlist { id version title }""",
        {"id": "$pid", "hide": False},
        None,
    ),
    (
        "the same, skipped",
        """query Parts($id: ID!, $hide: Boolean!) { a: playlist(id: $id) { ...Head }
        b: playlist(id: $id) { t: title entries(first: 2) @skip(if: $hide) { totalCount } } }
        fragment Head on Playlist { id version title }""",
        {"id": "$pid", "hide": True},
        None,
    ),
    (
        "a field error (a cursor that is not one)",
        'query Bad($id: ID!) { playlist(id: $id) { title entries(first: 2, after: "x") '
        "{ edges { cursor } } } }",
        {"id": "$pid"},
        None,
    ),
    (
        "a private playlist of another",
        "query P($id: ID!) { playlist(id: $id) { title } }",
        {"id": "$private"},
        None,
    ),
    ("anonymous", "{ viewer { user { id } } }", {}, None),
    ("introspection only", "query T { __typename }", {}, None),
    (
        "a field no version names",
        "query F($id: ID!) { playlist(id: $id) { title members(first: 5) { totalCount } } }",
        {"id": "$pid"},
        None,
    ),
]


def _view(app: Any) -> ChorusGraphQL:
    lean = _lean_of(app)
    assert isinstance(lean, LeanRoute)
    view = lean._view
    assert isinstance(view, ChorusGraphQL)
    return view


def _filled(variables: dict[str, Any], pid: str, private: str) -> dict[str, Any]:
    named = {"$pid": pid, "$private": private}
    return {k: named.get(v, v) if isinstance(v, str) else v for k, v in variables.items()}


def _context(view: ChorusGraphQL, services: Services, user: str) -> RequestContext:
    request = Request({"type": "http", "method": "POST", "headers": [], "path": "/graphql"})
    identity = Identity(user, datetime.now(UTC) + timedelta(hours=1))
    return view.context_for(request, services, identity, None)


def _counters(label: str, kind: str = "query") -> dict[str, float]:
    found = {
        f"planned {how}": PLANNED.labels(label, how)._value.get()
        for how in ("plan", "abandoned", "unplanned")
    }
    found["timed"] = sum(
        s.value
        for m in REQUEST_SECONDS.collect()
        for s in m.samples
        if s.name.endswith("_count")
        and s.labels == {"operation_type": kind, "operation_name": label}
    )
    for m in ERRORS.collect():
        for s in m.samples:
            if s.name.endswith("_total"):
                found[f"error {s.labels['code']}"] = s.value
    return found


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}


def _state(context: RequestContext) -> dict[str, Any]:
    operation = context.operation
    budget = context.reads.budget
    return {
        "type": operation.type,
        "name": operation.name,
        "served_by": operation.served_by,
        "introspection_only": operation.introspection_only,
        "allowance": budget.cost_allowance,
        "uncacheable": context.reads.record.uncacheable,
        "versions": dict(context.reads.record.versions),
    }


def _answer(result: Any) -> str:
    out: dict[str, Any] = {"data": result.data}
    if result.errors:
        out["errors"] = [e.formatted for e in result.errors]
    if result.extensions:
        out["extensions"] = result.extensions
    return json.dumps(out, sort_keys=True)


@pytest.fixture
def migrated_url(tmp_path: Path) -> str:
    from chorus.db.migrate import upgrade

    url = f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}"
    upgrade(url)
    return url


async def test_kept_queries_answer_count_and_note_as_schema_execute(
    migrated_url: str, tmp_path: Path
) -> None:
    async with running(settings(migrated_url, tmp_path, lean=True)) as (client, services, _):
        pid, private = await _seed(services)
        view = _view(client._transport.app)  # type: ignore[attr-defined]
        kept = view._kept_execution
        assert isinstance(kept, KeptExecution)
        for case, document, variables, name in QUERIES:
            filled = _filled(variables, pid, private)
            user = "bob" if "private" in case else "alice"
            # Kept (and its rules learned) by a first run through strawberry.
            await view.schema.execute(
                document,
                variable_values=filled,
                context_value=_context(view, services, user),
                operation_name=name,
            )
            operation = get_operation_ast(parse(document), name)
            assert operation is not None
            own = name or (operation.name.value if operation.name else None)
            label = view.operation_names.label(own)
            reference = _context(view, services, user)
            before = _counters(label)
            expected = await view.schema.execute(
                document,
                variable_values=filled,
                context_value=reference,
                operation_name=name,
                allowed_operation_types=ALLOWED,
            )
            by_schema = _delta(before, _counters(label))
            direct = _context(view, services, user)
            before = _counters(label)
            got = await kept.execute(document, filled, direct, name, ALLOWED, None)
            by_kept = _delta(before, _counters(label))
            assert got is not None, case
            assert _answer(got) == _answer(expected), case
            assert _state(direct) == _state(reference), case
            assert by_kept == by_schema, case
            assert by_kept["timed"] == 1, case


async def test_kept_operations_through_the_lean_route_skip_schema_execute(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first request of a document is the view's (it parses, validates and keeps it);
    every later one of a kept query the response cache misses, and of a kept mutation,
    is executed by :class:`KeptExecution`, never by ``Schema.execute``."""
    overrides = {"response_cache": False}
    async with running(settings(migrated_url, tmp_path, lean=True, **overrides)) as (
        client,
        services,
        _,
    ):
        pid, _ = await _seed(services)
        view = _view(client._transport.app)  # type: ignore[attr-defined]
        calls: list[str] = []
        execute = view.schema.execute

        async def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(query)
            return await execute(query, *args, **kwargs)

        monkeypatch.setattr(view.schema, "execute", counted)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        planned = PLANNED.labels("Page", "plan")._value.get()
        for _ in range(3):
            page = await client.post(
                "/graphql", json={"query": PAGE, "variables": {"id": pid}}, headers=token
            )
            assert page.status_code == 200, page.text
            assert "errors" not in page.json(), page.text
        created = []
        for n in range(3):
            body = {"query": CREATE, "variables": {"input": {"operationId": f"k{n}", "title": "K"}}}
            answer = await client.post("/graphql", json=body, headers=token)
            created.append(answer.json()["data"]["createPlaylist"])
        assert calls == [PAGE, CREATE]  # the first of each; the rest skipped it
        assert PLANNED.labels("Page", "plan")._value.get() == planned + 3
        assert [c["playlist"]["title"] for c in created] == ["K", "K", "K"]


@pytest.mark.parametrize(
    ("case", "variables", "overrides"),
    [
        ("variables that do not coerce", {"id": {"not": "an id"}}, {}),
        (
            "an object in the variables too large",
            {"id": "$pid", "x": {f"k{i}": i for i in range(99)}},
            {},
        ),
        ("a query budget on", {"id": "$pid"}, {"query_cost_per_minute": 100_000}),
        ("a cost over the limit", {"id": "$pid"}, {"max_query_cost": 5}),
    ],
)
async def test_it_declines_before_touching_the_request(
    migrated_url: str, tmp_path: Path, case: str, variables: dict[str, Any], overrides: Any
) -> None:
    async with running(settings(migrated_url, tmp_path, lean=True, **overrides)) as (
        client,
        services,
        _,
    ):
        pid, private = await _seed(services)
        view = _view(client._transport.app)  # type: ignore[attr-defined]
        kept = view._kept_execution
        assert kept is not None
        await view.schema.execute(
            PAGE,
            variable_values={"id": pid},
            context_value=_context(view, services, "alice"),
        )
        context = _context(view, services, "alice")
        untouched = _state(context)
        before = _counters("Page")
        filled = _filled(variables, pid, private)
        assert await kept.execute(PAGE, filled, context, None, ALLOWED, None) is None, case
        assert _state(context) == untouched, case
        assert _counters("Page") == before, case


async def test_it_declines_what_strawberry_must_refuse(migrated_url: str, tmp_path: Path) -> None:
    """A document not kept, an unknown operation name, a type the method does not allow,
    a subscription, no viewer: ``None``, nothing done."""
    subscription = "subscription S($id: ID!) { playlistEvents(playlistId: $id) { __typename } }"
    async with running(settings(migrated_url, tmp_path, lean=True)) as (client, services, _):
        pid, _ = await _seed(services)
        view = _view(client._transport.app)  # type: ignore[attr-defined]
        kept = view._kept_execution
        assert kept is not None
        alice = _context(view, services, "alice")
        assert await kept.execute(PAGE, {"id": pid}, alice, None, ALLOWED, None) is None
        for document in (PAGE, CREATE, subscription):
            with contextlib.suppress(Exception):  # a subscription is refused, not kept
                await view.schema.execute(document, context_value=_context(view, services, "alice"))
        cases = [
            (PAGE, {"id": pid}, "Nope", ALLOWED, alice),
            (
                CREATE,
                {"input": {"operationId": "x", "title": "x"}},
                None,
                {OperationType.QUERY},
                alice,
            ),
            (subscription, {"id": pid}, None, ALLOWED | {OperationType.SUBSCRIPTION}, alice),
        ]
        nobody = RequestContext(services, None, "no token")
        cases.append((PAGE, {"id": pid}, None, ALLOWED, nobody))
        for document, variables, name, allowed, context in cases:
            untouched = _state(context)
            assert await kept.execute(document, variables, context, name, allowed, None) is None
            assert _state(context) == untouched


async def test_an_error_in_its_checks_declines_and_strawberry_answers_it(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What raises before execution (here the cost's count) is not the direct run's to
    answer: it declines, untouched, and ``Schema.execute`` answers the error its way."""
    from chorus.graphql.schema import kept_execution

    async with running(settings(migrated_url, tmp_path, lean=True)) as (client, services, _):
        pid, _ = await _seed(services)
        view = _view(client._transport.app)  # type: ignore[attr-defined]
        kept = view._kept_execution
        assert kept is not None
        await view.schema.execute(
            PAGE, variable_values={"id": pid}, context_value=_context(view, services, "alice")
        )

        def broken(*_: Any) -> None:
            raise RuntimeError("the count failed")

        monkeypatch.setattr(kept_execution, "operation_cost", broken)
        context = _context(view, services, "alice")
        untouched = _state(context)
        assert await kept.execute(PAGE, {"id": pid}, context, None, ALLOWED, None) is None
        assert _state(context) == untouched
