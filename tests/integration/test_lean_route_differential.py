"""The lean route answers as the view does, byte for byte (``CHORUS_LEAN_ROUTE``).

Two apps on one embedded database, the lean route on and off, are sent the
same requests in the same order; every answer (status, body, headers but the
request id and the date) must be equal, and the hits must have been the lean
route's (the app behind it never saw them). Requests it does not answer
(errors, misses, refusals, preflights) go to the view: equal too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from chorus.app import create_app
from chorus.auth import mint_token
from chorus.db.migrate import upgrade
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.model import Visibility
from chorus.graphql.http.lean import LeanRoute
from chorus.graphql.schema.common import ids
from chorus.metrics import REQUEST_SECONDS, RESPONSE_CACHE
from chorus.resolvers.cached_answers import etag_of
from chorus.resolvers.context import Services
from chorus.settings import Settings
from tests.integration.test_planned_mutations import _same_clock_and_ids

SECRET = "lean-route-" + "s" * 40
ORIGIN = "http://localhost:5173"
PAGE = """query Page($id: ID!) { playlist(id: $id) { id version title
  entries(first: 10) { edges { cursor node { id mediaId media { title } } } } } }"""
OTHER = "query Other($id: ID!) { playlist(id: $id) { title } }"
IGNORED = {"x-request-id", "date"}

Message = dict[str, Any]


class _Behind:
    """The app behind the lean route, counting the requests that reach it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen += 1
        await self.app(scope, receive, send)


def _lean_of(app: Any) -> LeanRoute | None:
    while app is not None and not isinstance(app, LeanRoute):
        app = getattr(app, "app", None)
    return app


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Services, Any]]:
    app = create_app(settings)
    lean = _lean_of(app)
    behind = None
    if lean is not None:
        behind = lean.app = _Behind(lean.app)
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan", "state": {}}, inbox.get, outbox.put))
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started
    state = app
    while not hasattr(state, "state") or not hasattr(state.state, "services"):
        state = state.app
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client, state.state.services, behind
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await task


@pytest.fixture
def migrated(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}"
    upgrade(url)
    return url


