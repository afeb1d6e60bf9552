"""``Playlist.atVersion`` on both databases: history equals what ``entries`` said then.

Checkpoints are kept every 4 versions here (``CHECKPOINT_EVERY`` patched), so
reads rewind from the head, from a checkpoint, and across a group commit.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select

from chorus.catalog.embedded import EmbeddedCatalog
from chorus.db import pages
from chorus.db.compaction import compact
from chorus.db.engine import Database
from chorus.db.history_reads import AtVersion
from chorus.db.store import PlaylistStore
from chorus.db.tables import playlist_checkpoint, playlist_checkpoint_entry, playlist_mutation
from chorus.domain import version_history
from chorus.domain.commands import (
    AddEntries,
    PlaylistCommand,
    RemoveMember,
    RevertPlaylist,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Role
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services
from tests.integration.store_helpers import (
    BOB,
    fold_log,
    logged,
    new_op,
    new_playlist,
    random_history,
)
from tests.unit.fakes import fold

schema = build_schema()
EVERY = 4

ENTRIES = """query($id: ID!, $first: Int, $after: String) { playlist(id: $id) {
  version title description entryCount
  entries(first: $first, after: $after) { version totalCount
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    edges { cursor node { id positionKey mediaId addedBy { id } addedAt media { title } } } } } }"""

AT = """query($id: ID!, $v: Int!, $first: Int, $after: String, $last: Int, $before: String) {
  playlist(id: $id) { version atVersion(version: $v) {
  version title description entryCount
  entries(first: $first, after: $after, last: $last, before: $before) { version totalCount
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    edges { cursor node { id positionKey mediaId addedBy { id } addedAt media { title } } }
  } } } }"""


@pytest.fixture(autouse=True)
def small_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version_history, "CHECKPOINT_EVERY", EVERY)


async def run(database: Database, query: str, viewer: str = "alice", **variables: Any) -> Any:
    services = Services(database, PlaylistStore(database), EmbeddedCatalog(), DEFAULT_LIMITS)
    return await schema.execute(
        query, variable_values=variables, context_value=RequestContext(services, viewer)
    )


async def ok(database: Database, query: str, viewer: str = "alice", **variables: Any) -> Any:
    result = await run(database, query, viewer, **variables)
    assert result.errors is None, result.errors
    return result.data


async def entries_now(database: Database, gid: str) -> dict[str, Any]:
    """The head's header and every entry (pages of 3), as ``entries`` pages them."""
    data = await ok(database, ENTRIES, id=gid, first=100)
    return data["playlist"]


async def all_at(database: Database, gid: str, version: int, size: int = 3) -> list[Any]:
    """Every edge of ``atVersion(version)``, following ``endCursor`` ``size`` at a time."""
    edges: list[Any] = []
    after = None
    while True:
        data = await ok(database, AT, id=gid, v=version, first=size, after=after)
        conn = data["playlist"]["atVersion"]["entries"]
        edges += conn["edges"]
        assert conn["pageInfo"]["hasPreviousPage"] is (after is not None)
        if not conn["pageInfo"]["hasNextPage"]:
            return edges
        after = conn["pageInfo"]["endCursor"]


