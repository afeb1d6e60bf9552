"""The unit of work on SQLite and PostgreSQL alike: edits, reads, idempotency, concurrency.

Every test takes the ``store``/``database`` fixtures, so it runs once per
backend against a real, freshly migrated database (DESIGN §3–§4). Besides the
answers of the store, the tests look at the tables themselves: one mutation
log row and one outbox event per version, nothing for a replayed command, and
a log that rebuilds the live entries exactly (``store_helpers.fold_log``).
More of the suite: ``test_store_failures`` (crashes, cancellation, limits),
``test_store_log`` (log, outbox, history) and ``test_store_schema`` (position
keys, migrations).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.store import Committed, PlaylistStore
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    DeletePlaylist,
    MoveEntries,
    Placement,
    RemoveEntries,
    RemoveMember,
    RevertPlaylist,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.errors import (
    AnchorNotFound,
    ErrorCode,
    NotFound,
    OperationIdReused,
    VersionConflict,
)
from chorus.domain.model import Entry, Role
from tests.integration.store_helpers import (
    ALICE,
    BOB,
    Editor,
    fold_log,
    header,
    live_rows,
    media_order,
    new_playlist,
    tally,
)

# --- the edit cycle -----------------------------------------------------------


async def test_edit_cycle_commits_one_version_per_command(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store, title="Road trip", description="first")
    pid = ed.playlist_id
    assert (await header(database, pid)).version == 0
    history: dict[int, list[Entry]] = {0: []}

    async def step(expected: list[str]) -> None:
        live = await live_rows(database, pid)
        assert [e.media_id for e in live] == expected
        h = await header(database, pid)
        assert h.version == ed.version
        assert h.entry_count == len(live)
        history[ed.version] = live

    added = await ed.add("m1", "m2", "m3")
    e1, e2, e3 = (e.entry_id for e in added.entries)
    assert [e.media_id for e in added.entries] == ["m1", "m2", "m3"]
    await step(["m1", "m2", "m3"])

    (e4,) = (e.entry_id for e in (await ed.add("m4", after=e1)).entries)
    await step(["m1", "m4", "m2", "m3"])
    (e5,) = (e.entry_id for e in (await ed.add("m5", before=e1)).entries)
    await step(["m5", "m1", "m4", "m2", "m3"])
    # The same media twice is two entries.
    (e6,) = (e.entry_id for e in (await ed.add("m1", before=e3)).entries)
    await step(["m5", "m1", "m4", "m2", "m1", "m3"])

    moved = await ed.move(e3, after=e5)
    assert [e.entry_id for e in moved.entries] == [e3]
    await step(["m5", "m3", "m1", "m4", "m2", "m1"])
    await ed.move(e5)  # no anchor: to the end
    await step(["m3", "m1", "m4", "m2", "m1", "m5"])
    await ed.move(e6, e2, before=e3)
    await step(["m1", "m2", "m3", "m1", "m4", "m5"])

    removed = await ed.remove(e4, e6)
    assert removed.skipped_entry_ids == ()
    await step(["m2", "m3", "m1", "m5"])
    # Removing it again is a no-op that still commits a version.
    again = await ed.remove(e4)
    assert again.skipped_entry_ids == (e4,)
    await step(["m2", "m3", "m1", "m5"])

    await ed.run(UpdatePlaylist, title="Road trip 2", description=None)
    h = await header(database, pid)
    assert (h.title, h.description) == ("Road trip 2", None)
    await step(["m2", "m3", "m1", "m5"])

    await ed.run(SetMemberRole, user_id=BOB, role=Role.EDITOR)
    async with database.read() as conn:
        assert await repository.get_role(conn, pid, BOB) is Role.EDITOR
    assert (await header(database, pid)).membership_epoch == 1
    await ed.run(RemoveMember, user_id=BOB)
    async with database.read() as conn:
        assert await repository.get_role(conn, pid, BOB) is None
    assert (await header(database, pid)).membership_epoch == 2
    await step(["m2", "m3", "m1", "m5"])

    # Back to version 4: e4 and e6 come back with their ids and keys.
    await ed.run(RevertPlaylist, to_version=4)
    assert await live_rows(database, pid) == history[4]
    h = await header(database, pid)
    assert (h.title, h.description) == ("Road trip", "first")
    await step(["m5", "m1", "m4", "m2", "m1", "m3"])

    delete = ed.command(DeletePlaylist)
    deleted = await store.execute(delete, ALICE)
    assert deleted.outcome.version == 14
    h = await header(database, pid)
    assert h.deleted
    assert h.version == 14
    # A retry of the delete still gets its answer; anything else finds nothing.
    assert await store.execute(delete, ALICE) == Committed(deleted.outcome, replayed=True)
    ed.version = 14
    with pytest.raises(NotFound):
        await ed.add("m9")
    state = await fold_log(database, pid)
    assert state.playlist.deleted


async def test_stale_commands_rebase(store: PlaylistStore, database: Database) -> None:
    ed = await new_playlist(store)
    e1, e2, e3 = (e.entry_id for e in (await ed.add("m1", "m2", "m3")).entries)
    await ed.remove(e2)
    # Made against version 1: the anchor e2 is a tombstone now, the new entry
    # goes where it stood; e2 as a move target is skipped.
    stale = Editor(store, ed.playlist_id, version=1)
    added = await store.execute(
        stale.command(AddEntries, media_ids=("m4",), placement=Placement(after=e2)), ALICE
    )
    assert added.outcome.rebased
    assert added.outcome.version == 3
    assert await media_order(database, ed.playlist_id) == ["m1", "m4", "m3"]
    moved = await store.execute(stale.command(MoveEntries, entry_ids=(e2, e3)), ALICE)
    assert moved.outcome.skipped_entry_ids == (e2,)
    assert await media_order(database, ed.playlist_id) == ["m1", "m4", "m3"]
    with pytest.raises(VersionConflict) as conflict:
        await store.execute(stale.command(AddEntries, media_ids=("m5",), strict=True), ALICE)
    assert conflict.value.current_version == 4
    with pytest.raises(AnchorNotFound):
        await store.execute(
            stale.command(AddEntries, media_ids=("m5",), placement=Placement(after="nope")),
            ALICE,
        )
    assert (await header(database, ed.playlist_id)).version == 4
    assert await media_order(database, ed.playlist_id) == ["m1", "m4", "m3"]
    assert (await live_rows(database, ed.playlist_id))[0].entry_id == e1
    await fold_log(database, ed.playlist_id)


# --- reads ----------------------------------------------------------------------


async def test_pages_and_counts(store: PlaylistStore, database: Database) -> None:
    ed = await new_playlist(store)
    media = [f"m{i}" for i in range(10)]
    entries = list((await ed.add(*media)).entries)
    keys = [e.sort_key for e in entries]
    pid = ed.playlist_id

    async def page(**kwargs: Any) -> list[str]:
        async with database.read() as conn:
            return [e.media_id for e in await repository.entries_page(conn, pid, **kwargs)]

    async def count(after: Any, before: Any) -> int:
        async with database.read() as conn:
            return await repository.count_between(conn, pid, after=after, before=before)

    # Forward, `first` pages chained through `after`.
    seen: list[str] = []
    cursor = None
    while chunk := await page(after=cursor, limit=3):
        seen += chunk
        cursor = keys[media.index(chunk[-1])]
    assert seen == media
    assert await page(limit=3) == ["m0", "m1", "m2"]
    assert await page(after=keys[2], limit=3) == ["m3", "m4", "m5"]
    # Backward, `last` pages chained through `before`.
    assert await page(limit=3, from_end=True) == ["m7", "m8", "m9"]
    assert await page(before=keys[7], limit=3, from_end=True) == ["m4", "m5", "m6"]
    assert await page(before=keys[1], limit=3, from_end=True) == ["m0"]
    # Both bounds.
    assert await page(after=keys[1], before=keys[6], limit=10) == ["m2", "m3", "m4", "m5"]
    assert await page(after=keys[1], before=keys[6], limit=2) == ["m2", "m3"]
    assert await page(after=keys[1], before=keys[6], limit=2, from_end=True) == ["m4", "m5"]
    assert await page(after=keys[9], limit=3) == []
    assert await count(None, None) == 10
    assert await count(keys[1], keys[6]) == 4
    assert await count(keys[7], None) == 2
    assert await count(None, keys[0]) == 0

    # Cursors on entries removed since page from where they stood.
    await ed.remove(entries[4].entry_id, entries[5].entry_id)
    assert await page(after=keys[4], limit=3) == ["m6", "m7", "m8"]
    assert await page(after=keys[5], limit=3) == ["m6", "m7", "m8"]
    assert await page(before=keys[5], limit=3, from_end=True) == ["m1", "m2", "m3"]
    assert await page(after=keys[4], before=keys[5], limit=3) == []
    assert await count(keys[4], None) == 4
    assert await count(keys[2], keys[5]) == 1
    # A cursor still pages right when an entry was added since next to it.
    await ed.add("new", after=entries[3].entry_id)
    assert await page(after=keys[3], limit=2) == ["new", "m6"]
    assert await count(None, None) == 9


# --- idempotency ----------------------------------------------------------------


async def test_retry_replays_the_stored_result(store: PlaylistStore, database: Database) -> None:
    create = CreatePlaylist("create-1", "Mix")
    first_create = await store.create(create, ALICE)
    before = await tally(database)
    replayed_create = await store.create(create, ALICE)
    assert replayed_create == Committed(first_create.outcome, replayed=True)
    assert await tally(database) == before

    pid = first_create.outcome.playlist_id
    ed = Editor(store, pid)
    (e1, e2) = (e.entry_id for e in (await ed.add("m1", "m2")).entries)
    commands = [
        ed.command(AddEntries, media_ids=("m3", "m4"), placement=Placement(after=e1)),
        ed.command(MoveEntries, entry_ids=(e2,), placement=Placement(before=e1)),
        ed.command(RemoveEntries, entry_ids=(e1,)),
        ed.command(UpdatePlaylist, title="Mix 2"),
        ed.command(SetMemberRole, user_id=BOB, role=Role.VIEWER),
    ]
    firsts = []
    for command in commands:
        firsts.append(await store.execute(command, ALICE))
    assert [c.outcome.version for c in firsts] == [2, 3, 4, 5, 6]
    before = await tally(database, pid)
    for command, first in zip(commands, firsts, strict=True):
        again = await store.execute(command, ALICE)
        assert again.replayed
        assert not first.replayed
        assert again.outcome == first.outcome
    assert await tally(database, pid) == before
    await fold_log(database, pid)


async def test_reused_operation_id_is_refused(store: PlaylistStore, database: Database) -> None:
    created = await store.create(CreatePlaylist("op-1", "Mix"), ALICE)
    pid = created.outcome.playlist_id
    await store.execute(AddEntries(pid, "op-2", 0, ("m1",)), ALICE)
    before = await tally(database, pid)
    with pytest.raises(OperationIdReused) as error:
        await store.execute(AddEntries(pid, "op-2", 0, ("m2",)), ALICE)
    assert error.value.code is ErrorCode.OPERATION_ID_REUSED
    with pytest.raises(OperationIdReused):
        await store.execute(AddEntries(pid, "op-2", 1, ("m1",)), ALICE)
    with pytest.raises(OperationIdReused):
        await store.execute(UpdatePlaylist(pid, "op-1", 1, title="x"), ALICE)
    with pytest.raises(OperationIdReused):
        await store.create(CreatePlaylist("op-1", "Another title"), ALICE)
    with pytest.raises(OperationIdReused):
        await store.create(CreatePlaylist("op-2", "Mix"), ALICE)
    assert await tally(database, pid) == before


async def test_operation_ids_are_scoped_to_their_actor(
    store: PlaylistStore, database: Database
) -> None:
    created = await store.create(CreatePlaylist("op-1", "Mix", collaborative=True), ALICE)
    pid = created.outcome.playlist_id
    await store.execute(SetMemberRole(pid, "op-2", 0, BOB, Role.EDITOR), ALICE)
    mine = await store.execute(AddEntries(pid, "op-3", 1, ("m1",)), ALICE)
    theirs = await store.execute(AddEntries(pid, "op-3", 1, ("m1",)), BOB)
    assert not theirs.replayed
    assert (mine.outcome.version, theirs.outcome.version) == (2, 3)
    assert mine.outcome.entries[0].entry_id != theirs.outcome.entries[0].entry_id
    # Bob's own create with Alice's first operation id is a new playlist too.
    bobs = await store.create(CreatePlaylist("op-1", "Mix", collaborative=True), BOB)
    assert not bobs.replayed
    assert bobs.outcome.playlist_id != pid
    assert await media_order(database, pid) == ["m1", "m1"]
    assert (await tally(database)).playlists == 2
    # Bob loses his role; the retry of his add still gets its stored answer.
    await store.execute(RemoveMember(pid, "op-4", 3, BOB), ALICE)
    retried = await store.execute(AddEntries(pid, "op-3", 1, ("m1",)), BOB)
    assert retried == Committed(theirs.outcome, replayed=True)
    with pytest.raises(NotFound):
        await store.execute(AddEntries(pid, "op-5", 4, ("m1",)), BOB)


# --- concurrency ------------------------------------------------------------------


async def test_concurrent_writers_all_commit(store: PlaylistStore, database: Database) -> None:
    ed = await new_playlist(store)
    (first,) = (await ed.add("m0")).entries
    await ed.add("m1")
    stale = 1
    # Half append, half go right after the first entry; all made at version 1.
    placements = [Placement(), Placement(after=first.entry_id)]
    commands = [
        AddEntries(ed.playlist_id, f"writer-{i}", stale, (f"w{i}",), placements[i % 2])
        for i in range(16)
    ]
    results = await asyncio.gather(*(store.execute(c, ALICE) for c in commands))
    assert sorted(r.outcome.version for r in results) == list(range(3, 19))
    assert not any(r.replayed for r in results)
    assert all(r.outcome.rebased for r in results)
    live = await live_rows(database, ed.playlist_id)
    added = {r.outcome.entries[0].entry_id for r in results}
    assert added <= {e.entry_id for e in live}
    assert sorted(e.media_id for e in live) == sorted(["m0", "m1", *(f"w{i}" for i in range(16))])
    assert len({e.position_key for e in live}) == len(live) == 18
    assert (await header(database, ed.playlist_id)).version == 18
    await fold_log(database, ed.playlist_id)


async def test_concurrent_conflicting_edits_rebase(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    entries = (await ed.add(*(f"m{i}" for i in range(6)))).entries
    target, *anchors = (e.entry_id for e in entries)
    # All made at version 1: moves of one entry to five places, and removes of it.
    moves = [
        ed.command(MoveEntries, entry_ids=(target,), placement=Placement(after=anchor))
        for anchor in anchors
    ]
    removes = [ed.command(RemoveEntries, entry_ids=(target,)) for _ in range(3)]
    commands = [c for pair in itertools.zip_longest(moves, removes) for c in pair if c]
    results = await asyncio.gather(*(store.execute(c, ALICE) for c in commands))
    assert sorted(r.outcome.version for r in results) == list(range(2, 2 + len(commands)))
    in_order = sorted(zip(commands, results, strict=True), key=lambda cr: cr[1].outcome.version)
    first_remove = next(i for i, (c, _) in enumerate(in_order) if isinstance(c, RemoveEntries))
    # Up to the first remove every edit found the entry; after it, each skipped it.
    skipped = [r.outcome.skipped_entry_ids for _, r in in_order]
    assert skipped == [()] * (first_remove + 1) + [(target,)] * (len(in_order) - first_remove - 1)
    assert target not in {e.entry_id for e in await live_rows(database, ed.playlist_id)}
    await fold_log(database, ed.playlist_id)


async def test_concurrent_duplicates_commit_once(store: PlaylistStore, database: Database) -> None:
    ed = await new_playlist(store)
    await ed.add("m0")
    before = await tally(database, ed.playlist_id)
    command = ed.command(AddEntries, media_ids=("m1", "m2"))
    results = await asyncio.gather(*(store.execute(command, ALICE) for _ in range(10)))
    assert sorted(r.replayed for r in results) == [False] + [True] * 9
    assert {r.outcome for r in results} == {results[0].outcome}
    assert results[0].outcome.version == 2
    after = await tally(database, ed.playlist_id)
    assert after.version == before.version + 1 == 2
    assert after.log == before.log + 1
    assert after.outbox == before.outbox + 1
    assert after.live_entries == before.live_entries + 2
    await fold_log(database, ed.playlist_id)


async def test_concurrent_duplicate_creates_make_one_playlist(
    store: PlaylistStore, database: Database
) -> None:
    command = CreatePlaylist("create-once", "Mix")
    results = await asyncio.gather(*(store.create(command, ALICE) for _ in range(10)))
    assert sorted(r.replayed for r in results) == [False] + [True] * 9
    assert {r.outcome for r in results} == {results[0].outcome}
    t = await tally(database)
    assert (t.playlists, t.members, t.log, t.outbox) == (1, 1, 1, 1)