def settings(url: str, tmp_path: Path, lean: bool, **overrides: Any) -> Settings:
    return Settings(
        database_url=url,
        data_dir=str(tmp_path),
        jwt_secret=SECRET,
        cors_origins=ORIGIN,
        lean_route=lean,
        **overrides,
    )


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def requests(pid: str, private: str) -> list[tuple[str, dict[str, Any]]]:
    """``(name, httpx request arguments)``: sent in this order to both apps."""
    token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
    bob = {"Authorization": f"Bearer {mint_token(SECRET, 'bob')}"}
    page = {"query": PAGE, "variables": {"id": pid}}
    gql = {**token, "Accept": "application/graphql-response+json"}
    apq = {"persistedQuery": {"version": 1, "sha256Hash": sha(OTHER)}}
    get_params = {"query": PAGE, "variables": json.dumps({"id": pid})}
    out: list[tuple[str, dict[str, Any]]] = [
        ("miss", {"method": "POST", "json": page, "headers": token}),
        ("hit", {"method": "POST", "json": page, "headers": token}),
        ("hit again", {"method": "POST", "json": page, "headers": token}),
        ("hit, graphql-response", {"method": "POST", "json": page, "headers": gql}),
        ("hit, CORS", {"method": "POST", "json": page, "headers": {**token, "Origin": ORIGIN}}),
        ("GET miss", {"method": "GET", "params": get_params, "headers": token}),
        ("GET hit", {"method": "GET", "params": get_params, "headers": token}),
        ("GET hit, graphql-response", {"method": "GET", "params": get_params, "headers": gql}),
        ("no token", {"method": "POST", "json": page}),
        ("bad token", {"method": "POST", "json": page, "headers": {"Authorization": "Bearer x"}}),
        (
            "bad token, graphql-response",
            {
                "method": "POST",
                "json": page,
                "headers": {
                    "Authorization": "Bearer x",
                    "Accept": "application/graphql-response+json",
                },
            },
        ),
        (
            "private, not a member",
            {
                "method": "POST",
                "headers": bob,
                "json": {"query": PAGE, "variables": {"id": private}},
            },
        ),
        (
            "private, not a member again",
            {
                "method": "POST",
                "headers": bob,
                "json": {"query": PAGE, "variables": {"id": private}},
            },
        ),
        (
            "bad variables",
            {"method": "POST", "headers": token, "json": {"query": PAGE, "variables": {"id": 5}}},
        ),
        (
            "bad variables, graphql-response",
            {"method": "POST", "headers": gql, "json": {"query": PAGE, "variables": {"id": 5}}},
        ),
        (
            "unknown operation",
            {"method": "POST", "headers": token, "json": {**page, "operationName": "Nope"}},
        ),
        (
            "over the cost limit",
            {
                "method": "POST",
                "headers": token,
                "json": {
                    "query": "{ viewer { playlists(first: 100) { edges { node { entries(first: 100)"
                    " { edges { node { id } } } } } } } }"
                },
            },
        ),
        (
            "two tokens",
            {
                "method": "POST",
                "json": page,
                "headers": [
                    ("Authorization", token["Authorization"]),
                    ("Authorization", bob["Authorization"]),
                ],
            },
        ),
        ("406", {"method": "POST", "json": page, "headers": {**token, "Accept": "text/plain"}}),
        (
            "gzip",
            {
                "method": "POST",
                "content": json.dumps(page).encode(),
                "headers": {
                    **token,
                    "Content-Type": "application/json",
                    "Content-Encoding": "gzip",
                },
            },
        ),
        (
            "not JSON",
            {
                "method": "POST",
                "content": b"{",
                "headers": {**token, "Content-Type": "application/json"},
            },
        ),
        (
            "APQ unknown hash",
            {
                "method": "POST",
                "headers": token,
                "json": {"extensions": apq, "variables": {"id": pid}},
            },
        ),
        (
            "APQ register",
            {
                "method": "POST",
                "headers": token,
                "json": {"query": OTHER, "extensions": apq, "variables": {"id": pid}},
            },
        ),
        (
            "APQ hash, hit",
            {
                "method": "POST",
                "headers": token,
                "json": {"extensions": apq, "variables": {"id": pid}},
            },
        ),
        (
            "APQ GET hash, hit",
            {
                "method": "GET",
                "headers": token,
                "params": {"extensions": json.dumps(apq), "variables": json.dumps({"id": pid})},
            },
        ),
        (
            "APQ hash, no token",
            {"method": "POST", "json": {"extensions": apq, "variables": {"id": pid}}},
        ),
        ("GET twice", {"method": "GET", "headers": token, "url": "/graphql?query=a&query=b"}),
        (
            "preflight",
            {
                "method": "OPTIONS",
                "headers": {
                    "Origin": ORIGIN,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,content-type",
                },
            },
        ),
        (
            "preflight refused",
            {
                "method": "OPTIONS",
                "headers": {
                    "Origin": "http://evil.example",
                    "Access-Control-Request-Method": "POST",
                },
            },
        ),
    ]
    return out


def revalidations(hit: httpx.Response, token: str, pid: str) -> list[tuple[str, dict[str, Any]]]:
    page = {"query": PAGE, "variables": {"id": pid}}
    etag = hit.headers["etag"]
    auth = {"Authorization": f"Bearer {token}"}
    return [
        ("304", {"method": "POST", "json": page, "headers": {**auth, "If-None-Match": etag}}),
        (
            "304 weak, list",
            {
                "method": "POST",
                "json": page,
                "headers": {**auth, "If-None-Match": f'"x", W/{etag}'},
            },
        ),
        (
            "304, graphql-response",
            {
                "method": "POST",
                "json": page,
                "headers": {
                    **auth,
                    "If-None-Match": etag,
                    "Accept": "application/graphql-response+json",
                },
            },
        ),
        (
            "ETag of another",
            {"method": "POST", "json": page, "headers": {**auth, "If-None-Match": '"other"'}},
        ),
    ]


async def _seed(services: Services) -> tuple[str, str]:
    created = await services.store.create(
        CreatePlaylist("c1", "Mix", visibility=Visibility.PUBLIC), "alice"
    )
    pid = created.outcome.playlist_id
    await services.store.execute(
        AddEntries(pid, "a0", 0, ("chinook:track:1", "chinook:track:2", "chinook:track:3")), "alice"
    )
    hidden = await services.store.create(CreatePlaylist("c2", "Mine"), "alice")
    return ids.playlist_global_id(pid), ids.playlist_global_id(hidden.outcome.playlist_id)


