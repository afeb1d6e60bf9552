"""Mutation plans against graphql-core, over the real schema (differential).

Two apps, each on its own database of the same backend (SQLite files, or two
PostgreSQL databases): ``CHORUS_COMPILED_EXECUTION`` on in one (a kept
mutation document runs by its plan, :mod:`chorus.graphql.execution.mutation_plans`),
off in the other, whose field fast path is off too (graphql-core executes
every field). Both stores get the same clock and id sequence, and every
request is sent to both in the same order, so each commits the same rows:
each answer must be the same status and body, byte for byte. The documents:
every mutation of the API with its whole payload, the README's, the write
bench's; the requests: commits, retries with the same ``operationId``
(replayed, or refused as reused), stale ``baseVersion`` (rebased, or
refused when strict), unknown playlists, forbidden actors, no token,
invalid input (user errors, a field error while coercing an argument,
variables that do not coerce), two mutations in one document, and an error
raised while the payload is completed (after the command committed).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import OperationDefinitionNode, OperationType, parse

from chorus.graphql.schema.common import payloads
from chorus.resolvers import queries
from chorus.resolvers.context import Services
from tests.e2e.helpers import MUTATIONS, PAYLOAD, mutation_document
from tests.integration.test_fast_paths_differential import _post
from tests.integration.test_planned_differential import _served
from tests.integration.test_raced_reads import running, settings_for

ROOT = Path(__file__).resolve().parents[2]
BENCH_ADD = (
    "mutation Add($input: AddEntriesInput!) { addEntries(input: $input) "
    "{ version rebased replayed userErrors { code message } } }"
)
TWO = f"""
mutation Two($first: AddEntriesInput!, $second: AddEntriesInput!) {{
  one: addEntries(input: $first) {{ {PAYLOAD} entries {{ id }} }}
  two: addEntries(input: $second) {{ version userErrors {{ code }} __typename }}
}}
"""
WITH_PAGE = """
mutation Paged($input: AddEntriesInput!) { addEntries(input: $input) { version
  playlist { version entries(first: 3) { totalCount pageInfo { endCursor hasNextPage }
    edges { cursor node { id positionKey media { title artists durationMs } } } } } } }
