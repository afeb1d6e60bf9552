"""A playlist's life through GraphQL, on the running server (DESIGN §4, §5).

Create, add (append, after, before), move, remove, update, revert and
delete, with exact versions and order; idempotent retries; strict and
rebased writes; anchors removed concurrently; concurrent writers (through
the ``gql`` client and its HTTPX transport); ``minVersion``; sync through
``changes``; and ``node``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from gql import Client, GraphQLRequest
from gql.transport.httpx import HTTPXAsyncTransport

from chorus.graphql.schema.common import ids
from tests.e2e.conftest import Api
from tests.e2e.helpers import (
    ENTRY,
    add,
    committed,
    create_playlist,
    entries_page,
    error_codes,
    mutate,
    mutation_document,
    playlist,
    refused,
    state,
    track,
    version,
)
from tests.servers import ChorusServer

CHANGES = f"""
query Changes($id: ID!, $since: Int!, $first: Int) {{
  playlist(id: $id) {{
    changes(sinceVersion: $since, first: $first) {{
      sinceVersion currentVersion hasMore resyncRequired
      versions {{
        version operationId actor {{ id }} committedAt
        changes {{
          __typename
          ... on EntriesAdded {{ entries {{ {ENTRY} }} }}
          ... on EntriesMoved {{ entries {{ {ENTRY} }} }}
          ... on EntriesRemoved {{ entryIds }}
          ... on DetailsUpdated {{ title description }}
        }}
      }}
    }}
  }}
}}
"""

NODE = """
query Node($id: ID!) {
  node(id: $id) {
    __typename id
    ... on Playlist { title version }
    ... on PlaylistEntry { mediaId positionKey }
  }
}
"""


def full_entries(api: Api, playlist_id: str) -> tuple[int, list[dict[str, Any]]]:
    """``(version, entries)`` read together; entries in list order (≤ 100)."""
    page = entries_page(api, playlist_id, first=100)
    assert not page["pageInfo"]["hasNextPage"]
    nodes = [e["node"] for e in page["edges"]]
    keys = [n["positionKey"] for n in nodes]
    assert keys == sorted(keys), "entries are ordered by positionKey, bytewise"
    assert len(set(keys)) == len(keys), "no two live entries share a key"
    return page["version"], nodes


def raw_playlist_id(global_id: str) -> str:
    return ids.playlist_id(global_id)


# --- the whole cycle -----------------------------------------------------------


def test_create_add_move_remove_update_revert_delete(api: Api) -> None:
    pid = create_playlist(api, title="Road trip", description="for the drive")
    assert full_entries(api, pid) == (0, [])

    appended = add(api, pid, [track(1), track(2), track(3)], base=0)
    assert (appended["version"], appended["replayed"], appended["rebased"]) == (1, False, False)
    assert [e["mediaId"] for e in appended["entries"]] == [track(1), track(2), track(3)]
    a, b, c = (e["id"] for e in appended["entries"])
    assert state(api, pid) == (1, [a, b, c])

    after = add(api, pid, [track(4), track(5)], base=1, after=a)
    d, e = (x["id"] for x in after["entries"])
    assert after["version"] == 2
    assert state(api, pid) == (2, [a, d, e, b, c])

    before = add(api, pid, [track(6)], base=2, before=a)
    (f,) = (x["id"] for x in before["entries"])
    assert before["version"] == 3
    at_v3 = full_entries(api, pid)
    assert [n["id"] for n in at_v3[1]] == [f, a, d, e, b, c]

    moved = committed(
        mutate(api, "moveEntries", playlistId=pid, baseVersion=3, entryIds=[c, a], after=f)
    )
    assert moved["version"] == 4
    assert [x["id"] for x in moved["entries"]] == [c, a]
    assert moved["skippedEntryIds"] == []
    assert state(api, pid) == (4, [f, c, a, d, e, b])

    moved = committed(
        mutate(api, "moveEntries", playlistId=pid, baseVersion=4, entryIds=[f], before=b)
    )
    assert state(api, pid) == (5, [c, a, d, e, f, b])
    committed(mutate(api, "moveEntries", playlistId=pid, baseVersion=5, entryIds=[c]))
    assert state(api, pid) == (6, [a, d, e, f, b, c]), "neither after nor before: to the end"

    removed = committed(
        mutate(api, "removeEntries", playlistId=pid, baseVersion=6, entryIds=[d, e])
    )
    assert (removed["version"], removed["skippedEntryIds"]) == (7, [])
    assert state(api, pid) == (7, [a, f, b, c])

    updated = committed(
        mutate(api, "updatePlaylist", playlistId=pid, baseVersion=7, title="Road trip II")
    )
    assert updated["version"] == 8
    details = playlist(api, pid)
    assert details is not None
    assert (details["title"], details["description"], details["entryCount"]) == (
        "Road trip II",
        "for the drive",
        4,
    )

    reverted = committed(mutate(api, "revertPlaylist", playlistId=pid, baseVersion=8, toVersion=3))
    assert reverted["version"] == 9
    assert full_entries(api, pid) == (9, at_v3[1]), "same ids, same keys as at version 3"
    details = playlist(api, pid)
    assert details is not None
    assert (details["title"], details["version"], details["entryCount"]) == ("Road trip", 9, 6)

    delete_op = api.op()
    deleted = committed(
        mutate(api, "deletePlaylist", operationId=delete_op, playlistId=pid, baseVersion=9)
    )
    assert deleted["version"] == 10
    again = committed(
        mutate(api, "deletePlaylist", operationId=delete_op, playlistId=pid, baseVersion=9)
    )
    assert (again["replayed"], again["version"]) == (True, 10), "a retried delete replays"
    assert deleted["playlist"] is None
    assert playlist(api, pid) is None
    assert api.data(NODE, id=pid)["node"] is None
    gone = mutate(api, "addEntries", playlistId=pid, baseVersion=10, mediaIds=[track(7)])
    refused(gone, "NOT_FOUND")


# --- idempotency ---------------------------------------------------------------


def test_retry_replays_the_stored_result_and_commits_nothing(api: Api) -> None:
    op = api.op()
    first = committed(mutate(api, "createPlaylist", operationId=op, title="Once"))
    again = committed(mutate(api, "createPlaylist", operationId=op, title="Once"))
    assert (again["replayed"], again["version"]) == (True, 0)
    assert again["playlist"]["id"] == first["playlist"]["id"]
    pid = first["playlist"]["id"]

    op = api.op()
    request = {"playlistId": pid, "baseVersion": 0, "mediaIds": [track(10), track(11)]}
    original = committed(mutate(api, "addEntries", operationId=op, **request))
    retry = committed(mutate(api, "addEntries", operationId=op, **request))
    assert original["replayed"] is False
    assert retry["replayed"] is True
    assert retry["version"] == original["version"] == 1
    assert retry["entries"] == original["entries"], "same entry ids, same keys"
    assert state(api, pid) == (1, [e["id"] for e in original["entries"]])

    # Still the stored result after later versions committed.
    add(api, pid, [track(12)], base=1)
    late = committed(mutate(api, "addEntries", operationId=op, **request))
    assert (late["replayed"], late["version"], late["entries"]) == (
        True,
        1,
        original["entries"],
    )
    assert version(api, pid) == 2
    found = playlist(api, pid)
    assert found is not None
    assert found["entryCount"] == 3

    # Replays of a move and a remove keep their skipped ids.
    target = original["entries"][0]["id"]
    op = api.op()
    remove = {"playlistId": pid, "baseVersion": 2, "entryIds": [target]}
    removed = committed(mutate(api, "removeEntries", operationId=op, **remove))
    assert committed(mutate(api, "removeEntries", operationId=op, **remove)) == {
        **removed,
        "replayed": True,
    }
    assert version(api, pid) == 3


def test_operation_id_reused_with_another_request(api: Api) -> None:
    pid = create_playlist(api)
    op = api.op()
    committed(
        mutate(
            api, "addEntries", operationId=op, playlistId=pid, baseVersion=0, mediaIds=[track(1)]
        )
    )
    before = state(api, pid)

    for other in (
        {"mediaIds": [track(2)], "baseVersion": 0},
        {"mediaIds": [track(1)], "baseVersion": 1},
    ):
        payload = mutate(api, "addEntries", operationId=op, playlistId=pid, **other)
        refused(payload, "OPERATION_ID_REUSED")
        assert payload["replayed"] is False
    # The same id on another kind of mutation.
    payload = mutate(
        api, "updatePlaylist", operationId=op, playlistId=pid, baseVersion=1, title="x"
    )
    refused(payload, "OPERATION_ID_REUSED")
    assert state(api, pid) == before


def test_operation_ids_are_scoped_per_user(api: Api) -> None:
    pid = create_playlist(api, visibility="PUBLIC", collaborative=True)
    committed(
        mutate(api, "setMemberRole", playlistId=pid, baseVersion=0, userId="bob", role="EDITOR")
    )
    op = api.op()
    mine = committed(
        mutate(
            api, "addEntries", operationId=op, playlistId=pid, baseVersion=1, mediaIds=[track(1)]
        )
    )
    theirs = committed(
        mutate(
            api,
            "addEntries",
            "bob",
            operationId=op,
            playlistId=pid,
            baseVersion=1,
            mediaIds=[track(1)],
        )
    )
    assert theirs["replayed"] is False
    assert theirs["version"] == mine["version"] + 1


async def test_concurrent_duplicates_commit_once(server: ChorusServer, api: Api) -> None:
    pid = create_playlist(api)
    op = api.op()
    body = {
        "query": mutation_document("addEntries"),
        "variables": {
            "input": {
                "playlistId": pid,
                "operationId": op,
                "baseVersion": 0,
                "mediaIds": [track(20), track(21)],
            }
        },
    }
    headers = {"Authorization": f"Bearer {api.token('alice')}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        responses = await asyncio.gather(*(http.post(server.url, json=body) for _ in range(8)))
    payloads = [committed(r.json()["data"]["addEntries"]) for r in responses]
    assert sorted(p["replayed"] for p in payloads) == [False] + [True] * 7
    assert {p["version"] for p in payloads} == {1}
    assert len({tuple(e["id"] for e in p["entries"]) for p in payloads}) == 1
    assert version(api, pid) == 1
    assert len(state(api, pid)[1]) == 2


async def test_concurrent_creates_with_one_operation_id(server: ChorusServer, api: Api) -> None:
    body = {
        "query": mutation_document("createPlaylist"),
        "variables": {"input": {"operationId": api.op(), "title": "Raced"}},
    }
    headers = {"Authorization": f"Bearer {api.token('alice')}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        responses = await asyncio.gather(*(http.post(server.url, json=body) for _ in range(8)))
    payloads = [committed(r.json()["data"]["createPlaylist"]) for r in responses]
    assert sorted(p["replayed"] for p in payloads) == [False] + [True] * 7
    assert len({p["playlist"]["id"] for p in payloads}) == 1
    assert {p["version"] for p in payloads} == {0}


async def test_concurrent_strict_writers_one_wins(server: ChorusServer, api: Api) -> None:
    pid = create_playlist(api)
    add(api, pid, [track(1)], base=0)
    headers = {"Authorization": f"Bearer {api.token('alice')}"}

    def body(i: int) -> dict[str, Any]:
        return {
            "query": mutation_document("addEntries"),
            "variables": {
                "input": {
                    "playlistId": pid,
                    "operationId": api.op(),
                    "baseVersion": 1,
                    "mediaIds": [track(50 + i)],
                    "strict": True,
                }
            },
        }

    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        responses = await asyncio.gather(*(http.post(server.url, json=body(i)) for i in range(8)))
    payloads = [r.json()["data"]["addEntries"] for r in responses]
    winners = [p for p in payloads if p["version"] is not None]
    assert len(winners) == 1
    assert winners[0]["version"] == 2
    for loser in (p for p in payloads if p["version"] is None):
        assert refused(loser, "VERSION_CONFLICT")["currentVersion"] == 2
    version_now, order = state(api, pid)
    assert version_now == 2
    assert order[1] == winners[0]["entries"][0]["id"]


# --- base version, strict, rebase -------------------------------------------------


def test_strict_conflict_and_rebase(api: Api) -> None:
    pid = create_playlist(api)
    add(api, pid, [track(1)], base=0)
    add(api, pid, [track(2)], base=1)
    before = state(api, pid)

    for name, extra in (
        ("addEntries", {"mediaIds": [track(3)]}),
        ("removeEntries", {"entryIds": [before[1][0]]}),
        ("updatePlaylist", {"title": "strict"}),
        ("revertPlaylist", {"toVersion": 0}),
    ):
        payload = mutate(api, name, playlistId=pid, baseVersion=1, strict=True, **extra)
        error = refused(payload, "VERSION_CONFLICT")
        assert error["currentVersion"] == 2
        assert error["field"] == ["input", "baseVersion"]
    assert state(api, pid) == before

    future = mutate(api, "addEntries", playlistId=pid, baseVersion=3, mediaIds=[track(3)])
    ahead = refused(future, "INVALID_INPUT")
    assert ahead["field"] == ["input", "baseVersion"]
    assert ahead["currentVersion"] == 2  # where to rebase
    negative = mutate(api, "addEntries", playlistId=pid, baseVersion=-1, mediaIds=[track(3)])
    assert refused(negative, "INVALID_INPUT")["currentVersion"] == 2
    untitled = mutate(api, "updatePlaylist", playlistId=pid, baseVersion=2, title="")
    assert refused(untitled, "INVALID_INPUT")["currentVersion"] is None  # not a version's fault
    assert state(api, pid) == before

    exact = add(api, pid, [track(3)], base=2, strict=True)
    assert (exact["version"], exact["rebased"]) == (3, False)
    stale = add(api, pid, [track(4)], base=1)
    assert (stale["version"], stale["rebased"]) == (4, True)
    assert len(state(api, pid)[1]) == 4


def test_anchor_removed_concurrently_resolves_to_its_tombstone(api: Api) -> None:
    pid = create_playlist(api)
    a, b, c, d, e = (x["id"] for x in add(api, pid, [track(n) for n in range(1, 6)], 0)["entries"])
    committed(mutate(api, "removeEntries", playlistId=pid, baseVersion=1, entryIds=[b, d]))

    # Both were written against version 1, when b and d were still there.
    x = add(api, pid, [track(6)], base=1, after=b)
    y = add(api, pid, [track(7)], base=1, before=d)
    assert x["rebased"]
    assert y["rebased"]
    x_id, y_id = x["entries"][0]["id"], y["entries"][0]["id"]
    assert state(api, pid) == (4, [a, x_id, c, y_id, e])

    # A move anchored on a tombstone lands in the gap the tombstone held (c … e).
    committed(mutate(api, "moveEntries", playlistId=pid, baseVersion=1, entryIds=[e], after=d))
    assert state(api, pid)[1] in ([a, x_id, c, y_id, e], [a, x_id, c, e, y_id])

    never = ids.to_global_id("PlaylistEntry", raw_playlist_id(pid), "no-such-entry")
    before = state(api, pid)
    for anchor in ("after", "before"):
        payload = mutate(
            api,
            "addEntries",
            playlistId=pid,
            baseVersion=before[0],
            mediaIds=[track(8)],
            **{anchor: never},
        )
        assert refused(payload, "ANCHOR_NOT_FOUND")["field"] == ["input", anchor]
    other = create_playlist(api)
    foreign = add(api, other, [track(9)], 0)["entries"][0]["id"]
    payload = mutate(
        api, "addEntries", playlistId=pid, baseVersion=before[0], mediaIds=[track(8)], after=foreign
    )
    refused(payload, "ANCHOR_NOT_FOUND")
    assert state(api, pid) == before


def test_skipped_entry_ids(api: Api) -> None:
    pid = create_playlist(api)
    a, b, c, d = (x["id"] for x in add(api, pid, [track(n) for n in range(1, 5)], 0)["entries"])
    committed(mutate(api, "removeEntries", playlistId=pid, baseVersion=1, entryIds=[b]))

    moved = committed(
        mutate(api, "moveEntries", playlistId=pid, baseVersion=1, entryIds=[b, c], after=d)
    )
    assert (moved["version"], moved["rebased"]) == (3, True)
    assert moved["skippedEntryIds"] == [b]
    assert [x["id"] for x in moved["entries"]] == [c]
    assert state(api, pid) == (3, [a, d, c])

    removed = committed(
        mutate(api, "removeEntries", playlistId=pid, baseVersion=3, entryIds=[b, a])
    )
    assert (removed["version"], removed["skippedEntryIds"]) == (4, [b])
    assert state(api, pid) == (4, [d, c])

    # Only removed targets: a version with nothing in it, skipped reported.
    noop = committed(mutate(api, "removeEntries", playlistId=pid, baseVersion=4, entryIds=[b]))
    assert (noop["version"], noop["skippedEntryIds"]) == (5, [b])
    noop = committed(mutate(api, "moveEntries", playlistId=pid, baseVersion=5, entryIds=[a]))
    assert (noop["version"], noop["skippedEntryIds"], noop["entries"]) == (6, [a], [])
    assert state(api, pid) == (6, [d, c])

    never = ids.to_global_id("PlaylistEntry", raw_playlist_id(pid), "no-such-entry")
    payload = mutate(api, "removeEntries", playlistId=pid, baseVersion=6, entryIds=[d, never])
    assert refused(payload, "NOT_FOUND")["field"] == ["input", "entryIds", "1"]
    assert state(api, pid) == (6, [d, c])


# --- concurrency (the gql client) -----------------------------------------------------


@pytest.fixture
async def session(server: ChorusServer, api: Api) -> AsyncIterator[Any]:
    """A ``gql`` session over HTTPX that validated its documents against the live schema."""
    transport = HTTPXAsyncTransport(
        url=server.url, headers={"Authorization": f"Bearer {api.token('alice')}"}, timeout=60
    )
    client = Client(transport=transport, fetch_schema_from_transport=True)
    async with client as gql_session:
        assert client.schema is not None
        assert client.schema.get_type("PlaylistEntryConnection") is not None
        yield gql_session


READ_AT_LEAST = "query($id: ID!, $v: Int) { playlist(id: $id, minVersion: $v) { version } }"


async def test_sixteen_concurrent_writers(api: Api, session: Any) -> None:
    pid = create_playlist(api)
    seed = add(api, pid, [track(1)], base=0)
    add_document = mutation_document("addEntries")

    async def writer(i: int) -> tuple[dict[str, Any], int]:
        # Writer 0 is stale: it last saw version 0.
        request = GraphQLRequest(
            add_document,
            variable_values={
                "input": {
                    "playlistId": pid,
                    "operationId": api.op(),
                    "baseVersion": 0 if i == 0 else 1,
                    "mediaIds": [track(100 + 2 * i), track(101 + 2 * i)],
                }
            },
        )
        payload = (await session.execute(request))["addEntries"]
        committed(payload)
        # Read-your-writes: never older than the version just committed.
        read = GraphQLRequest(READ_AT_LEAST, variable_values={"id": pid, "v": payload["version"]})
        seen = (await session.execute(read))["playlist"]["version"]
        return payload, seen

    results = await asyncio.gather(*(writer(i) for i in range(16)))
    payloads = [p for p, _ in results]
    assert sorted(p["version"] for p in payloads) == list(range(2, 18)), "contiguous"
    assert all(seen >= p["version"] for p, seen in results)
    assert payloads[0]["rebased"] is True

    final_version, order = state(api, pid)
    assert final_version == 17
    assert order[0] == seed["entries"][0]["id"]
    assert len(order) == 1 + 2 * 16
    for p in payloads:
        first, second = (e["id"] for e in p["entries"])
        assert order.index(second) == order.index(first) + 1, "each add stays contiguous"
    media = [e["node"]["mediaId"] for e in entries_page(api, pid, first=100)["edges"]]
    assert sorted(media) == sorted([track(1), *(track(n) for n in range(100, 132))])


def test_min_version(api: Api) -> None:
    pid = create_playlist(api)
    add(api, pid, [track(1)], base=0)
    for v in (None, 0, 1):
        found = api.data(READ_AT_LEAST, id=pid, v=v)["playlist"]
        assert found["version"] == 1
    body = api.gql(READ_AT_LEAST, id=pid, v=2)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["data"] is None or body["data"]["playlist"] is None
    # Not visible: null, whatever the version asked.
    assert api.data(READ_AT_LEAST, "mallory", id=pid, v=99)["playlist"] is None


# --- sync ---------------------------------------------------------------------------


def apply_changes(
    entries: dict[str, dict[str, Any]], versions: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The entries after applying ``versions`` (a client's sync loop)."""
    out = dict(entries)
    for v in versions:
        for change in v["changes"]:
            kind = change["__typename"]
            if kind in ("EntriesAdded", "EntriesMoved"):
                for e in change["entries"]:
                    if kind == "EntriesMoved":
                        assert e["id"] in out, "moves only touch live entries"
                    out[e["id"]] = e
            elif kind == "EntriesRemoved":
                for entry_id in change["entryIds"]:
                    del out[entry_id]
    return out