def comparable(response: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in IGNORED]
    return response.status_code, headers, response.content


async def _answers(
    client: httpx.AsyncClient, asked: list[tuple[str, dict[str, Any]]]
) -> list[httpx.Response]:
    out = []
    for _, kwargs in asked:
        kwargs = dict(kwargs)
        url = kwargs.pop("url", "/graphql")
        out.append(await client.request(url=url, **kwargs))
    return out


async def test_the_lean_route_answers_as_the_view(migrated: str, tmp_path: Path) -> None:
    plain_app = running(settings(migrated, tmp_path, lean=False))
    lean_app = running(settings(migrated, tmp_path, lean=True))
    # Seeded before both start: a commit one app makes, the other hears of by polling
    # (chorus.db.watch) at a moment of its own, which would drop its answers at random.
    async with running(settings(migrated, tmp_path, lean=False)) as (_, services, _):
        pid, private = await _seed(services)
    async with plain_app as (plain, _, none), lean_app as (lean, _, behind):
        assert none is None  # no lean route: every request reaches the view
        asked = requests(pid, private)
        expected = await _answers(plain, asked)
        answers = await _answers(lean, asked)
        hit = expected[1]
        more = revalidations(hit, mint_token(SECRET, "alice"), pid)
        expected += await _answers(plain, more)
        seen_before = behind.seen
        answers += await _answers(lean, more)
        assert behind.seen == seen_before  # all four answered from the cache by the lean route
    for (name, _), want, got in zip(asked + more, expected, answers, strict=True):
        assert comparable(got) == comparable(want), name
    statuses = {name: r.status_code for (name, _), r in zip(asked + more, answers, strict=True)}
    assert statuses["hit"] == 200
    assert statuses["304"] == 304
    assert statuses["ETag of another"] == 200
    assert statuses["two tokens"] == 400
    assert statuses["406"] == 406
    assert hit.headers["etag"]
    assert hit.headers["cache-control"] == "private, no-cache"


async def test_hits_are_the_lean_routes_and_misses_the_views(migrated: str, tmp_path: Path) -> None:
    async with running(settings(migrated, tmp_path, lean=True)) as (client, services, behind):
        pid, _ = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        page = {"query": PAGE, "variables": {"id": pid}}
        first = await client.post("/graphql", json=page, headers=token)
        assert behind.seen == 1  # a miss: executed by the view
        second = await client.post("/graphql", json=page, headers=token)
        assert behind.seen == 1
        assert second.content == first.content
        assert second.headers["x-request-id"]  # the middleware outside still applies
        off = await client.post("/graphql", json=page)
        assert behind.seen == 2
        assert off.status_code == 200
        assert "errors" in off.json()


