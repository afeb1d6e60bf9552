"""Plans against graphql-core, over the real schema (differential).

Two apps run on the same database (SQLite and PostgreSQL), the response
cache off in both so every query executes: ``CHORUS_COMPILED_EXECUTION`` on
in one (kept query documents run by their plans,
:mod:`chorus.graphql.execution.planned`), off in the other, whose field fast
path is off too (graphql-core executes every field: the reference). Each
request gets the same status and the same body, byte for byte (data, errors
and their paths, extensions):

* every document of :data:`tests.integration.graphql_corpus.CORPUS`, the
  GraphQL blocks of the README and docs/, and the benches' query documents;
* selections drawn by Hypothesis over the cold page's shape (playlist →
  entries → edges → node → media): aliases, named and inline fragments,
  ``__typename``, ``@skip``/``@include`` by literal and by variable,
  nullable and non-null fields, lists, page sizes that are refused;
* the cold page's documents with errors injected into the rows both apps
  read, at once (an entry that raises, a ``None`` position key, one of the
  wrong type, a media record of the wrong shape, a duration past 32 bits);
* reads that name their version, sent to both apps at once while edits
  commit to the same playlist: each pair that names one version is
  byte-identical (subscription deliveries with edits racing them:
  ``test_planned_delivery_differential.py``).

``chorus_graphql_planned_total`` shows the plans did answer (the test is not
comparing graphql-core with itself).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chorus.domain.commands import AddEntries, RemoveEntries, UpdatePlaylist
from chorus.domain.model import Entry
from chorus.graphql.schema.common.arguments import input_playlist_id
from chorus.metrics import PLANNED
from chorus.resolvers import queries
from chorus.resolvers.context import Services
from chorus.resolvers.read_source import ReadSource
from tests.integration.graphql_corpus import CORPUS, OPERATION_NAMES, bind
from tests.integration.test_fast_paths_differential import _post, _seed
from tests.integration.test_raced_reads import running, settings_for

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def _twins(
    url: str, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, Services]]:
    """The planned app, graphql-core's, and the first's services, on ``url``."""
    async with AsyncExitStack() as stack:
        planned, services = await stack.enter_async_context(
            running(settings_for(url, tmp_path, response_cache=False, compiled_execution=True))
        )
        plain, _ = await stack.enter_async_context(
            running(
                settings_for(
                    url,
                    tmp_path,
                    response_cache=False,
                    compiled_execution=False,
                    fast_field_execution=False,
                )
            )
        )
        yield planned, plain, services


def _served(served_by: str) -> float:
    """Queries counted as ``served_by``, over every operation name."""
    return sum(
        sample.value
        for metric in PLANNED.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels["served_by"] == served_by
    )


def _written_documents() -> list[str]:
    """Query documents of the README, docs/ and bench/ that parse (mutations left out)."""
    texts = [(ROOT / "README.md").read_text()]
    texts += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    found = [b for t in texts for b in re.findall(r"```graphql\n(.*?)```", t, re.DOTALL)]
    for bench in sorted((ROOT / "bench").glob("*.py")):
        found += re.findall(r'"""((?:query|\{)[^"]*?)"""', bench.read_text())
    documents = []
    for text in dict.fromkeys(found):
        try:
            parsed = parse(text)
        except GraphQLError:
            continue
        operations = [d for d in parsed.definitions if isinstance(d, OperationDefinitionNode)]
        if operations and all(o.operation is OperationType.QUERY for o in operations):
            documents.append(text)
    return documents


def _variables_of(document: str, seeded: dict[str, Any]) -> dict[str, Any]:
    """Values for a written document's variables, by their type: ids are the seeded mix."""
    values: dict[str, Any] = {}
    for definition in parse(document).definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        for variable in definition.variable_definitions or ():
            named = variable.type
            while hasattr(named, "type"):
                named = named.type
            kind = named.name.value  # type: ignore[attr-defined]
            name = variable.variable.name.value
            if kind == "ID":
                values[name] = seeded["entry"] if "entry" in name.lower() else seeded["pid"]
            elif kind == "Int":
                values[name] = 3
            elif kind == "String":
                values[name] = "mix"
            elif kind == "Boolean":
                values[name] = True
    return values


async def _same(
    planned: httpx.AsyncClient, plain: httpx.AsyncClient, user: str | None, body: dict[str, Any]
) -> Any:
    one, other = await _post(planned, user, body), await _post(plain, user, body)
    assert (one.status_code, one.content) == (other.status_code, other.content), body
    return one


async def test_plans_answer_the_corpus_as_graphql_core(database_url: str, tmp_path: Path) -> None:
    async with _twins(database_url, tmp_path) as (planned, plain, services):
        seeded = await _seed(services, planned)
        before, abandoned = _served("plan"), _served("abandoned")
        for user, document, variables in CORPUS:
            body = {"query": document, "variables": bind(variables, seeded)}
            if document in OPERATION_NAMES:
                body["operationName"] = OPERATION_NAMES[document]
            await _same(planned, plain, user, body)
        written = _written_documents()
        for document in written:
            body = {"query": document, "variables": _variables_of(document, seeded)}
            await _same(planned, plain, "alice", body)
        assert len(written) >= 5
        # Most corpus documents are plain reads: the plans answered them.
        assert _served("plan") - before >= 20
        # Those with errors in execution were answered by graphql-core.
        assert _served("abandoned") - abandoned >= 3
        metrics = (await planned.get("/metrics")).text
        assert re.search(
            r'chorus_graphql_planned_total\{operation_name="\w+",served_by="plan"\} [1-9]', metrics
        )


ENTRY_LEAVES = ("id", "positionKey", "mediaId", "addedAt")
MEDIA_LEAVES = ("id", "title", "artists", "album", "durationMs", "available", "viewerHasLiked")
PLAYLIST_LEAVES = ("id", "title", "description", "visibility", "version", "entryCount")


@st.composite
def _field(draw: st.DrawFn, name: str, inner: str = "", typename: str = "") -> str:
    """``name`` (with ``inner``) maybe aliased, maybe under a directive or an inline fragment."""
    alias = draw(st.sampled_from(["", f"a{draw(st.integers(0, 3))}{name}: "]))
    directive = draw(
        st.sampled_from(
            [
                "",
                "",
                "@skip(if: true)",
                "@skip(if: false)",
                "@include(if: $inc)",
                "@skip(if: $skip)",
            ]
        )
    )
    text = f"{alias}{name} {directive} {inner}".strip()
    if typename and draw(st.booleans()):
        return f"... on {typename} {{ {text} }}"
    return text


@st.composite
def _selection(draw: st.DrawFn, leaves: tuple[str, ...], typename: str, *extra: str) -> str:
    chosen = draw(st.lists(st.sampled_from(leaves), min_size=1, max_size=len(leaves)))
    parts = [draw(_field(name, typename=typename)) for name in chosen]
    parts += [e for e in extra if e]
    if draw(st.booleans()):
        parts.append("__typename")
    return " ".join(draw(st.permutations(parts)))


@st.composite
def _document(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    media = draw(_selection(MEDIA_LEAVES, "Media"))
    node = draw(
        _selection(
            ENTRY_LEAVES,
            "PlaylistEntry",
            draw(_field("media", f"{{ {media} }}", "PlaylistEntry")),
            draw(st.sampled_from(["", "addedBy { id }"])),
        )
    )
    size = draw(st.sampled_from([1, 3, 50, 0, 101]))  # 0 and 101 are refused
    page_info = draw(st.sampled_from(["", "pageInfo { hasNextPage endCursor }"]))
    edges = f"edges {{ cursor node {{ {node} }} }} {page_info} totalCount"
    entries = draw(_field("entries", f"{{ {edges} }}", "Playlist")).replace(
        "entries", f"entries(first: {size})", 1
    )
    playlist = draw(_selection(PLAYLIST_LEAVES, "Playlist", entries))
    fragment = draw(st.booleans())
    body = "...P" if fragment else playlist
    text = playlist
    declared = ["$id: ID!"] + [f"${v}: Boolean!" for v in ("inc", "skip") if f"${v}" in text]
    head = f"query Drawn({', '.join(declared)})"
    document = f"{head} {{ playlist(id: $id) {{ {body} }} }}"
    if fragment:
        document += f" fragment P on Playlist {{ {playlist} }}"
    variables = {v: draw(st.booleans()) for v in ("inc", "skip") if f"${v}" in text}
    return document, variables


async def test_drawn_selections_answer_as_graphql_core(database_url: str, tmp_path: Path) -> None:
    async with _twins(database_url, tmp_path) as (planned, plain, services):
        seeded = await _seed(services, planned)
        before = _served("plan")
        answered: list[bool] = []

        @settings(
            max_examples=60,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(_document())
        def check(drawn: tuple[str, dict[str, Any]]) -> None:
            document, variables = drawn
            variables["id"] = seeded["pid"]
            pending.append({"query": document, "variables": variables})

        pending: list[dict[str, Any]] = []
        check()
        for body in pending:
            for user in ("alice", "carol"):
                answer = await _same(planned, plain, user, body)
                answered.append(bool(answer.json().get("errors")))
        assert len(pending) >= 30
        assert _served("plan") - before >= 20
        # Some met an error (a refused page size, no access): graphql-core answered them.
        assert any(answered)


class _Raising:
    """An entry row whose position key raises when read."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry

    def __getattr__(self, name: str) -> Any:
        if name == "position_key":
            raise RuntimeError("injected")
        return getattr(self.entry, name)


async def test_errors_met_by_a_plan_are_answered_by_graphql_core(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row that raises, ``None`` in a non-null field, a value another type's, a media
    record of the wrong shape: injected into the rows both apps read, at once (the
    objects' path and the rows' field plan, ``entry_rows``, alike); graphql-core's
    answer, byte for byte."""
    real_page = ReadSource.entries_page
    real_media = queries.media_of
    broken: dict[str, str] = {}

    def injected_entry(e: Entry) -> Any:
        kind = broken.get(e.media_id)
        if kind == "null":
            return dataclasses.replace(e, position_key=None)  # type: ignore[arg-type]
        if kind == "raise":
            return _Raising(e)
        if kind == "wrong type":
            return dataclasses.replace(e, position_key=7)  # type: ignore[arg-type]
        return e

    async def injected_page(self: ReadSource, *args: Any, **kwargs: Any) -> Any:
        page = await real_page(self, *args, **kwargs)
        return dataclasses.replace(page, items=[injected_entry(e) for e in page.items])

    async def injected_media(ctx: Any, entries: Any) -> Any:
        found = await real_media(ctx, entries)
        for media_id, kind in broken.items():
            if media_id in found and kind == "media":
                found[media_id] = "not a media"
            elif media_id in found and kind == "long":
                found[media_id] = dataclasses.replace(found[media_id], duration_ms=2**40)
        return found

    monkeypatch.setattr(ReadSource, "entries_page", injected_page)
    monkeypatch.setattr(queries, "media_of", injected_media)
    async with _twins(database_url, tmp_path) as (planned, plain, services):
        seeded = await _seed(services, planned)
        for kind in ("null", "raise", "wrong type", "media", "long"):
            broken.clear()
            broken["chinook:track:4"] = kind
            before = _served("abandoned")
            for user, document, variables in CORPUS[:9]:
                body = {"query": document, "variables": bind(variables, seeded)}
                await _same(planned, plain, user, body)
            body = {"query": COLD_PAGE, "variables": {"id": seeded["pid"]}}
            await _same(planned, plain, "alice", body)
            # Each kind was met by a plan (the cold page selects all it breaks).
            assert _served("abandoned") > before, kind


COLD_PAGE = """query Page($id: ID!) { playlist(id: $id) { version entries(first: 50) {
  edges { cursor node { id positionKey media { title artists album durationMs } } } } } }"""
"""``bench/peers.py``'s page."""


RACED = [
    """query Raced($id: ID!) { playlist(id: $id) { version title entryCount
      entries(first: 50) { totalCount edges { cursor node { id positionKey mediaId addedAt
        media { id title artists album durationMs } } } pageInfo { hasNextPage endCursor } } } }""",
    """query RacedFragments($id: ID!, $media: Boolean!) { p: playlist(id: $id) { ...Head
      entries(first: 5) { edges { node { __typename ...Entry } } } } }
    fragment Head on Playlist { version v2: version description visibility owner { id } }
    fragment Entry on PlaylistEntry { positionKey media @include(if: $media) { title } }""",
]
"""Reads that name the version they answer (``version``), racing the edits."""


async def test_plans_answer_as_graphql_core_while_edits_commit(
    database_url: str, tmp_path: Path
) -> None:
    """Edits commit to the playlist while both apps read it, concurrently: every pair of
    answers that name the same version is byte-identical (an answer is one version's,
    whatever commits meanwhile); a pair read across a commit is read again."""
    async with _twins(database_url, tmp_path) as (planned, plain, services):
        seeded = await _seed(services, planned)
        pid = input_playlist_id(seeded["pid"])
        editing = asyncio.Event()
        committed: list[int] = []

        async def edit() -> None:
            version, added = 5, []  # _seed committed versions 1–5
            for n in range(24):
                command: Any
                if n % 3 == 0 or not added:
                    command = AddEntries(pid, f"e{n}", version, (f"chinook:track:{30 + n}",))
                elif n % 3 == 1:
                    command = UpdatePlaylist(pid, f"e{n}", version, description=f"take {n}")
                else:
                    command = RemoveEntries(pid, f"e{n}", version, (added.pop(0),))
                done = await services.store.execute(command, "alice")
                added += [e.entry_id for e in done.outcome.entries]
                version = done.outcome.version
                committed.append(version)
                editing.set()
                await asyncio.sleep(0.005)

        plan_before = _served("plan")
        editor = asyncio.create_task(edit())
        await editing.wait()
        compared: set[int] = set()
        tries = 0
        while not editor.done() or tries < 4:
            tries += 1
            for document in RACED:
                variables: dict[str, Any] = {"id": seeded["pid"], "media": tries % 2 == 0}
                body = {"query": document, "variables": variables}
                one, other = await asyncio.gather(
                    _post(planned, "alice", body), _post(plain, "alice", body)
                )
                assert one.status_code == other.status_code == 200, (one.text, other.text)
                versions = {_named_version(one.json()), _named_version(other.json())}
                if len(versions) == 1:
                    assert one.content == other.content, body
                    compared |= versions
        await editor
        assert len(committed) == 24
        # Pairs were compared at many versions as they committed, and the plans answered.
        assert len(compared) >= 5, compared
        assert _served("plan") - plan_before >= 10


def _named_version(answer: dict[str, Any]) -> int:
    data = answer["data"]
    playlist = data.get("playlist") or data.get("p")
    version: int = playlist["version"]
    return version
