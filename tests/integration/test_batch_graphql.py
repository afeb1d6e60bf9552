"""``applyOperations`` through ``schema.execute`` on both databases: the API's shapes and errors."""

from __future__ import annotations

from typing import Any

import pytest

from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services
from tests.integration.test_graphql_execute import CountingCatalog

schema = build_schema()

APPLY = """mutation($input: ApplyOperationsInput!) { applyOperations(input: $input) {
  version userErrors { code field message }
  playlist { version entries(first: 100) { edges { node { id mediaId } } } }
  results { operationId version replayed rebased skippedEntryIds
            entries { id mediaId } userErrors { code field message } } } }"""


async def _playlist(store: PlaylistStore) -> tuple[str, list[str]]:
    """A playlist with entries m0…m4 at version 1: its global id and the entries' global ids."""
    created = await store.create(CreatePlaylist("c", "Mix"), "alice")
    pid = created.outcome.playlist_id
    added = await store.execute(AddEntries(pid, "a", 0, tuple(f"m{i}" for i in range(5))), "alice")
    return ids.playlist_global_id(pid), [
        ids.entry_global_id(pid, e.entry_id) for e in added.outcome.entries
    ]


async def _apply(database: Database, store: PlaylistStore, **input: Any) -> Any:
    services = Services(database, store, CountingCatalog(), DEFAULT_LIMITS)
    return await schema.execute(
        APPLY, variable_values={"input": input}, context_value=RequestContext(services, "alice")
    )


def _payload(result: Any) -> dict[str, Any]:
    assert result.errors is None, result.errors
    payload: dict[str, Any] = result.data["applyOperations"]
    return payload


async def test_temporary_ids_through_the_api_and_a_retry_that_replays(
    database: Database, store: PlaylistStore
) -> None:
    pid, entries = await _playlist(store)
    operations = [
        {"addEntries": {"operationId": "o1", "mediaIds": ["m7", "m8"], "after": entries[0],
                        "clientEntryIds": ["new-7", "new-8"]}},
        {"moveEntries": {"operationId": "o2", "entryIds": ["new-8", entries[4]],
                         "before": entries[0]}},
        {"removeEntries": {"operationId": "o3", "entryIds": ["new-7"]}},
        {"updatePlaylist": {"operationId": "o4", "title": "Offline"}},
    ]  # fmt: skip
    payload = _payload(await _apply(database, store, playlistId=pid, baseVersion=1,
                                    operations=operations))  # fmt: skip
    results = payload["results"]
    assert [r["version"] for r in results] == [2, 3, 4, 5]
    assert payload["version"] == 5
    new_8 = results[0]["entries"][1]["id"]
    assert [e["id"] for e in results[1]["entries"]] == [new_8, entries[4]]
    order = [e["node"]["mediaId"] for e in payload["playlist"]["entries"]["edges"]]
    assert order == ["m8", "m4", "m0", "m1", "m2", "m3"]
    again = _payload(await _apply(database, store, playlistId=pid, baseVersion=1,
                                  operations=operations))  # fmt: skip
    assert [r["replayed"] for r in again["results"]] == [True] * 4
    assert [r["entries"] for r in again["results"]] == [r["entries"] for r in results]
    assert again["version"] == 5


async def test_an_unknown_media_refuses_its_add_and_the_operations_on_its_entries(
    database: Database, store: PlaylistStore
) -> None:
    pid, entries = await _playlist(store)
    operations = [
        {"addEntries": {"operationId": "o1", "mediaIds": ["m1", "x-unknown"],
                        "clientEntryIds": ["a", "b"]}},
        {"moveEntries": {"operationId": "o2", "entryIds": ["a"], "after": entries[2]}},
        {"addEntries": {"operationId": "o3", "mediaIds": ["m9"]}},
    ]  # fmt: skip
    payload = _payload(await _apply(database, store, playlistId=pid, baseVersion=1,
                                    operations=operations))  # fmt: skip
    first, second, third = payload["results"]
    assert first["userErrors"][0]["code"] == "MEDIA_NOT_FOUND"
    assert first["userErrors"][0]["field"] == [
        "input", "operations", "0", "addEntries", "mediaIds", "1"
    ]  # fmt: skip
    assert second["userErrors"][0]["code"] == "INVALID_INPUT"
    assert second["userErrors"][0]["field"][:4] == ["input", "operations", "1", "moveEntries"]
    assert third["version"] == 2


