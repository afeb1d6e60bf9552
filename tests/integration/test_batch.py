"""``applyOperations`` in the store, on SQLite and PostgreSQL: batches of offline edits.

An offline batch of 50 edits against a version 200 behind ends with the list
that the same edits sent one mutation at a time give on a twin playlist; its
retry commits nothing; atomic batches are one version or none; temporary ids
resolve to the entries their add made; the log still folds to the tables.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from sqlalchemy import text

from chorus.db.engine import Database
from chorus.db.store import BatchAnswer, Committed, PlaylistStore
from chorus.domain.batch import Batch, Operation
from chorus.domain.commands import (
    AddEntries,
    MoveEntries,
    Placement,
    RemoveEntries,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.errors import DomainError, ErrorCode, InvalidInput, LimitExceeded
from chorus.domain.limits import Limits
from chorus.domain.model import Role
from tests.integration.batch_scenario import Op, Others, Ref, offline_ops, seed_media
from tests.integration.store_helpers import (
    ALICE,
    BOB,
    Editor,
    fold_log,
    header,
    live_rows,
    media_order,
    new_op,
    new_playlist,
    tally,
)


@pytest.fixture
def store(database: Database) -> PlaylistStore:
    """Ids from a counter: twins given the same edits make ids in the same relative order.

    With random ids two twins can end in different orders (the order then
    depends on the entry-id tie-break), so the comparisons below need them.
    """
    counter = itertools.count()
    return PlaylistStore(database, id_factory=lambda: f"{next(counter):032x}")


async def _seeded(store: PlaylistStore) -> tuple[Editor, list[str]]:
    """A collaborative playlist with bob as EDITOR and the scenario's seeds; their ids."""
    ed = await new_playlist(store, collaborative=True)
    await ed.run(SetMemberRole, user_id=BOB, role=Role.EDITOR)
    added = await ed.add(*seed_media())
    return ed, [e.entry_id for e in added.entries]


async def _others(store: PlaylistStore, database: Database, ed: Editor, steps: int) -> None:
    """``steps`` edits by bob, each at the head."""
    others = Others(seed=7)
    bob = Editor(store, ed.playlist_id, BOB, ed.version)
    for step in range(steps):
        live = [e.entry_id for e in await live_rows(database, ed.playlist_id)]
        kind, at = others.next(len(live))
        if kind == "add":
            await bob.add(f"m-bob-{step}", after=live[at[0]] if at else None)
        elif kind == "move":
            await bob.move(live[at[0]], after=live[at[1]])
        else:
            await bob.remove(live[at[0]])
    ed.version = bob.version


def _resolve(ref: Ref, seeds: list[str], made: dict[str, str]) -> str:
    kind, name = ref
    return seeds[int(name)] if kind == "seed" else made[name]


def _command(op: Op, pid: str, base: int, seeds: list[str], made: dict[str, str] | None) -> Any:
    """The domain command of ``op``; ``made=None`` leaves temporary ids unresolved."""

    def ref(r: Ref | None) -> str | None:
        if r is None:
            return None
        return r[1] if made is None and r[0] == "tmp" else _resolve(r, seeds, made or {})

    placement = Placement(ref(op.after), ref(op.before))
    targets = tuple(str(ref(t)) for t in op.targets)
    if op.kind == "addEntries":
        return AddEntries(pid, op.operation_id, base, op.media, placement)
    if op.kind == "moveEntries":
        return MoveEntries(pid, op.operation_id, base, targets, placement)
    if op.kind == "removeEntries":
        return RemoveEntries(pid, op.operation_id, base, targets)
    return UpdatePlaylist(pid, op.operation_id, base, title=op.title)


def _batch(ops: list[Op], pid: str, base: int, seeds: list[str], atomic: bool = False) -> Batch:
    operations = []
    for op in ops:
        refs = [*op.targets, *(r for r in (op.after, op.before) if r is not None)]
        temporaries = frozenset(name for kind, name in refs if kind == "tmp")
        command = _command(op, pid, base, seeds, None)
        operations.append(Operation(command, op.client_ids, temporaries))
    return Batch(pid, base, tuple(operations), atomic)


async def _one_at_a_time(
    store: PlaylistStore, ops: list[Op], pid: str, base: int, seeds: list[str]
) -> None:
    """``ops`` as single mutations (operation ids of their own: ids are per actor)."""
    made: dict[str, str] = {}
    for op in ops:
        single = dataclasses.replace(op, operation_id=f"{op.operation_id}-single")
        committed = await store.execute(_command(single, pid, base, seeds, made), ALICE)
        made.update(
            zip(op.client_ids, (e.entry_id for e in committed.outcome.entries), strict=False)
        )


