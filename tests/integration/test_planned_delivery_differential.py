"""Subscription deliveries by plan against graphql-core's, with edits racing them (differential).

One app on each database (SQLite and PostgreSQL) with its hub; two schemas
subscribe through it: one runs each event by its plan
(:mod:`chorus.graphql.execution.event_plans`), the other is the reference
(plans and the field fast path off: graphql-core executes every field). Their
documents differ by a comment only, so each is its own delivery group and
renders every version itself. While they stream, edits of every kind
(entries added, moved, removed, details, members) commit to the same
playlist, and an error below the root nulls every event of one document.
Each version's ``next`` payload is compared byte for byte: the same version
both ways (a delivery names its version), whatever committed meanwhile.
``chorus_graphql_planned_total`` shows the plans did answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import strawberry

from chorus.domain.commands import (
    AddEntries,
    MoveEntries,
    Placement,
    RemoveEntries,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.model import Role
from chorus.graphql.execution.delivery import EncodedData
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import arguments
from chorus.resolvers.context import RequestContext, Services
from tests.deadlines import patience
from tests.integration.test_fast_paths_differential import _seed
from tests.integration.test_planned_differential import _served
from tests.integration.test_raced_reads import running, settings_for

WAIT_S = patience(30.0)

EVERY_CHANGE = """
subscription Every($id: ID!, $since: Int!, $media: Boolean!) {
  playlistEvents(playlistId: $id, sinceVersion: $since) {
    __typename
    ...Head
    ... on PlaylistChanged {
      v: version
      changes {
        __typename
        ... on EntriesAdded { entries { ...Entry } }
        ... on EntriesMoved { entries { id positionKey } moved: entries { ...Entry } }
        ... on EntriesRemoved { entryIds }
        ... on DetailsUpdated { title description visibility collaborative }
        ... on MembersChanged { user { id } role }
        ... on PlaylistDeleted { deletedAt }
      }
    }
    ... on ResyncRequired { playlistId currentVersion reason }
  }
}
fragment Head on PlaylistChanged { playlistId operationId committedAt actor { id } }
fragment Entry on PlaylistEntry {
  id positionKey mediaId addedAt addedBy { id }
  media @include(if: $media) { id title artists album durationMs available viewerHasLiked }
}
"""

NULLED = """
subscription Nulled($id: ID!, $since: Int!) {
  playlistEvents(playlistId: $id, sinceVersion: $since) {
    ... on PlaylistChanged { version actor { playlists(first: 1, after: "bad") { totalCount } } }
  }
}
"""
"""An invalid cursor below the root: every event a ``{data: null, errors}`` (graphql-core's)."""

EDITS = 12


def _payload(result: Any) -> str:
    """The ``next`` payload a socket is sent for ``result``."""
    data = result.data  # strawberry's ExecutionResult: the data graphql-core's held
    if isinstance(data, EncodedData) and data.encoded and not result.errors:
        return data.encoded
    body: dict[str, Any] = {"data": data}
    if result.errors:
        body["errors"] = [e.formatted for e in result.errors]
    return json.dumps(body)


async def _collect(
    schema: strawberry.Schema,
    services: Services,
    viewer: str,
    document: str,
    variables: dict[str, Any],
    last: int,
) -> dict[int, str]:
    """The payload of each version up to ``last``, by version."""
    stream = await schema.subscribe(
        document, variable_values=variables, context_value=RequestContext(services, viewer)
    )
    assert hasattr(stream, "__aiter__"), stream
    got: dict[int, str] = {}
    version = variables["since"]
    async with contextlib.aclosing(stream):
        async for result in stream:
            payload = _payload(result)
            data = json.loads(payload)["data"]
            version += 1  # each version once, in order (the nulled ones name none)
            if data is not None:
                event = data["playlistEvents"]
                version = event.get("v", event.get("version", version))
            got[version] = payload
            if version >= last:
                return got
    raise AssertionError(f"the stream ended at {version}")


async def _edits(services: Services, pid: str, base: int) -> int:
    """``EDITS`` commits of every kind to ``pid``, yielding between them; the last version."""
    store = services.store
    version = base
    added: list[str] = []
    for n in range(EDITS):
        kind = n % 5
        command: Any
        if kind == 0:
            tracks = (f"chinook:track:{20 + n}", f"chinook:track:{40 + n}")
            command = AddEntries(pid, f"x{n}", version, tracks)
        elif kind == 1:
            command = MoveEntries(pid, f"x{n}", version, (added[-1],), Placement(before=added[0]))
        elif kind == 2:
            command = UpdatePlaylist(pid, f"x{n}", version, title=f"Mix {n}")
        elif kind == 3:
            role = Role.VIEWER if n % 2 else Role.EDITOR
            command = SetMemberRole(pid, f"x{n}", version, user_id="carol", role=role)
        else:
            command = RemoveEntries(pid, f"x{n}", version, (added.pop(),))
        done = await store.execute(command, "alice")
        added += [e.entry_id for e in done.outcome.entries if kind == 0]
        version = done.outcome.version
        await asyncio.sleep(0)  # the streams render between the edits
    return version


async def test_deliveries_by_plan_are_graphql_core_s_with_edits_racing(
    database_url: str, tmp_path: Path
) -> None:
    async with running(settings_for(database_url, tmp_path, response_cache=False)) as (
        client,
        services,
    ):
        seeded = await _seed(services, client)
        pid = seeded["pid"]
        planned = build_schema(compiled_execution=True)
        plain = build_schema(compiled_execution=False, fast_field_execution=False)
        base = 5  # _seed commits versions 1–5
        last = base + EDITS
        before, abandoned = _served("plan"), _served("abandoned")
        cases = [
            ("alice", EVERY_CHANGE, {"media": True}),
            ("bob", EVERY_CHANGE, {"media": False}),
            ("carol", NULLED, {}),
        ]
        tasks: list[tuple[str, asyncio.Task[dict[int, str]], asyncio.Task[dict[int, str]]]] = []
        for viewer, document, extra in cases:
            variables = {"id": pid, "since": 0, **extra}
            tasks.append(
                (
                    viewer,
                    asyncio.create_task(
                        _collect(planned, services, viewer, document, variables, last)
                    ),
                    asyncio.create_task(
                        _collect(
                            plain, services, viewer, f"{document}\n# graphql-core", variables, last
                        )
                    ),
                )
            )
        await asyncio.sleep(0)
        assert await _edits(services, arguments.input_playlist_id(pid), base) == last
        for viewer, one, other in tasks:
            by_plan, by_core = await asyncio.wait_for(asyncio.gather(one, other), WAIT_S)
            assert sorted(by_plan) == list(range(1, last + 1)), viewer
            assert by_plan == by_core, viewer
        # Every version of the two EVERY_CHANGE streams by plan; the nulled ones abandoned.
        assert _served("plan") - before >= 2 * last
        assert _served("abandoned") - abandoned >= last