def in_order(entries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entries.values(), key=lambda e: (e["positionKey"].encode(), e["id"]))


def sync(api: Api, pid: str, since: int, first: int) -> list[dict[str, Any]]:
    """Every version after ``since``, paging with ``hasMore``."""
    versions: list[dict[str, Any]] = []
    while True:
        batch = api.data(CHANGES, id=pid, since=since, first=first)["playlist"]["changes"]
        assert batch["sinceVersion"] == since
        assert not batch["resyncRequired"]
        versions += batch["versions"]
        if not batch["hasMore"]:
            last = versions[-1]["version"] if versions else since
            assert last == batch["currentVersion"]
            return versions
        since = batch["versions"][-1]["version"]


def test_changes_replayed_reproduce_entries(api: Api) -> None:
    pid = create_playlist(api, title="Synced")
    ops = []
    p = add(api, pid, [track(n) for n in range(1, 9)], base=0)
    ops.append(p["operationId"])
    a, b, c, d, e, f, g, h = (x["id"] for x in p["entries"])
    snapshot_version, snapshot = full_entries(api, pid)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("moveEntries", {"entryIds": [h, g], "before": a}),
        ("removeEntries", {"entryIds": [c, d]}),
        ("addEntries", {"mediaIds": [track(9), track(10)], "after": b}),
        ("updatePlaylist", {"title": "Synced II"}),
        ("moveEntries", {"entryIds": [a], "after": f}),
        ("revertPlaylist", {"toVersion": 2}),
        ("addEntries", {"mediaIds": [track(11)], "before": e}),
        ("removeEntries", {"entryIds": [b]}),
    ]
    for name, fields in steps:
        current = version(api, pid)
        payload = committed(mutate(api, name, playlistId=pid, baseVersion=current, **fields))
        ops.append(payload["operationId"])

    now_version, now = full_entries(api, pid)
    assert now_version == 1 + len(steps)

    versions = sync(api, pid, 0, first=3)
    assert [v["version"] for v in versions] == list(range(1, now_version + 1))
    assert [v["operationId"] for v in versions] == ops
    assert all(v["actor"]["id"] == "alice" for v in versions)
    assert in_order(apply_changes({}, versions)) == now

    # From a snapshot in the middle, as a client that read entries at version 1.
    assert snapshot_version == 1
    later = sync(
        api, pid, snapshot_version, first=40
    )  # entries cost 100 a version: 40 versions a page
    assert [v["version"] for v in later] == list(range(2, now_version + 1))
    assert in_order(apply_changes({n["id"]: n for n in snapshot}, later)) == now

    # Nothing after the current version; a future one is an error.
    assert sync(api, pid, now_version, first=10) == []
    body = api.gql(CHANGES, id=pid, since=now_version + 1, first=10)
    assert error_codes(body) == ["BAD_USER_INPUT"]