def _committed(answer: BatchAnswer) -> list[Committed]:
    assert all(isinstance(a, Committed) for a in answer.answers), answer.answers
    return [a for a in answer.answers if isinstance(a, Committed)]


async def test_an_offline_batch_200_versions_behind_equals_its_edits_one_by_one(
    store: PlaylistStore, database: Database
) -> None:
    ops = offline_ops(seed=15)
    ed, seeds = await _seeded(store)
    twin, twin_seeds = await _seeded(store)
    base = ed.version
    await _others(store, database, ed, 200)
    await _others(store, database, twin, 200)
    assert await media_order(database, ed.playlist_id) == await media_order(
        database, twin.playlist_id
    )
    answer = await store.apply_batch(_batch(ops, ed.playlist_id, base, seeds), ALICE)
    await _one_at_a_time(store, ops, twin.playlist_id, base, twin_seeds)

    results = _committed(answer)
    assert [r.outcome.version for r in results] == list(range(base + 201, base + 251))
    assert all(r.outcome.rebased and not r.replayed for r in results)
    assert answer.version == base + 250
    order = await media_order(database, ed.playlist_id)
    assert order == await media_order(database, twin.playlist_id)
    assert any(m.startswith("m-offline") for m in order)
    assert any(m.startswith("m-bob") for m in order)
    assert (await header(database, ed.playlist_id)).title == (
        await header(database, twin.playlist_id)
    ).title
    await fold_log(database, ed.playlist_id)

    before = await tally(database)
    retry = await store.apply_batch(_batch(ops, ed.playlist_id, base, seeds), ALICE)
    assert all(r.replayed for r in _committed(retry))
    assert [r.outcome for r in _committed(retry)] == [r.outcome for r in results]
    assert await tally(database) == before


async def test_a_retry_applies_what_had_not_committed(
    store: PlaylistStore, database: Database
) -> None:
    ops = offline_ops(seed=3, count=12)
    ed, seeds = await _seeded(store)
    base = ed.version
    first = await store.apply_batch(_batch(ops[:5], ed.playlist_id, base, seeds), ALICE)
    assert len(_committed(first)) == 5
    whole = await store.apply_batch(_batch(ops, ed.playlist_id, base, seeds), ALICE)
    results = _committed(whole)
    assert [r.replayed for r in results] == [True] * 5 + [False] * 7
    assert (await header(database, ed.playlist_id)).version == base + 12
    await fold_log(database, ed.playlist_id)


async def test_the_same_operation_id_with_other_input_is_refused(store: PlaylistStore) -> None:
    ed, seeds = await _seeded(store)
    op = Op("addEntries", new_op(), ("m-a",))
    await store.apply_batch(_batch([op], ed.playlist_id, ed.version, seeds), ALICE)
    other = Op("addEntries", op.operation_id, ("m-b",))
    answer = await store.apply_batch(_batch([other], ed.playlist_id, ed.version, seeds), ALICE)
    (error,) = answer.answers
    assert isinstance(error, DomainError)
    assert error.code is ErrorCode.OPERATION_ID_REUSED


async def test_temporary_ids_anchor_and_target_the_entries_their_add_made(
    store: PlaylistStore, database: Database
) -> None:
    ed, seeds = await _seeded(store)
    ops = [
        Op("addEntries", new_op(), ("m-x", "m-y"), after=("seed", "0"), client_ids=("x", "y")),
        Op("addEntries", new_op(), ("m-z",), before=("tmp", "x"), client_ids=("z",)),
        Op("moveEntries", new_op(), targets=(("tmp", "y"),), before=("tmp", "z")),
        Op("removeEntries", new_op(), targets=(("tmp", "x"),)),
    ]
    answer = await store.apply_batch(_batch(ops, ed.playlist_id, ed.version, seeds), ALICE)
    added, z, moved, _ = _committed(answer)
    assert moved.outcome.entries[0].entry_id == added.outcome.entries[1].entry_id
    order = await media_order(database, ed.playlist_id)
    assert order[:4] == ["m-seed-0", "m-y", "m-z", "m-seed-1"]
    assert z.outcome.entries[0].media_id == "m-z"


