"""``applyOperations`` through group commit against its plain twin (differential).

With ``CHORUS_GROUP_COMMIT=false`` a batch that is not atomic is applied the
plain way: each operation a command of its own, one transaction each
(:meth:`chorus.db.store.PlaylistStore.apply_batch`). The same batches, sent
in the same order with the same clock and ids to a store with group commit
and to one without it, on two databases of the same backend (SQLite and
PostgreSQL), give the same answers (each operation's and the batch's
version), the same log rows and outbox events, and the same entry rows.

The batches include offline edits made against an old version, their retry
(replayed), a reused operation id, a refusal made before queueing, an unknown
anchor, a stale strict add and a move of its temporary id, a non-member's
batch (no version) and an atomic batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from chorus.db.owner_queue_items import BatchAnswer
from chorus.db.store import PlaylistStore
from chorus.domain.batch import Batch, Operation
from chorus.domain.commands import AddEntries, MoveEntries, Placement
from chorus.domain.errors import InvalidInput
from tests.integration.batch_scenario import offline_ops, seed_media
from tests.integration.test_batch import _batch
from tests.integration.test_group_commit import (
    ALICE,
    MALLORY,
    _answer,
    _log,
    _rows,
    _seeded,
    _store,
)


async def _sent(store: PlaylistStore, title: str) -> tuple[list[Any], list[Any], list[Any]]:
    """Every batch of the scenario through ``store``: the answers, the log and the rows."""
    pid, _ = await _seeded(store, title)
    seeded = await store.execute(AddEntries(pid, f"more-{title}", 2, tuple(seed_media())), ALICE)
    seeds = [e.entry_id for e in seeded.outcome.entries]
    base = seeded.outcome.version
    offline = _batch(offline_ops(seed=5, count=15, prefix=title), pid, base, seeds)
    later = _batch(offline_ops(seed=6, count=10, prefix=f"{title}-b"), pid, base, seeds)
    # A reused operation id (another input under the first batch's first id).
    first = offline.operations[0].command
    reused = dataclasses.replace(
        later.operations[0],
        command=dataclasses.replace(later.operations[0].command, operation_id=first.operation_id),
    )
    later = dataclasses.replace(later, operations=(reused, *later.operations[1:]))
    stale = AddEntries(pid, f"{title}-stale", 0, ("m-stale",), strict=True)
    tricky = Batch(
        pid,
        base,
        (
            Operation(stale, ("tmp-stale",)),
            Operation(
                MoveEntries(pid, f"{title}-tmp-move", base, ("tmp-stale",), Placement()),
                temporaries=frozenset({"tmp-stale"}),
            ),
            Operation(
                MoveEntries(pid, f"{title}-anchor", base, (seeds[0],), Placement("never-there"))
            ),
            Operation(AddEntries(pid, f"{title}-fine", base, ("m-fine",))),
        ),
    )
    atomic = _batch(offline_ops(seed=8, count=5, prefix=f"{title}-at"), pid, base, seeds, True)
    answers: list[Any] = []

    def kept(answer: BatchAnswer) -> None:
        answers.append(([_answer(a) for a in answer.answers], answer.version))

    kept(await store.apply_batch(offline, ALICE))
    kept(await store.apply_batch(offline, ALICE))  # its retry: every operation replayed
    kept(await store.apply_batch(later, ALICE))
    refused = {1: InvalidInput("refused before it was queued", field=("operations", "1"))}
    fresh = _batch(offline_ops(seed=7, count=4, prefix=f"{title}-r"), pid, base, seeds)
    kept(await store.apply_batch(fresh, ALICE, refused))
    kept(await store.apply_batch(tricky, ALICE))
    kept(await store.apply_batch(later, MALLORY))
    kept(await store.apply_batch(atomic, ALICE))
    return answers, await _log(store.db, pid), await _rows(store.db, pid)


def test_batches_give_what_their_plain_twin_gives(database_url: str, twin_url: str) -> None:
    async def run() -> None:
        async with _store(database_url, "grouped") as grouped:
            assert grouped.owners is not None
            on = await _sent(grouped, "grouped")
        async with _store(twin_url, "grouped", group_commit=False) as plain:
            assert plain.owners is None
            off = await _sent(plain, "grouped")
        answers, log, rows = on
        assert answers == off[0]
        assert log == off[1]
        assert rows == off[2]
        # The scenario is what it says: commits, replays, refusals and a hidden version.
        kinds = {kind for batch, _ in answers for kind, _ in batch}
        assert kinds == {"committed", "error"}
        assert all(value[1] for kind, value in answers[1][0] if kind == "committed")
        assert answers[5][1] is None
        kind, (code, *_) = answers[3][0][1]  # the operation refused before it was queued
        assert (kind, code) == ("error", "INVALID_INPUT")
        codes = {value[0].value for batch, _ in answers for kind, value in batch if kind == "error"}
        assert {"OPERATION_ID_REUSED", "VERSION_CONFLICT", "ANCHOR_NOT_FOUND"} <= codes

    asyncio.run(run())
