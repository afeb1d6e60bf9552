"""The API's fast paths against their plain twins, over the real schema (differential).

Two apps run on the same database (SQLite and PostgreSQL), the response
cache off in both so every query executes:

* the field executor: ``CHORUS_FAST_FIELD_EXECUTION`` on in one, off (graphql-core
  executes every field) in the other; every document of
  :data:`tests.integration.graphql_corpus.CORPUS` gets the same status and
  the same body, byte for byte (data, errors and their paths, extensions);
* the introspection answers: ``CHORUS_INTROSPECTION_ANSWERS`` on in one, off
  in the other; the standard introspection query and GraphiQL's, asked twice
  (the second a kept answer on one side), with and without a token, get the
  same body and ``ETag``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from graphql import get_introspection_query

from chorus.auth import mint_token
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    RemoveEntries,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.model import Role, Visibility
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import Services
from tests.e2e.helpers import mutation_document
from tests.integration.graphql_corpus import CORPUS, OPERATION_NAMES, bind
from tests.integration.test_raced_reads import SECRET, running, settings_for

Apps = tuple[httpx.AsyncClient, httpx.AsyncClient]

_ONLY_EXECUTED = {"response_cache": False, "compiled_execution": False}
"""Every query executed, and by graphql-core (plans have their own test:
``test_planned_differential.py``)."""


@asynccontextmanager
async def _twins(url: str, tmp_path: Path, setting: str) -> AsyncIterator[tuple[Apps, Services]]:
    """The app with ``setting`` on and its twin with it off, on ``url``; the first's services."""
    async with AsyncExitStack() as stack:
        on, services = await stack.enter_async_context(
            running(settings_for(url, tmp_path, **_ONLY_EXECUTED, **{setting: True}))
        )
        off, _ = await stack.enter_async_context(
            running(settings_for(url, tmp_path, **_ONLY_EXECUTED, **{setting: False}))
        )
        yield (on, off), services


def _headers(user: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, user)}"} if user else {}


async def _post(client: httpx.AsyncClient, user: str | None, body: dict[str, Any]) -> Any:
    return await client.post("/graphql", json=body, headers=_headers(user))


async def _seed(services: Services, client: httpx.AsyncClient) -> dict[str, Any]:
    """Alice's PUBLIC collaborative mix (Bob its editor, 12 tracks, one removed, a
    description) and a PRIVATE one Bob may view; the corpus's ``$`` values."""
    store = services.store
    mix = await store.create(
        CreatePlaylist("c1", "Mix One", visibility=Visibility.PUBLIC, collaborative=True), "alice"
    )
    pid = mix.outcome.playlist_id
    tracks = tuple(f"chinook:track:{n}" for n in range(1, 13))
    added = await store.execute(AddEntries(pid, "a1", 0, tracks), "alice")
    await store.execute(SetMemberRole(pid, "m1", 1, user_id="bob", role=Role.EDITOR), "alice")
    await store.execute(UpdatePlaylist(pid, "u1", 2, description="for the road"), "alice")
    first = added.outcome.entries[0].entry_id
    await store.execute(RemoveEntries(pid, "r1", 3, (first,)), "alice")
    private = await store.create(CreatePlaylist("c2", "Secret mix"), "alice")
    secret = private.outcome.playlist_id
    await store.execute(SetMemberRole(secret, "m2", 0, user_id="bob", role=Role.VIEWER), "alice")
    seeded: dict[str, Any] = {
        "pid": ids.playlist_global_id(pid),
        "private": ids.playlist_global_id(secret),
        "entry": ids.entry_global_id(pid, added.outcome.entries[1].entry_id),
        "user": "bob",
    }
    seeded["replay"] = {
        "playlistId": seeded["pid"],
        "operationId": "replay-1",
        "baseVersion": 4,
        "mediaIds": ["chinook:track:40"],
    }
    document = mutation_document("addEntries")  # committed here, replayed by the corpus
    done = await _post(
        client, "alice", {"query": document, "variables": {"input": seeded["replay"]}}
    )
    assert done.json()["data"]["addEntries"]["version"] == 5, done.text
    page = await _post(client, "alice", {"query": CORPUS[0][1], "variables": {"id": seeded["pid"]}})
    seeded["cursor"] = page.json()["data"]["playlist"]["entries"]["edges"][4]["cursor"]
    return seeded


async def test_the_field_fast_path_answers_as_graphql_core(
    database_url: str, tmp_path: Path
) -> None:
    async with _twins(database_url, tmp_path, "fast_field_execution") as ((fast, plain), s):
        seeded = await _seed(s, fast)
        statuses: set[int] = set()
        with_errors = with_data = 0
        for user, document, variables in CORPUS:
            body = {"query": document, "variables": bind(variables, seeded)}
            if document in OPERATION_NAMES:
                body["operationName"] = OPERATION_NAMES[document]
            one, other = await _post(fast, user, body), await _post(plain, user, body)
            assert (one.status_code, one.content) == (other.status_code, other.content), document
            statuses.add(one.status_code)
            answer = one.json()
            with_errors += bool(answer.get("errors"))
            with_data += bool(answer.get("data"))
    # The corpus is what it says: answers with data, errors, both, and refusals.
    assert len(CORPUS) >= 30
    assert with_data >= 25
    assert with_errors >= 6
    assert statuses >= {200}


GRAPHIQL_INTROSPECTION = get_introspection_query(
    descriptions=True,
    specified_by_url=True,
    directive_is_repeatable=True,
    schema_description=True,
    input_value_deprecation=True,
)
"""What GraphiQL 3 sends (``getIntrospectionQuery`` with its options), as graphql-core builds it."""


async def test_kept_introspection_answers_are_the_executed_ones(
    database_url: str, tmp_path: Path
) -> None:
    async with _twins(database_url, tmp_path, "introspection_answers") as ((kept, plain), _):
        for document in (get_introspection_query(), GRAPHIQL_INTROSPECTION):
            for user in (None, "alice", None):  # the last one a kept answer on one side
                body = {"query": document, "operationName": "IntrospectionQuery"}
                one, other = await _post(kept, user, body), await _post(plain, user, body)
                assert one.status_code == other.status_code == 200
                assert one.content == other.content
                assert one.headers["etag"] == other.headers["etag"]
                assert one.json()["data"]["__schema"]["queryType"]["name"] == "Query"
        assert _kept_count(kept) == 2
        assert _kept_count(plain) == 0


def _kept_count(client: httpx.AsyncClient) -> int:
    """How many introspection answers the app behind ``client`` keeps."""
    app: Any = client._transport.app  # type: ignore[attr-defined]
    while not hasattr(app, "state") or not hasattr(app.state, "graphql"):
        app = app.app
    return len(app.state.graphql.introspections._kept)