# --- node ----------------------------------------------------------------------------


def test_node(api: Api) -> None:
    pid = create_playlist(api, title="Nodes")
    first, second = add(api, pid, [track(1), track(2)], base=0)["entries"]

    found = api.data(NODE, id=pid)["node"]
    assert (found["__typename"], found["id"], found["title"], found["version"]) == (
        "Playlist",
        pid,
        "Nodes",
        1,
    )
    found = api.data(NODE, id=first["id"])["node"]
    assert (found["__typename"], found["id"], found["mediaId"], found["positionKey"]) == (
        "PlaylistEntry",
        first["id"],
        track(1),
        first["positionKey"],
    )

    committed(mutate(api, "removeEntries", playlistId=pid, baseVersion=1, entryIds=[second["id"]]))
    raw = raw_playlist_id(pid)
    for garbage in (
        "garbage",
        "!!!",
        "",
        second["id"],  # removed
        ids.to_global_id("PlaylistEntry", raw, "no-such-entry"),
        ids.to_global_id("Playlist", "no-such-playlist"),
        ids.to_global_id("Media", "chinook:track:1"),
        ids.to_global_id("Playlist", raw, "extra"),
        "x" * 5000,
    ):
        body = api.gql(NODE, id=garbage)
        assert "errors" not in body, garbage
        assert body["data"] == {"node": None}, garbage

    # Not visible to a stranger: null, the same as missing.
    assert api.data(NODE, "mallory", id=pid)["node"] is None
    assert api.data(NODE, "mallory", id=first["id"])["node"] is None