async def test_history_at_every_version_equals_what_entries_returned_then(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    gid = ids.playlist_global_id(ed.playlist_id)
    seen = {0: await entries_now(database, gid)}
    rng = random.Random(7)
    mid = {}
    for _ in range(26):  # one random edit at a time, the head's answer recorded after each
        mid.update(await random_history(ed, database, rng, 1))
        seen[ed.version] = await entries_now(database, gid)
    assert sorted(seen) == list(range(27))
    for version, then in seen.items():
        data = await ok(database, AT, id=gid, v=version, first=100)
        at = data["playlist"]["atVersion"]
        assert data["playlist"]["version"] == ed.version
        assert {k: at[k] for k in ("version", "title", "description", "entryCount")} == {
            k: then[k] for k in ("version", "title", "description", "entryCount")
        }
        assert at["entries"] == then["entries"], version
        assert await all_at(database, gid, version) == then["entries"]["edges"]
    # Every version, against the list the log folds to (the reference, from version 0).
    for version, expected in mid.items():
        edges = await all_at(database, gid, version, size=2)
        assert [e["node"]["mediaId"] for e in edges] == [x.media_id for x in expected]


async def test_ten_versions_recorded_as_edited_on_a_checkpointed_playlist(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    gid = ids.playlist_global_id(ed.playlist_id)
    (a, b, c) = (await ed.add("m1", "m2", "m3")).entries
    recorded = {}
    for i in range(30):
        if i % 3 == 0:
            await ed.move(a.entry_id, after=c.entry_id)
        elif i % 3 == 1:
            await ed.add(f"x{i}", before=b.entry_id)
        else:
            await ed.run(UpdatePlaylist, title=f"Mix {i}")
        if i % 3 == 2 or i == 29:
            recorded[ed.version] = await entries_now(database, gid)
    assert len(recorded) == 10
    async with database.read() as conn:
        kept = await conn.scalar(
            select(func.count()).where(playlist_checkpoint.c.playlist_id == ed.playlist_id)
        )
    assert kept == ed.version // EVERY
    for version, then in recorded.items():
        at = (await ok(database, AT, id=gid, v=version, first=100))["playlist"]["atVersion"]
        assert (at["version"], at["title"], at["entries"]) == (
            version,
            then["title"],
            then["entries"],
        )
        found = await pages.playlist_at(database, ed.playlist_id, version)
        assert isinstance(found, AtVersion)
        assert found.replayed <= EVERY


async def test_a_cursor_of_entries_pages_the_same_version_later(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    gid = ids.playlist_global_id(ed.playlist_id)
    await ed.add(*(f"m{i}" for i in range(10)))
    then = await entries_now(database, gid)
    version = ed.version
    edges = then["entries"]["edges"]
    # The list changes a lot afterwards: moves, removes, adds around the cursors.
    await ed.remove(_entry_id(edges[3]))
    await ed.move(_entry_id(edges[0]), after=_entry_id(edges[9]))
    await ed.add("late", after=_entry_id(edges[5]))
    for _ in range(5):
        await ed.run(UpdatePlaylist, title=f"t{ed.version}")
    cursor = edges[4]["cursor"]
    forward = await ok(database, AT, id=gid, v=version, first=3, after=cursor)
    page = forward["playlist"]["atVersion"]["entries"]
    assert page["edges"] == edges[5:8]
    assert page["pageInfo"]["hasNextPage"]
    assert page["pageInfo"]["hasPreviousPage"]
    back = await ok(database, AT, id=gid, v=version, last=3, before=cursor)
    page = back["playlist"]["atVersion"]["entries"]
    assert page["edges"] == edges[1:4]
    assert page["pageInfo"]["hasNextPage"]
    assert page["pageInfo"]["hasPreviousPage"]
    start = await ok(database, AT, id=gid, v=version, last=2, before=edges[2]["cursor"])
    page = start["playlist"]["atVersion"]["entries"]
    assert page["edges"] == edges[0:2]
    assert not page["pageInfo"]["hasPreviousPage"]
    assert page["pageInfo"]["startCursor"] == edges[0]["cursor"]


def _entry_id(edge: Any) -> str:
    return ids.entry_id(edge["node"]["id"])


async def test_below_the_retention_floor_is_a_clear_error(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    gid = ids.playlist_global_id(ed.playlist_id)
    await random_history(ed, database, random.Random(3), 20)
    await compact(database, keep_versions=6, now=datetime.now(UTC))  # floor 15
    result = await run(database, AT, id=gid, v=14, first=5)
    assert result.data == {"playlist": {"version": 20, "atVersion": None}}
    (error,) = result.errors
    assert error.extensions == {
        "code": "HISTORY_COMPACTED",
        "oldestVersion": 15,
        "currentVersion": 20,
    }
    assert "older than the history kept" in error.message
    for bad in (-1, 21):
        (error,) = (await run(database, AT, id=gid, v=bad)).errors
        assert error.extensions == {"code": "BAD_USER_INPUT"}
    assert (await ok(database, AT, id=gid, v=15))["playlist"]["atVersion"]["version"] == 15
    # Checkpoints below the floor went with the log.
    versions = await _checkpoints(database, ed.playlist_id)
    async with database.read() as conn:
        rows = await conn.scalar(
            select(func.count()).where(
                playlist_checkpoint_entry.c.playlist_id == ed.playlist_id,
                playlist_checkpoint_entry.c.version < 15,
            )
        )
    assert sorted(versions) == [16, 20]
    assert rows == 0


async def test_a_removed_member_gets_nothing(store: PlaylistStore, database: Database) -> None:
    ed = await new_playlist(store)
    gid = ids.playlist_global_id(ed.playlist_id)
    await ed.add("m1", "m2")
    await ed.run(SetMemberRole, user_id=BOB, role=Role.VIEWER)
    query = "query($id: ID!) { playlist(id: $id) { atVersion(version: 1) { title entryCount } } }"
    assert (await ok(database, query, BOB, id=gid))["playlist"]["atVersion"]["entryCount"] == 2
    await ed.run(RemoveMember, user_id=BOB)
    # Version 2 (when bob was a member) is not readable to him now.
    result = await run(database, AT, BOB, id=gid, v=2)
    assert result.errors is None
    assert result.data == {"playlist": None}
    assert (await ok(database, query, "mallory", id=gid)) == {"playlist": None}


async def test_the_anchor_moving_between_header_and_page_reads_again(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    first, _, _ = (await ed.add("m1", "m2", "m3")).entries
    await ed.add("m4")  # version 2: no checkpoint follows it yet, the head is the anchor
    at = await pages.playlist_at(database, ed.playlist_id, 1)
    assert isinstance(at, AtVersion)
    assert not at.anchor.checkpoint
    await ed.add("m5")  # the head moves on: the rewind read above no longer fits it
    await ed.remove(first.entry_id)
    page = await pages.entries_page_at(
        database, ed.playlist_id, at, size=10, after=None, before=None, from_end=False
    )
    assert isinstance(page, pages.EntriesPage)
    assert [e.media_id for e in page.items] == ["m1", "m2", "m3"]
    assert (page.total, page.version) == (3, 1)


async def test_a_group_commit_across_a_checkpoint_keeps_one_at_its_last_version(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    gid = ids.playlist_global_id(ed.playlist_id)
    await ed.add("seed")
    # Adds, then a revert to version 1 (it flushes the group's log rows first,
    # a checkpoint possibly among them), then more adds, all waiting together.
    commands: list[PlaylistCommand] = [
        AddEntries(ed.playlist_id, new_op(), 1, (f"g{i}",)) for i in range(EVERY + 2)
    ]
    commands.append(RevertPlaylist(ed.playlist_id, new_op(), 1, to_version=1))
    commands += [AddEntries(ed.playlist_id, new_op(), 1, (f"h{i}",)) for i in range(EVERY + 1)]
    await asyncio.gather(*(store.execute(c, "alice") for c in commands))
    head = (await fold_log(database, ed.playlist_id)).playlist.version
    kept = await _checkpoints(database, ed.playlist_id)
    assert kept  # at the last version of each group that crossed a multiple of 4
    # Every version, against the fold of the log from version 0 (the reference).
    for version in range(head + 1):
        expected = await _folded_at(database, ed.playlist_id, version)
        edges = await all_at(database, gid, version, size=4)
        assert [e["node"]["mediaId"] for e in edges] == expected, version
        found = await pages.playlist_at(database, ed.playlist_id, version)
        assert isinstance(found, AtVersion)
        assert found.replayed <= EVERY + len(commands)  # a checkpoint a group after


async def _checkpoints(database: Database, playlist_id: str) -> list[int]:
    """The versions the playlist has a checkpoint of."""
    async with database.read() as conn:
        return list(
            await conn.scalars(
                select(playlist_checkpoint.c.version).where(
                    playlist_checkpoint.c.playlist_id == playlist_id
                )
            )
        )


async def _folded_at(database: Database, playlist_id: str, version: int) -> list[str]:
    """The media order at ``version``, folding the log from version 0."""
    async with database.read() as conn:
        rows = (
            await conn.execute(
                select(playlist_mutation)
                .where(
                    playlist_mutation.c.playlist_id == playlist_id,
                    playlist_mutation.c.version <= version,
                )
                .order_by(playlist_mutation.c.version)
            )
        ).all()
    state = fold(playlist_id, (logged(row) for row in rows))
    return [e.media_id for e in state.live()]


async def test_a_revert_to_a_version_gives_the_list_atversion_shows(
    store: PlaylistStore, database: Database
) -> None:
    """``revertPlaylist`` and ``atVersion`` share the undo: a revert to v gives v's list."""
    ed = await new_playlist(store)
    gid = ids.playlist_global_id(ed.playlist_id)
    await random_history(ed, database, random.Random(21), 30)
    for target in (3, 11, 22):
        then = (await ok(database, AT, id=gid, v=target, first=100))["playlist"]["atVersion"]
        await ed.run(RevertPlaylist, to_version=target)
        now = await entries_now(database, gid)
        assert (now["title"], now["description"]) == (then["title"], then["description"])
        assert now["entries"]["edges"] == then["entries"]["edges"]
        assert now["entries"]["totalCount"] == then["entries"]["totalCount"]