@pytest.mark.parametrize(
    ("operation", "code", "field"),
    [
        (
            {"removeEntries": {"operationId": "o1", "entryIds": ["never-declared"]}},
            "NOT_FOUND",
            ["input", "operations", "0", "removeEntries", "entryIds", "0"],
        ),
        (
            {"moveEntries": {"operationId": "o1", "entryIds": ["x"], "after": "nowhere"}},
            "NOT_FOUND",
            ["input", "operations", "0", "moveEntries", "entryIds", "0"],
        ),
        (
            {"addEntries": {"operationId": "o1", "mediaIds": ["m1"], "after": "nowhere"}},
            "ANCHOR_NOT_FOUND",
            ["input", "operations", "0", "addEntries", "after"],
        ),
        (
            {"addEntries": {"operationId": "o1", "mediaIds": ["m1"], "clientEntryIds": []}},
            "INVALID_INPUT",
            ["input", "operations", "0", "addEntries", "clientEntryIds"],
        ),
    ],
    ids=["unknown-target", "unknown-target-first", "unknown-anchor", "client-ids-count"],
)
async def test_a_malformed_operation_refuses_the_batch_whole(
    database: Database,
    store: PlaylistStore,
    operation: dict[str, Any],
    code: str,
    field: list[str],
) -> None:
    pid, _ = await _playlist(store)
    ok = {"addEntries": {"operationId": "fine", "mediaIds": ["m1"]}}
    payload = _payload(
        await _apply(database, store, playlistId=pid, baseVersion=1, operations=[ok, operation])
    )
    assert payload["results"] == []
    assert payload["version"] is None
    (error,) = payload["userErrors"]
    assert error["code"] == code
    assert error["field"] == [*field[:2], "1", *field[3:]]


async def test_a_clients_own_entry_ids_cannot_be_temporary_ids(
    database: Database, store: PlaylistStore
) -> None:
    pid, entries = await _playlist(store)
    operation = {"addEntries": {"operationId": "o1", "mediaIds": ["m1"],
                                "clientEntryIds": [entries[0]]}}  # fmt: skip
    payload = _payload(
        await _apply(database, store, playlistId=pid, baseVersion=1, operations=[operation])
    )
    assert payload["userErrors"][0]["code"] == "INVALID_INPUT"


@pytest.mark.parametrize(
    "operation",
    [
        {},
        {
            "addEntries": {"operationId": "o1", "mediaIds": ["m1"]},
            "removeEntries": {"operationId": "o1", "entryIds": []},
        },
    ],
    ids=["none", "both"],
)
async def test_an_operation_is_exactly_one_edit(
    database: Database, store: PlaylistStore, operation: dict[str, Any]
) -> None:
    pid, _ = await _playlist(store)
    result = await _apply(database, store, playlistId=pid, baseVersion=1, operations=[operation])
    assert result.errors is not None
    assert "exactly one" in result.errors[0].message


async def test_too_many_operations_are_refused_before_any_is_read(
    database: Database, store: PlaylistStore
) -> None:
    pid, _ = await _playlist(store)
    too_many = [
        {"addEntries": {"operationId": f"o{i}", "mediaIds": ["m1"]}}
        for i in range(DEFAULT_LIMITS.max_batch_operations + 1)
    ]
    payload = _payload(await _apply(database, store, playlistId=pid, baseVersion=1,
                                    operations=too_many))  # fmt: skip
    assert [e["code"] for e in payload["userErrors"]] == ["LIMIT_EXCEEDED"]
    empty = _payload(await _apply(database, store, playlistId=pid, baseVersion=1, operations=[]))
    assert [e["code"] for e in empty["userErrors"]] == ["INVALID_INPUT"]


async def test_an_atomic_batch_answers_every_operation_at_one_version(
    database: Database, store: PlaylistStore
) -> None:
    pid, entries = await _playlist(store)
    operations = [
        {"addEntries": {"operationId": "o1", "mediaIds": ["m7"], "clientEntryIds": ["n"]}},
        {"moveEntries": {"operationId": "o2", "entryIds": ["n"], "before": entries[0]}},
    ]
    payload = _payload(await _apply(database, store, playlistId=pid, baseVersion=1,
                                    atomic=True, operations=operations))  # fmt: skip
    assert [r["version"] for r in payload["results"]] == [2, 2]
    assert payload["version"] == 2
    order = [e["node"]["mediaId"] for e in payload["playlist"]["entries"]["edges"]]
    assert order[0] == "m7"


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"title": None}, ["input", "operations", "1", "updatePlaylist", "title"]),
        ({"visibility": None}, ["input", "operations", "1", "updatePlaylist", "visibility"]),
        ({}, ["input", "operations", "1", "updatePlaylist"]),
    ],
)
async def test_a_null_detail_refuses_its_operation_only(
    database: Database, store: PlaylistStore, update: dict[str, Any], field: list[str]
) -> None:
    """An explicit null for a detail that cannot be cleared, or nothing to update, is that
    operation's INVALID_INPUT (as a blank title is); the batch's other operations commit."""
    pid, _ = await _playlist(store)
    operations = [
        {"addEntries": {"operationId": "o1", "mediaIds": ["m9"]}},
        {"updatePlaylist": {"operationId": "o2", **update}},
        {"addEntries": {"operationId": "o3", "mediaIds": ["m8"]}},
    ]
    payload = _payload(
        await _apply(database, store, playlistId=pid, baseVersion=1, operations=operations)
    )
    first, second, third = payload["results"]
    assert [e["code"] for e in second["userErrors"]] == ["INVALID_INPUT"]
    assert second["userErrors"][0]["field"] == field
    assert (first["version"], second["version"], third["version"]) == (2, None, 3)
    assert payload["playlist"]["version"] == 3