"""
"""A payload paging the playlist's entries: written from their rows by the plan
(:mod:`chorus.graphql.schema.common.entry_rows`), by the objects in graphql-core."""
NULL_IN_INPUT = """
mutation Create($vis: Visibility) {
  createPlaylist(input: {operationId: "nv", title: "T", visibility: $vis}) { version }
}
"""


def _same_clock_and_ids(services: Services) -> None:
    """Each store: a fixed clock and its own counter of ids (the same sequence in both)."""
    counter = itertools.count(1)
    store: Any = services.store
    store._clock = lambda: datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    store._new_id = lambda: f"id{next(counter):06d}"


@asynccontextmanager
async def _twins(
    url: str, twin: str, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with AsyncExitStack() as stack:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        planned, one = await stack.enter_async_context(
            running(
                settings_for(url, tmp_path / "a", response_cache=False, compiled_execution=True)
            )
        )
        plain, other = await stack.enter_async_context(
            running(
                settings_for(
                    twin,
                    tmp_path / "b",
                    response_cache=False,
                    compiled_execution=False,
                    fast_field_execution=False,
                )
            )
        )
        _same_clock_and_ids(one)
        _same_clock_and_ids(other)
        yield planned, plain


class _Pair:
    """Sends each request to both apps; the answers must be the same bytes."""

    def __init__(self, planned: httpx.AsyncClient, plain: httpx.AsyncClient) -> None:
        self.planned, self.plain = planned, plain
        self.ops = itertools.count(1)

    def op(self) -> str:
        return f"op-{next(self.ops)}"

    async def send(
        self, document: str, user: str | None = "alice", **variables: Any
    ) -> dict[str, Any]:
        body = {"query": document, "variables": variables}
        one, other = await _post(self.planned, user, body), await _post(self.plain, user, body)
        assert (one.status_code, one.content) == (other.status_code, other.content), body
        answer: dict[str, Any] = one.json()
        return answer


def _readme_mutations() -> list[str]:
    texts = [(ROOT / "README.md").read_text()]
    texts += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    found = [b for t in texts for b in re.findall(r"```graphql\n(.*?)```", t, re.DOTALL)]
    kept = []
    for text in dict.fromkeys(found):
        operations = [d for d in parse(text).definitions if isinstance(d, OperationDefinitionNode)]
        if operations and all(o.operation is OperationType.MUTATION for o in operations):
            kept.append(text)
    return kept


async def test_mutation_plans_answer_as_graphql_core(
    database_url: str, twin_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _twins(database_url, twin_url, tmp_path) as (planned, plain):
        pair = _Pair(planned, plain)
        before, abandoned = _served("plan"), _served("abandoned")
        run = {name: mutation_document(name) for name in MUTATIONS}
        created = await pair.send(
            run["createPlaylist"], input={"operationId": pair.op(), "title": "Mix"}
        )
        pid = created["data"]["createPlaylist"]["playlist"]["id"]
        media = [f"chinook:track:{n}" for n in range(1, 6)]
        add = {"playlistId": pid, "operationId": "add-1", "baseVersion": 0, "mediaIds": media}
        added = await pair.send(run["addEntries"], input=add)
        entries = [e["id"] for e in added["data"]["addEntries"]["entries"]]
        assert added["data"]["addEntries"]["version"] == 1
        again = await pair.send(run["addEntries"], input=add)  # a retry: the stored result
        assert again["data"]["addEntries"]["replayed"] is True
        reused = {**add, "mediaIds": media[:1]}  # the same id for another edit: refused
        await pair.send(run["addEntries"], input=reused)
        stale = {**add, "operationId": pair.op(), "strict": True}
        await pair.send(run["addEntries"], input=stale)  # stale baseVersion, strict: refused
        await pair.send(BENCH_ADD, input={**add, "operationId": pair.op()})  # rebased
        paged = await pair.send(WITH_PAGE, input={**add, "operationId": pair.op()})
        assert paged["data"]["addEntries"]["playlist"]["entries"]["totalCount"] > 3, paged
        await pair.send(BENCH_ADD, input={**add, "operationId": pair.op(), "playlistId": "nope"})
        unknown = "UGxheWxpc3Q6bm9uZQ=="
        await pair.send(
            run["addEntries"], input={**add, "operationId": pair.op(), "playlistId": unknown}
        )
        await pair.send(run["addEntries"], "mallory", input={**add, "operationId": pair.op()})
        await pair.send(run["addEntries"], None, input={**add, "operationId": pair.op()})
        await pair.send(run["addEntries"], input={**add, "operationId": pair.op(), "mediaIds": []})
        await pair.send(run["addEntries"], input={**add, "baseVersion": "x"})  # no coercion
        await pair.send(NULL_IN_INPUT, vis=None)  # a field error coercing the argument
        await pair.send(
            TWO,
            first={**add, "operationId": pair.op()},
            second={**add, "operationId": pair.op(), "strict": True},
        )
        await pair.send(TWO, first={**add, "playlistId": "bad"}, second={**add, "operationId": "t"})
        edits: list[tuple[str, dict[str, Any]]] = [
            ("moveEntries", {"entryIds": [entries[0]], "before": entries[3]}),
            ("removeEntries", {"entryIds": [entries[1], entries[1]]}),
            ("updatePlaylist", {"title": "Renamed", "description": "d"}),
            ("setMemberRole", {"userId": "bob", "role": "EDITOR"}),
            ("removeMember", {"userId": "bob"}),
            ("revertPlaylist", {"toVersion": 1}),
            ("deletePlaylist", {}),
        ]
        for name, fields in edits:
            edit = {"playlistId": pid, "operationId": pair.op(), "baseVersion": 2, **fields}
            await pair.send(run[name], input=edit)
            await pair.send(run[name], input=edit)  # replayed
        written = _readme_mutations()
        assert len(written) >= 2
        other = await pair.send(run["createPlaylist"], input={"operationId": "c2", "title": "B"})
        second = other["data"]["createPlaylist"]["playlist"]["id"]
        for document in written:
            await pair.send(
                document,
                playlist=second,
                op=pair.op(),
                base=0,
                media=media[:2],
                entry=entries[2],
                before=entries[4],
            )
        served = _served("plan") - before
        assert served >= 20, served

        # The payload fails after the command committed: graphql-core completes the
        # recorded payload, and the command is not run again.
        real = queries.visible_playlist

        async def failing(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(queries, "visible_playlist", failing)
        assert payloads.queries is queries
        failed = await pair.send(
            run["addEntries"], input={**add, "playlistId": second, "operationId": pair.op()}
        )
        monkeypatch.setattr(queries, "visible_playlist", real)
        version = failed["data"]["addEntries"]["version"]
        assert failed["errors"][0]["path"] == ["addEntries", "playlist"], failed
        assert _served("abandoned") - abandoned >= 2
        after = await pair.send(
            run["addEntries"], input={**add, "playlistId": second, "operationId": pair.op()}
        )
        assert after["data"]["addEntries"]["version"] == version + 1  # committed once only


APPLY = """mutation Apply($input: ApplyOperationsInput!) {
  applyOperations(input: $input) { version userErrors { code } } }"""
TWO_PAYLOADS = """
mutation Both($first: AddEntriesInput!, $second: AddEntriesInput!) {
  a: addEntries(input: $first) { version playlist { version entryCount } }
  b: addEntries(input: $second) {
    version playlist { version atVersion(version: 9999) { version } } }
}
"""
HISTORY_AND_ERROR = """
query Extra($id: ID!) {
  playlist(id: $id) { version changes(sinceVersion: 0, first: 5) { hasMore versions { version } } }
  x: playlist(id: $id) { entries(first: 101) { totalCount } }
}
"""
PAYLOAD_HISTORY_AND_ERROR = """
mutation Update($input: UpdatePlaylistInput!) {
  updatePlaylist(input: $input) { version playlist { version
    changes(sinceVersion: 0, first: 5) { hasMore versions { version } }
    atVersion(version: 9999) { version } } }
}
"""


async def test_what_an_abandoned_plan_did_is_not_seen_by_graphql_core(
    database_url: str, twin_url: str, tmp_path: Path
) -> None:
    """A fresh user's findings: when a plan gave way to graphql-core, the rerun started
    with the history and extra cost the plan had charged (``actualQueryCost`` twice the
    charge; a ``changes`` page cut short), and an earlier root field's payload, completed
    again after a later command committed, showed the later version."""
    async with _twins(database_url, twin_url, tmp_path) as (planned, plain):
        pair = _Pair(planned, plain)
        created = await pair.send(
            mutation_document("createPlaylist"), input={"operationId": pair.op(), "title": "Big"}
        )
        pid = created["data"]["createPlaylist"]["playlist"]["id"]
        adds = [
            {
                "addEntries": {
                    "operationId": pair.op(),
                    "mediaIds": [f"chinook:track:{n}" for n in range(start, start + 100)],
                }
            }
            for start in (1, 101, 201)
        ]
        batch = {"playlistId": pid, "baseVersion": 0, "atomic": True, "operations": adds}
        applied = await pair.send(APPLY, input=batch)
        assert applied["data"]["applyOperations"]["version"] == 1  # 300 entries in one version
        for _ in range(2):  # built, then kept: the plan runs, meets the error, gives way
            extra = await pair.send(HISTORY_AND_ERROR, id=pid)
            assert extra["errors"][0]["path"] == ["x", "entries"], extra
            cost = extra["extensions"]["cost"]
            assert cost["actualQueryCost"] - cost["requestedQueryCost"] == 200, cost

        add = {"playlistId": pid, "baseVersion": 1, "mediaIds": ["chinook:track:400"]}
        for _ in range(2):
            both = await pair.send(
                TWO_PAYLOADS,
                first={**add, "operationId": pair.op()},
                second={**add, "operationId": pair.op()},
            )
            first = both["data"]["a"]
            assert first["playlist"]["version"] == first["version"], both  # not b's version
            assert both["errors"][0]["path"][:3] == ["b", "playlist", "atVersion"], both

        update = {"playlistId": pid, "baseVersion": 0, "description": "d"}
        for _ in range(2):
            updated = await pair.send(
                PAYLOAD_HISTORY_AND_ERROR, input={**update, "operationId": pair.op()}
            )
            assert updated["errors"], updated
            cost = updated["extensions"]["cost"]
            assert cost["actualQueryCost"] - cost["requestedQueryCost"] == 200, cost
