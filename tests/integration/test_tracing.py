"""Traces and access lines through the whole ASGI app, on SQLite and PostgreSQL.

A read is one trace: the HTTP server span, the GraphQL operation's span
under it, the SQL transaction's span under that. A mutation's commit keeps
its ``traceparent`` in the outbox, and the relay's publish span links to it.
With tracing off nothing is installed and the outbox keeps no context.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from chorus import bootstrap, tracing
from chorus.auth import mint_token
from chorus.db.tables import outbox
from chorus.graphql.schema.common.ids import playlist_id as raw_playlist_id
from chorus.logs import ACCESS_LOGGER, JsonFormatter
from chorus.resolvers.context import Services
from chorus.settings import Settings
from tests.full.helpers import eventually
from tests.integration.test_raced_reads import running

SECRET = "tracing-" + "s" * 40

CREATE = """mutation Create($input: CreatePlaylistInput!) {
  createPlaylist(input: $input) { version playlist { id } userErrors { code } } }"""
ADD = """mutation Add($input: AddEntriesInput!) {
  addEntries(input: $input) { version userErrors { code } } }"""
READ = """query ReadMix($id: ID!) { playlist(id: $id) { title
  entries(first: 10) { edges { node { mediaId } } } } }"""


def _settings(url: str, tmp_path: Path, **overrides: Any) -> Settings:
    # No response cache: the read must execute (and read SQL) every time.
    return Settings(
        database_url=url,
        data_dir=str(tmp_path),
        jwt_secret=SECRET,
        response_cache=False,
        **overrides,
    )


async def _post(
    client: httpx.AsyncClient, query: str, user: str = "alice", **variables: Any
) -> Any:
    response = await client.post(
        "/graphql",
        json={"query": query, "variables": variables},
        headers={"Authorization": f"Bearer {mint_token(SECRET, user)}"},
    )
    assert response.status_code == 200, response.text
    return response.json()["data"]


async def _create_with_one_entry(client: httpx.AsyncClient) -> str:
    created = await _post(client, CREATE, input={"operationId": _op(), "title": "Mix"})
    playlist_id: str = created["createPlaylist"]["playlist"]["id"]
    await _add(client, playlist_id, 0, "chinook:track:1")
    return playlist_id


async def _add(client: httpx.AsyncClient, playlist_id: str, base_version: int, media: str) -> None:
    added = await _post(
        client,
        ADD,
        input={
            "operationId": _op(),
            "playlistId": playlist_id,
            "baseVersion": base_version,
            "mediaIds": [media],
        },
    )
    assert added["addEntries"]["userErrors"] == [], added


def _op() -> str:
    return f"op-{uuid.uuid4().hex}"


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in spans if s.name == name]
    assert len(named) == 1, [s.name for s in spans]
    return named[0]


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_read_is_one_trace_from_http_through_the_operation_to_sql(
    database_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with running(_settings(database_url, tmp_path)) as (client, _):
        playlist_id = await _create_with_one_entry(client)
        spans.clear()
        data = await _post(client, READ, user="alice", id=playlist_id)
    assert data["playlist"]["entries"]["edges"] == [{"node": {"mediaId": "chinook:track:1"}}]

    finished = list(spans.get_finished_spans())
    server = _one(finished, "POST /graphql")
    operation = _one(finished, "query ReadMix")
    # The request's reads; the embedded relay may be publishing the commits before
    # it meanwhile, in traces of its own (its feed sink reads the follow counts).
    publishes = {s.context.span_id for s in finished if s.name == "outbox publish"}
    reads = [s for s in finished if s.name == "db.read" and _parent_of(s) not in publishes]
    assert server.kind == SpanKind.SERVER
    assert server.parent is None
    assert operation.attributes is not None
    assert operation.attributes["graphql.operation.name"] == "ReadMix"
    assert operation.attributes["graphql.operation.type"] == "query"
    assert _parent_of(operation) == server.context.span_id
    assert reads, [s.name for s in finished]
    for read in reads:
        assert read.kind == SpanKind.CLIENT
        assert read.attributes is not None
        assert read.attributes["db.system"] == database_url.split("+")[0]
        assert _parent_of(read) == operation.context.span_id
    assert {s.context.trace_id for s in [server, operation, *reads]} == {server.context.trace_id}


async def test_a_commit_keeps_its_trace_in_the_outbox_and_the_relay_links_to_it(
    database_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with running(_settings(database_url, tmp_path)) as (client, services):
        spans.clear()
        await _post(client, CREATE, input={"operationId": _op(), "title": "Traced"})
        mutation = _one(list(spans.get_finished_spans()), "mutation Create")
        assert mutation.attributes is not None
        assert mutation.attributes["graphql.operation.type"] == "mutation"

        async def published() -> bool:
            return any(s.name == "outbox publish" for s in spans.get_finished_spans())

        await eventually(published, what="the in-process relay to publish")
        stored = await _trace_contexts(services)
    trace_id = format(mutation.context.trace_id, "032x")
    assert len(stored) == 1
    assert stored[0] is not None
    assert stored[0].split("-")[1] == trace_id  # the commit's traceparent, kept with its event
    publish = _one(list(spans.get_finished_spans()), "outbox publish")
    assert publish.kind == SpanKind.PRODUCER
    assert publish.context.trace_id != mutation.context.trace_id  # its own trace, linked
    assert [link.context.trace_id for link in publish.links] == [mutation.context.trace_id]


async def test_a_group_commit_is_a_trace_of_its_own_linked_to_each_request(
    database_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """The owner's task commits a group in a ``db.group_commit`` span of its own trace,
    linked to the request of each command it holds (made only when tracing is on)."""
    async with running(_settings(database_url, tmp_path)) as (client, _):
        playlist_id = await _create_with_one_entry(client)
        spans.clear()
        await _add(client, playlist_id, 1, "chinook:track:2")
    finished = list(spans.get_finished_spans())
    mutation = _one(finished, "mutation Add")
    group = _one(finished, "db.group_commit")
    assert group.context.trace_id != mutation.context.trace_id
    assert [link.context.trace_id for link in group.links] == [mutation.context.trace_id]
    assert group.attributes is not None
    assert group.attributes["chorus.group.size"] == 1
    assert group.attributes["chorus.playlist.id"] == raw_playlist_id(playlist_id)


async def _trace_contexts(services: Services) -> list[str | None]:
    async with services.db.read() as conn:
        return list((await conn.execute(select(outbox.c.trace_context))).scalars())


async def test_tracing_off_installs_nothing_and_keeps_no_trace_context(
    database_url: str, tmp_path: Path
) -> None:
    settings = _settings(database_url, tmp_path)
    with bootstrap.traced(settings, "api") as provider:
        assert provider is None
    assert not tracing.enabled()
    async with running(settings) as (client, services):
        playlist_id = await _create_with_one_entry(client)
        data = await _post(client, READ, id=playlist_id)
        stored = await _trace_contexts(services)
    assert data["playlist"]["title"] == "Mix"
    assert stored == [None, None]
    assert tracing.current_traceparent() is None


async def test_json_access_lines_name_the_request_user_operation_duration_and_status(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(database_url, tmp_path, log_format="json")
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        async with running(settings) as (client, _):
            playlist_id = await _create_with_one_entry(client)
            caplog.clear()
            await _post(client, READ, user="bob", id=playlist_id)
            answer = await client.post("/graphql", json={"query": "{ nope }"})
    formatter = JsonFormatter()
    lines = []
    for record in caplog.records:
        lines.append(json.loads(formatter.format(record)))
    assert [line["logger"] for line in lines] == [ACCESS_LOGGER, ACCESS_LOGGER]
    read, refused = lines
    assert read["user"] == "bob"
    assert read["operation"] == "ReadMix"
    assert read["status"] == 200
    assert (read["method"], read["path"]) == ("POST", "/graphql")
    assert isinstance(read["duration_ms"], float)
    assert 0 < read["duration_ms"] < 30_000
    assert len(read["request_id"]) == 32  # a fresh uuid4 hex: the client sent none
    assert (refused["user"], refused["operation"]) == (None, None)
    assert refused["status"] == answer.status_code
    assert refused["request_id"] == answer.headers["x-request-id"]


async def test_text_logs_have_no_chorus_access_lines(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        async with running(_settings(database_url, tmp_path)) as (client, _):
            await _create_with_one_entry(client)
    assert [r for r in caplog.records if r.name == ACCESS_LOGGER] == []


async def test_probes_and_static_files_make_no_spans(
    database_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with running(_settings(database_url, tmp_path)) as (client, _):
        spans.clear()
        for path in ("/healthz", "/readyz", "/metrics", "/web/"):
            assert (await client.get(path)).status_code == 200, path
        assert spans.get_finished_spans() == ()
        await _post(client, READ, id="nope")  # an answer all the same: playlist null
    assert "POST /graphql" in {s.name for s in spans.get_finished_spans()}


@pytest.mark.parametrize("lean_route", [True, False])
async def test_a_cached_answer_is_traced_alike_by_either_route(
    database_url: str, tmp_path: Path, spans: InMemorySpanExporter, lean_route: bool
) -> None:
    settings = _settings(database_url, tmp_path).model_copy(
        update={"response_cache": True, "lean_route": lean_route}
    )
    async with running(settings) as (client, _):
        playlist_id = await _create_with_one_entry(client)
        body = {"query": READ, "variables": {"id": playlist_id}, "operationName": "ReadMix"}
        headers = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
        kept = await client.post("/graphql", json=body, headers=headers)  # executed, kept
        spans.clear()
        hit = await client.post("/graphql", json=body, headers=headers)  # the cache's
    assert hit.status_code == 200
    assert hit.content == kept.content

    finished = list(spans.get_finished_spans())
    server = _one(finished, "POST /graphql")
    operation = _one(finished, "query ReadMix")
    assert operation.attributes is not None
    assert dict(operation.attributes) == {
        "graphql.operation.name": "ReadMix",
        "graphql.operation.type": "query",
        "http.response.status_code": 200,
    }
    assert _parent_of(operation) == server.context.span_id
    assert not [
        s for s in finished if s.name == "db.read" and _parent_of(s) == server.context.span_id
    ]