async def test_no_lean_route_while_a_query_budget_is_on(migrated: str, tmp_path: Path) -> None:
    overrides = {"query_cost_per_minute": 10_000}
    async with running(settings(migrated, tmp_path, lean=True, **overrides)) as (
        client,
        services,
        behind,
    ):
        pid, _ = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        page = {"query": PAGE, "variables": {"id": pid}}
        answers = [await client.post("/graphql", json=page, headers=token) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        # Every request was executed and charged the budget: none was a hit. The
        # first reached the view (its document was new), the others the lean route.
        left = [
            a.json()["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] for a in answers
        ]
        assert left[0] > left[1] > left[2], left
        assert behind.seen == 1


CREATE = """mutation Create($input: CreatePlaylistInput!) {
  createPlaylist(input: $input) { version playlist { title } userErrors { code } } }"""


class _CountingView:
    """The lean route's view, counting the tokens it is asked to check."""

    def __init__(self, view: Any) -> None:
        self._view = view
        self.identified = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    async def identify(self, header: object) -> Any:
        self.identified += 1
        return await self._view.identify(header)


async def test_a_kept_mutation_is_run_by_the_lean_route_its_token_checked_once(
    migrated: str, tmp_path: Path
) -> None:
    async with running(settings(migrated, tmp_path, lean=True)) as (client, _, behind):
        app: Any = client._transport.app  # type: ignore[attr-defined]
        lean = _lean_of(app)
        assert lean is not None
        counting = lean._view = _CountingView(lean._view)  # type: ignore[assignment]
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}

        async def create(operation_id: str, headers: dict[str, str]) -> httpx.Response:
            body = {
                "query": CREATE,
                "variables": {"input": {"operationId": operation_id, "title": operation_id}},
            }
            return await client.post("/graphql", json=body, headers=headers)

        first = await create("m1", token)  # parsed and kept by the view
        assert behind.seen == 1
        checked = counting.identified
        second = await create("m2", token)
        third = await create("m3", token)
        again = await create("m3", token)  # a retry: replayed
        assert counting.identified == checked + 3  # once each, by the route alone
        assert behind.seen == 1  # run by the lean route
        refused = await create("m4", {"Authorization": "Bearer x"})
        assert behind.seen == 2  # no viewer: the view refuses it
        titles = [
            r.json()["data"]["createPlaylist"]["playlist"]["title"] for r in (first, second, third)
        ]
        assert titles == ["m1", "m2", "m3"]
        assert again.json() == third.json()
        assert third.headers["cache-control"] == "no-store"
        assert refused.status_code == 200
        assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


async def test_the_lean_route_runs_kept_mutations_as_the_view(
    database_url: str, twin_url: str, tmp_path: Path
) -> None:
    """Kept mutations through the lean route and through the view, each app on its own
    database with the same clock and ids: the same status, headers and bytes."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    on = running(settings(database_url, tmp_path / "a", lean=True))
    off = running(settings(twin_url, tmp_path / "b", lean=False))
    token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
    gql = {**token, "Accept": "application/graphql-response+json"}
    add = (
        "mutation Add($input: AddEntriesInput!) { addEntries(input: $input) "
        "{ version rebased replayed userErrors { code message } playlist { version } } }"
    )

    def create(operation_id: str, **extra: Any) -> dict[str, Any]:
        return {"operationId": operation_id, "title": f"T {operation_id}", **extra}

    async with on as (lean, one, behind), off as (view, other, _):
        _same_clock_and_ids(one)
        _same_clock_and_ids(other)
        sent: list[tuple[str, dict[str, Any], dict[str, str]]] = [
            ("create, new", {"query": CREATE, "variables": {"input": create("c1")}}, token),
            ("create", {"query": CREATE, "variables": {"input": create("c2")}}, token),
            ("create, retried", {"query": CREATE, "variables": {"input": create("c2")}}, token),
            (
                "create, id reused",
                {"query": CREATE, "variables": {"input": create("c2", title="Other")}},
                token,
            ),
            (
                "create, graphql-response",
                {"query": CREATE, "variables": {"input": create("c3")}},
                gql,
            ),
            (
                "create, empty title",
                {"query": CREATE, "variables": {"input": create("c4", title=" ")}},
                token,
            ),
            ("create, input not an object", {"query": CREATE, "variables": {"input": 5}}, token),
            (
                "create, input not an object, graphql-response",
                {"query": CREATE, "variables": {"input": 5}},
                gql,
            ),
        ]
        for name, body, headers in sent:
            one_answer = await lean.post("/graphql", json=body, headers=headers)
            other_answer = await view.post("/graphql", json=body, headers=headers)
            assert comparable(one_answer) == comparable(other_answer), name
        newest = "{ viewer { playlists(first: 1) { edges { node { id } } } } }"
        mine = (await lean.post("/graphql", json={"query": newest}, headers=token)).json()
        playlist = mine["data"]["viewer"]["playlists"]["edges"][0]["node"]["id"]
        tracks = {"mediaIds": ["chinook:track:1"]}
        added = []
        for name, variables in [
            ("add, new", {"playlistId": playlist, "operationId": "a1", "baseVersion": 0, **tracks}),
            ("add", {"playlistId": playlist, "operationId": "a2", "baseVersion": 1, **tracks}),
            (
                "add, stale",
                {"playlistId": playlist, "operationId": "a3", "baseVersion": 0, **tracks},
            ),
            (
                "add, retried",
                {"playlistId": playlist, "operationId": "a2", "baseVersion": 1, **tracks},
            ),
            (
                "add, no such playlist",
                {"playlistId": "UGxheWxpc3Q6eA==", "operationId": "a4", "baseVersion": 0, **tracks},
            ),
        ]:
            body = {"query": add, "variables": {"input": variables}}
            one_answer = await lean.post("/graphql", json=body, headers=token)
            other_answer = await view.post("/graphql", json=body, headers=token)
            assert comparable(one_answer) == comparable(other_answer), name
            added.append(one_answer.json()["data"]["addEntries"])
        assert [a["version"] for a in added[:4]] == [1, 2, 3, 2], added
        assert added[3]["replayed"], added
        assert added[2]["rebased"], added
        assert behind.seen == 3  # the first of each document: the view's


ENTRIES = """query Entries($id: ID!, $n: Int) { playlist(id: $id) { title
  entries(first: $n) { edges { cursor node { mediaId } } } } }"""
TWO = "query A { viewer { user { id } } } query B { viewer { likedSongs { title } } }"
TYPENAME = "{ __typename }"
EXPENSIVE = (
    "{ viewer { playlists(first: 100) { edges { node { entries(first: 100)"
    " { edges { node { id } } } } } } } }"
)


def executed_requests(pid: str, private: str) -> list[tuple[str, dict[str, Any], bool]]:
    """``(name, request, new)``: ``new`` when its document (and operation) is new to the
    app, which only the view executes; every other one is a kept query's."""
    token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
    gql = {**token, "Accept": "application/graphql-response+json"}

    def post(query: str, headers: dict[str, str] = token, **body: Any) -> dict[str, Any]:
        return {"method": "POST", "headers": headers, "json": {"query": query, **body}}

    get = {
        "method": "GET",
        "headers": token,
        "params": {"query": PAGE, "variables": json.dumps({"id": private})},
    }
    return [
        ("page, new", post(PAGE, variables={"id": pid}), True),
        ("page, private", post(PAGE, variables={"id": private}), False),
        ("page again", post(PAGE, variables={"id": pid}), False),
        ("page, GET", get, False),
        ("page, graphql-response", post(PAGE, gql, variables={"id": pid}), False),
        ("page, extensions", post(PAGE, variables={"id": pid}, extensions={"x": 1}), False),
        ("entries, new", post(ENTRIES, variables={"id": pid, "n": 2}), True),
        ("entries, 101", post(ENTRIES, variables={"id": pid, "n": 101}), False),
        (
            "entries, 101, graphql-response",
            post(ENTRIES, gql, variables={"id": pid, "n": 101}),
            False,
        ),
        ("entries, no such playlist", post(ENTRIES, variables={"id": "UGxheWxpc3Q6eA=="}), False),
        (
            "entries, variable of a wrong type",
            post(ENTRIES, variables={"id": pid, "n": "x"}),
            False,
        ),
        (
            "entries, wrong type, graphql-response",
            post(ENTRIES, gql, variables={"id": pid, "n": "x"}),
            False,
        ),
        ("entries, missing variable", post(ENTRIES, variables={}), False),
        ("two operations, A", post(TWO, operationName="A"), True),
        ("two operations, A again", post(TWO, operationName="A"), False),
        ("two operations, B", post(TWO, operationName="B"), True),
        ("two operations, none named", post(TWO), True),
        ("typename", post(TYPENAME), True),
        ("typename again", post(TYPENAME), False),
        ("over the cost limit", post(EXPENSIVE), True),
        ("over the cost limit again", post(EXPENSIVE), False),
        ("over the cost limit, graphql-response", post(EXPENSIVE, gql), False),
    ]


@pytest.mark.parametrize("response_cache", [True, False], ids=["cache", "no cache"])
async def test_the_lean_route_executes_kept_queries_as_the_view(
    migrated: str, tmp_path: Path, response_cache: bool
) -> None:
    """A kept query the response cache does not answer is executed by the lean route:
    the same bytes and headers as the view's, errors and refusals included."""
    async with running(settings(migrated, tmp_path, lean=False)) as (_, services, _):
        pid, private = await _seed(services)
    asked = executed_requests(pid, private)
    plain_app = running(settings(migrated, tmp_path, lean=False, response_cache=response_cache))
    lean_app = running(settings(migrated, tmp_path, lean=True, response_cache=response_cache))
    async with plain_app as (plain, _, _), lean_app as (lean, _, behind):
        expected = await _answers(plain, [(name, kwargs) for name, kwargs, _ in asked])
        answers = []
        for name, kwargs, new in asked:
            seen = behind.seen
            answers += await _answers(lean, [(name, kwargs)])
            if not new and name != "typename again":  # a kept introspection answer: the view's
                assert behind.seen == seen, f"{name}: not the lean route's"
        etag = expected[2].headers["etag"]
        page = {"query": PAGE, "variables": {"id": pid}}
        auth = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}", "If-None-Match": etag}
        revalidated = [("304", {"method": "POST", "json": page, "headers": auth})]
        expected += await _answers(plain, revalidated)
        answers += await _answers(lean, revalidated)
    names = [name for name, _, _ in asked] + ["304"]
    for name, want, got in zip(names, expected, answers, strict=True):
        assert comparable(got) == comparable(want), name
    statuses = {name: r.status_code for name, r in zip(names, answers, strict=True)}
    assert statuses["page again"] == 200
    assert statuses["304"] == 304
    assert statuses["entries, wrong type, graphql-response"] == 400
    assert "errors" in answers[names.index("entries, 101")].json()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "view"])
