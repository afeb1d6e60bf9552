"""``changes`` reads at most ``HISTORY_ENTRIES_PER_REQUEST`` entries of the log per request.

A revert's version can hold a whole playlist while the query cost counts a
version at 100 entries: an attacker's ``changes(first: 10)`` over reverts of
a 3,290-entry playlist returned 16,450 entries at a cost of 2,022.
"""

from __future__ import annotations

from typing import Any

import pytest

from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist, RevertPlaylist
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers import queries
from chorus.resolvers.context import RequestContext, Services
from tests.integration.test_graphql_execute import CountingCatalog

schema = build_schema()
CHANGES = (
    "versions { version changes { ... on EntriesAdded { entries { id } }"
    " ... on EntriesRemoved { entryIds } } } hasMore"
)


async def reverted(store: PlaylistStore) -> str:
    """v1 adds 100 entries; v2 … v6 revert to 0 and back: 100 entries each."""
    created = await store.create(CreatePlaylist("c", "Big"), "alice")
    pid = created.outcome.playlist_id
    await store.execute(AddEntries(pid, "a", 0, tuple(f"m{i}" for i in range(100))), "alice")
    for version in range(1, 6):
        await store.execute(RevertPlaylist(pid, f"r{version}", version, (version + 1) % 2), "alice")
    return pid


async def run(db: Database, query: str, **variables: Any) -> Any:
    services = Services(db, PlaylistStore(db), CountingCatalog(), DEFAULT_LIMITS)
    return await schema.execute(
        query, variable_values=variables, context_value=RequestContext(services, "alice")
    )


async def test_a_batch_stops_before_the_version_past_the_budget(
    database: Database, store: PlaylistStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries, "HISTORY_ENTRIES_PER_REQUEST", 250)
    pid = ids.to_global_id("Playlist", await reverted(store))
    query = (
        "query($id: ID!) { playlist(id: $id) {"
        f" changes(sinceVersion: 0, first: 10) {{ {CHANGES} }} }} }}"
    )
    result = await run(database, query, id=pid)
    assert result.errors is None
    batch = result.data["playlist"]["changes"]
    assert [v["version"] for v in batch["versions"]] == [1, 2]  # 200 entries; v3 would be 300
    assert batch["hasMore"] is True
    # The next request goes on from there.
    again = await run(database, query.replace("sinceVersion: 0", "sinceVersion: 2"), id=pid)
    assert [v["version"] for v in again.data["playlist"]["changes"]["versions"]] == [3, 4]


async def test_a_field_after_the_budget_is_spent_is_refused(
    database: Database, store: PlaylistStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries, "HISTORY_ENTRIES_PER_REQUEST", 250)
    pid = ids.to_global_id("Playlist", await reverted(store))
    fields = " ".join(
        f"a{i}: changes(sinceVersion: {i}, first: 10) {{ {CHANGES} }}" for i in range(4)
    )
    result = await run(database, f"query($id: ID!) {{ playlist(id: $id) {{ {fields} }} }}", id=pid)
    codes = [e.extensions["code"] for e in result.errors or []]
    assert "LIMIT_EXCEEDED" in codes
    returned = sum(
        len(c["entries"] if "entries" in c else c["entryIds"])
        for batch in (result.data["playlist"] or {}).values()
        if batch
        for v in batch["versions"]
        for c in v["changes"]
    )
    assert returned <= 250 + 100  # the budget, plus at most the one version that crossed it