async def test_an_operation_on_a_refused_adds_temporary_id_is_refused_the_others_commit(
    store: PlaylistStore, database: Database
) -> None:
    ed, seeds = await _seeded(store)
    too_many = tuple(f"m-{i}" for i in range(101))  # over max_media_per_add
    ops = [
        Op("addEntries", new_op(), too_many, client_ids=tuple(f"t{i}" for i in range(101))),
        Op("moveEntries", new_op(), targets=(("tmp", "t0"),)),
        Op("addEntries", new_op(), ("m-ok",)),
    ]
    answer = await store.apply_batch(_batch(ops, ed.playlist_id, ed.version, seeds), ALICE)
    refused, orphan, ok = answer.answers
    assert isinstance(refused, LimitExceeded)
    assert refused.field == ("operations", "0", "addEntries", "mediaIds")
    assert isinstance(orphan, InvalidInput)
    assert "did not commit" in orphan.message
    assert orphan.field == ("operations", "1", "moveEntries", "entryIds", "0")
    assert isinstance(ok, Committed)
    assert ok.outcome.version == ed.version + 1


async def test_an_atomic_batch_is_one_version_and_one_event(
    store: PlaylistStore, database: Database
) -> None:
    ed, seeds = await _seeded(store)
    ops = offline_ops(seed=5, count=20)
    base = ed.version
    before = await tally(database)
    answer = await store.apply_batch(_batch(ops, ed.playlist_id, base, seeds, atomic=True), ALICE)
    assert {r.outcome.version for r in _committed(answer)} == {base + 1}
    after = await tally(database)
    assert (after.log - before.log, after.outbox - before.outbox) == (1, 1)
    state = await fold_log(database, ed.playlist_id)
    twin, twin_seeds = await _seeded(store)
    await _one_at_a_time(store, ops, twin.playlist_id, twin.version, twin_seeds)
    assert [e.media_id for e in state.live()] == await media_order(database, twin.playlist_id)

    after = await tally(database)
    retry = await store.apply_batch(_batch(ops, ed.playlist_id, base, seeds, atomic=True), ALICE)
    assert all(r.replayed for r in _committed(retry))
    assert await tally(database) == after
    one_by_one = await store.apply_batch(_batch(ops, ed.playlist_id, base, seeds), ALICE)
    assert isinstance(one_by_one.answers[0], DomainError)
    assert one_by_one.answers[0].code is ErrorCode.OPERATION_ID_REUSED


@pytest.mark.parametrize("group_commit", [True, False], ids=["group", "plain"])
async def test_no_operation_of_an_atomic_batch_applies_again_on_its_own(
    database: Database, group_commit: bool
) -> None:
    # An atomic batch is one log row under its first id; its other ids are kept
    # beside it (playlist_batch_operation), so a later edit reusing one of them is
    # OPERATION_ID_REUSED, as the first id sent alone is, and never a second commit.
    store = PlaylistStore(database, group_commit=group_commit)
    ed, seeds = await _seeded(store)
    first, second, third = new_op(), new_op(), new_op()
    ops = [
        Op("addEntries", first, ("m-a",)),
        Op("addEntries", second, ("m-b",)),
        Op("addEntries", third, ("m-c",)),
    ]
    pid, base = ed.playlist_id, ed.version
    batch = _batch(ops, pid, base, seeds, atomic=True)
    assert {r.outcome.version for r in _committed(await store.apply_batch(batch, ALICE))} == {
        base + 1
    }
    before = await tally(database)
    for op in ops:  # each alone, as a single mutation
        with pytest.raises(DomainError) as alone:
            await store.execute(_command(op, pid, base, seeds, {}), ALICE)
        assert alone.value.code is ErrorCode.OPERATION_ID_REUSED
    for position in (0, 1):  # inside a later batch, atomic or not, first or later
        reused = [Op("addEntries", new_op(), ("m-d",))]
        reused.insert(position, ops[2])
        for atomic in (True, False):
            answer = await store.apply_batch(_batch(reused, pid, base, seeds, atomic), ALICE)
            refused = answer.answers[position]
            assert isinstance(refused, DomainError)
            assert refused.code is ErrorCode.OPERATION_ID_REUSED
            if atomic:
                assert await tally(database) == before  # nothing of it committed
            else:
                other = answer.answers[1 - position]
                assert isinstance(other, Committed)
                before = await tally(database)
    # The whole batch again is still its retry: replayed, nothing committed.
    retry = await store.apply_batch(batch, ALICE)
    assert all(r.replayed for r in _committed(retry))
    assert await tally(database) == before
    assert [e.media_id for e in (await fold_log(database, pid)).live()].count("m-b") == 1