async def test_an_empty_operation_name_is_never_answered_from_a_kept_answer(
    migrated: str, tmp_path: Path, lean: bool
) -> None:
    """``operationName: ""`` names no operation: an error however often the same document
    was answered without a name (the response cache's and the introspection answers' keys
    tell the two apart)."""
    async with running(settings(migrated, tmp_path, lean=lean)) as (client, services, _):
        pid, _ = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        for document, variables in ((PAGE, {"id": pid}), (TYPENAME, {})):
            unnamed = {"query": document, "variables": variables}
            named = {**unnamed, "operationName": ""}
            first = await client.post("/graphql", json=named, headers=token)
            for _ in range(2):  # answered, then kept (or a hit)
                answered = await client.post("/graphql", json=unnamed, headers=token)
                assert answered.status_code == 200, answered.text
                assert "errors" not in answered.json()
            again = await client.post("/graphql", json=named, headers=token)
            assert (again.status_code, again.content) == (first.status_code, first.content)
            assert "errors" in again.json(), document


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "view"])
async def test_a_request_error_is_not_tagged_nor_revalidated(
    migrated: str, tmp_path: Path, lean: bool
) -> None:
    """Variables that do not coerce are no query's answer: ``no-store``, no ``ETag``, and an
    ``If-None-Match`` of any tag still gets the refusal (it was a 304 under graphql-response)."""
    async with running(settings(migrated, tmp_path, lean=lean)) as (client, services, _):
        pid, _ = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        bad = {"query": ENTRIES, "variables": {"id": pid, "n": "ten"}}
        for accept, status in (
            ("application/json", 200),
            ("application/graphql-response+json", 400),
        ):
            headers = {**token, "Accept": accept}
            for _ in range(2):  # the document new, then kept
                refused = await client.post("/graphql", json=bad, headers=headers)
                assert refused.status_code == status, refused.text
                assert "data" not in refused.json()
                assert refused.headers["cache-control"] == "no-store"
                assert "etag" not in refused.headers
            tagged = etag_of(refused.content)
            again = await client.post(
                "/graphql", json=bad, headers={**headers, "If-None-Match": tagged}
            )
            assert again.status_code == status, again.text


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "view"])
async def test_cache_counters_name_the_operation_as_request_metrics_do(
    migrated: str, tmp_path: Path, lean: bool
) -> None:
    """``query Counted`` sent without ``operationName`` is ``Counted`` in the response
    cache's counters too (it was ``anonymous``, then ``other`` until the name was learned),
    as in ``chorus_graphql_request_seconds``; each request is counted once (a ``304`` that
    needed its answer executed is that execution's ``miss``)."""
    named = "query Counted($id: ID!) { playlist(id: $id) { title } }"
    async with running(settings(migrated, tmp_path, lean=lean)) as (client, services, _):
        pid, private = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}

        def counted() -> dict[str, float]:
            results = ("miss", "hit", "not_modified", "bypass")
            found = {r: RESPONSE_CACHE.labels("Counted", r)._value.get() for r in results}
            found["anonymous"] = sum(
                RESPONSE_CACHE.labels(other, r)._value.get()
                for other in ("anonymous", "other")
                for r in results
            )
            return found

        before = counted()
        seconds = REQUEST_SECONDS.labels("query", "Counted")._sum.get()
        for _ in range(3):
            answer = await client.post(
                "/graphql", json={"query": named, "variables": {"id": pid}}, headers=token
            )
            assert answer.status_code == 200, answer.text
        revalidated = await client.post(
            "/graphql",
            json={"query": named, "variables": {"id": private}},
            headers={**token, "If-None-Match": "*"},
        )
        assert revalidated.status_code == 304
        after = counted()
        assert after["miss"] - before["miss"] == 2  # the first page, then the 304's own run
        assert after["hit"] - before["hit"] == 2
        assert after["not_modified"] == before["not_modified"]
        assert after["anonymous"] == before["anonymous"]
        assert REQUEST_SECONDS.labels("query", "Counted")._sum.get() > seconds


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "view"])
async def test_refusals_are_no_store_and_report_no_cost_they_did_not_run(
    migrated: str, tmp_path: Path, lean: bool
) -> None:
    """An unknown ``operationName``, one that is not a string and a mutation over GET
    are refused ``no-store`` like every answer that is not a query's; a variable that
    does not coerce runs nothing, so its cost has no ``actualQueryCost``."""
    async with running(settings(migrated, tmp_path, lean=lean)) as (client, services, _):
        pid, _ = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        page = {"query": PAGE, "variables": {"id": pid}}
        refused = [
            await client.post("/graphql", json={**page, "operationName": "Nope"}, headers=token),
            await client.post("/graphql", json={**page, "operationName": 123}, headers=token),
            await client.get(
                "/graphql", params={"query": "mutation { __typename }"}, headers=token
            ),
        ]
        # An unknown name is a request error: 200 under JSON, no data (test_bad_input.py).
        assert [r.status_code for r in refused] == [200, 400, 405]
        for answer in refused:
            assert answer.headers["cache-control"] == "no-store", answer.text
            assert "etag" not in answer.headers
        bad = {"query": ENTRIES, "variables": {"id": pid, "n": "ten"}}
        for _ in range(2):  # the document new, then kept
            answer = (await client.post("/graphql", json=bad, headers=token)).json()
            assert "data" not in answer
            cost = answer["extensions"]["cost"]
            assert "requestedQueryCost" in cost
            assert "actualQueryCost" not in cost, cost


async def test_a_request_that_chooses_no_operation_is_timed_as_unknown(
    migrated: str, tmp_path: Path
) -> None:
    """Two operations and no ``operationName``: refused, and timed under ``unknown`` —
    never under the first operation's name, even once that name is learned."""
    two = "query MC($p: ID!) { playlist(id: $p) { title } } query MD { viewer { user { id } } }"
    async with running(settings(migrated, tmp_path, lean=True)) as (client, services, _):
        pid, _ = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        body = {"query": two, "variables": {"p": pid}}
        taught = await client.post("/graphql", json={**body, "operationName": "MC"}, headers=token)
        assert "errors" not in taught.json()
        named = REQUEST_SECONDS.labels("query", "MC")._sum.get()
        unknown = REQUEST_SECONDS.labels("unknown", "unknown")._sum.get()
        refused = await client.post("/graphql", json=body, headers=token)
        assert refused.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
        assert REQUEST_SECONDS.labels("query", "MC")._sum.get() == named
        assert REQUEST_SECONDS.labels("unknown", "unknown")._sum.get() > unknown


async def test_a_subscription_over_http_is_the_views_refusal(migrated: str, tmp_path: Path) -> None:
    """Over HTTP a subscription is refused by the view (it needs a WebSocket), however
    often it is sent: the route never runs one."""
    subscription = "subscription S($id: ID!) { playlistEvents(playlistId: $id) { __typename } }"
    async with running(settings(migrated, tmp_path, lean=True)) as (client, services, behind):
        pid, _ = await _seed(services)
        token = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        body = {"query": subscription, "variables": {"id": pid}}
        answers = [await client.post("/graphql", json=body, headers=token) for _ in range(3)]
        assert [a.status_code for a in answers] == [400, 400, 400]
        assert answers[1].content == answers[0].content == answers[2].content
        assert b"WebSocket" in answers[0].content
        assert behind.seen == 3  # every one the view's