@pytest.mark.parametrize("group_commit", [True, False], ids=["group", "plain"])
async def test_an_edit_that_took_a_batch_s_id_at_the_same_moment_still_replays(
    database: Database, group_commit: bool
) -> None:
    # The gap docs/api.md names: an atomic batch and a single edit on another playlist
    # took the same later operation id at once, and both committed. A fresh user found
    # that the edit's retry was then refused as OPERATION_ID_REUSED (the batch's record
    # was read in place of the edit's own): it replays, as a retry must.
    store = PlaylistStore(database, group_commit=group_commit)
    ed, seeds = await _seeded(store)
    other, _ = await _seeded(store)
    shared, placeholder = new_op(), new_op()
    single = Op("addEntries", shared, ("m-s",))
    command = _command(single, other.playlist_id, other.version, seeds, {})
    first = await store.execute(command, ALICE)
    ops = [Op("addEntries", new_op(), ("m-a",)), Op("addEntries", placeholder, ("m-b",))]
    batch = _batch(ops, ed.playlist_id, ed.version, seeds, atomic=True)
    assert all(not r.replayed for r in _committed(await store.apply_batch(batch, ALICE)))
    async with database.write() as conn:  # the race's outcome: the batch holds it too
        await conn.execute(
            text(
                "UPDATE playlist_batch_operation SET operation_id = :shared "
                "WHERE operation_id = :placeholder"
            ),
            {"shared": shared, "placeholder": placeholder},
        )
    retry = await store.execute(command, ALICE)
    assert retry.replayed
    assert retry.outcome == first.outcome
    again = await store.apply_batch(batch, ALICE)  # the batch's own retry replays too
    assert all(r.replayed for r in _committed(again))


async def test_an_atomic_batch_with_a_refused_operation_commits_nothing(
    store: PlaylistStore, database: Database
) -> None:
    ed, seeds = await _seeded(store)
    ops = [
        Op("addEntries", new_op(), ("m-a",), client_ids=("a",)),
        Op("moveEntries", new_op(), targets=(("tmp", "a"),), after=("seed", "3")),
        Op("updatePlaylist", new_op(), title=""),  # refused: a title is 1–200 characters
    ]
    before = await tally(database)
    answer = await store.apply_batch(
        _batch(ops, ed.playlist_id, ed.version, seeds, atomic=True), ALICE
    )
    first, second, third = answer.answers
    assert isinstance(third, InvalidInput)
    assert third.field is not None
    assert third.field[:3] == ("operations", "2", "updatePlaylist")
    for other in (first, second):
        assert isinstance(other, InvalidInput)
        assert "not applied" in other.message
    assert await tally(database) == before
    assert answer.version == ed.version
    await fold_log(database, ed.playlist_id)


@pytest.mark.parametrize(
    ("ops", "error", "field"),
    [
        ([], InvalidInput, ("operations",)),
        (
            [Op("addEntries", "a", ("m",))] * 2,
            InvalidInput,
            ("operations", "1", "addEntries", "operationId"),
        ),
        (
            [Op("addEntries", "a", ("m", "n"), client_ids=("t",))],
            InvalidInput,
            ("operations", "0", "addEntries", "clientEntryIds"),
        ),
        (
            [
                Op("addEntries", "a", ("m",), client_ids=("t",)),
                Op("addEntries", "b", ("n",), client_ids=("t",)),
            ],
            InvalidInput,
            ("operations", "1", "addEntries", "clientEntryIds", "0"),
        ),
        (
            [Op("removeEntries", "a", targets=(("tmp", "later"),))],
            InvalidInput,
            ("operations", "0", "removeEntries", "entryIds", "0"),
        ),
        ([Op("addEntries", str(i), ("m",)) for i in range(6)], LimitExceeded, ("operations",)),
        (
            [Op("addEntries", "a", tuple(f"m{i}" for i in range(11)))],
            LimitExceeded,
            ("operations",),
        ),
    ],
    ids=["empty", "twice", "count", "declared-twice", "undeclared", "operations", "entries"],
)
async def test_a_malformed_batch_is_refused_whole(
    database: Database, ops: list[Op], error: type[DomainError], field: tuple[str, ...]
) -> None:
    store = PlaylistStore(database, limits=Limits(max_batch_operations=5, max_batch_entries=10))
    ed, seeds = await _seeded(store)
    before = await tally(database)
    with pytest.raises(error) as raised:
        await store.apply_batch(_batch(ops, ed.playlist_id, ed.version, seeds), ALICE)
    assert raised.value.field == field
    assert await tally(database) == before


async def test_a_batch_is_the_same_without_group_commit(database: Database) -> None:
    store = PlaylistStore(database, group_commit=False)
    ed, seeds = await _seeded(store)
    ops = offline_ops(seed=9, count=10)
    answer = await store.apply_batch(_batch(ops, ed.playlist_id, ed.version, seeds), ALICE)
    assert len(_committed(answer)) == 10
    await fold_log(database, ed.playlist_id)
