"""A batch of edits (``applyOperations``) inside a group's transaction.

The owner queue hands a batch to the group commit (:mod:`chorus.db.group_commit`)
as one item; :func:`apply` applies it there, in the group's transaction:

* **not atomic**: each operation in order, exactly like the same command
  queued alone (:meth:`GroupState.one`: replay, refuse or decide on the
  version the previous one left, its own version, log row, outbox event and
  idempotency record), its temporary ids resolved first
  (:func:`chorus.domain.batch.resolve`). A refused operation gets its error
  and the others go on; one that uses a temporary id of a refused add is
  refused too.
* **atomic**: every operation decided in order on the header the previous
  one left but all at the **same** next version, under a savepoint; the
  changes are concatenated in order into that one version — one log row
  (kept under the first operation's id, hashed over the whole batch, the
  per-operation results inside) and one outbox event. The first refusal rolls
  the savepoint back: nothing of the batch is written, the others in the
  group are not touched.

Without group commit (``CHORUS_GROUP_COMMIT=false``) a batch that is not
atomic takes the plain way: each operation a command of its own, in a
transaction of its own (:meth:`chorus.db.store.PlaylistStore.apply_batch`),
through the same :func:`one_by_one`; an atomic batch, one version by
definition, is applied as here, in a group of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from chorus.db import idempotency, repository, writer
from chorus.db.idempotency import Committed, Stored
from chorus.db.owner_queue_items import BatchAnswer, QueuedBatch, QueuedCommand
from chorus.db.stored_results import outcome_from_json, outcome_to_json
from chorus.domain.batch import Batch, Operation, atomic_hash, field_of, remember, resolve
from chorus.domain.commands import request_hash
from chorus.domain.decisions import Decision, Outcome
from chorus.domain.errors import DomainError, InvalidInput, OperationIdReused
from chorus.domain.handlers import decide
from chorus.domain.model import Role, role_can_read

if TYPE_CHECKING:
    from chorus.db.group_state import GroupState

_BATCH_FIELDS = ("playlistId", "baseVersion")
"""Fields of the batch itself: an error there is not located inside an operation."""


async def apply(state: GroupState, queued: QueuedBatch) -> BatchAnswer:
    """Apply ``queued`` in ``state``'s transaction: one answer per operation, in order.

    Domain errors are answers, never raised; what else fails (SQL) fails the group.
    """
    if queued.batch.atomic:
        answers = await _atomic(state, queued)
    else:
        answers = await one_by_one(queued, state.one)
    # The version only to someone who may read the playlist: a stranger is
    # answered as if it did not exist (a PRIVATE playlist's version is news).
    header = state.header
    visible = header is not None and role_can_read(await state.role(queued.actor_id), header)
    return BatchAnswer(tuple(answers), header.version if header is not None and visible else None)


def _located(error: DomainError, index: int, op: Operation) -> DomainError:
    """``error`` with its field inside the operation's input (``operations.<i>.<kind>…``).

    Errors of the batch's own fields, and those already located, keep theirs.
    """
    inner = error.field or ()
    if not (inner and inner[0] in (*_BATCH_FIELDS, "operations")):
        error.field = field_of(index, op, *inner)
    return error


OneCommand = Callable[[QueuedCommand, DomainError | None], Awaitable[Committed | DomainError]]
"""Replay, refuse (the error given: refused before it was queued, unless it replays) or
commit one command; a domain error is the answer, never raised."""


async def one_by_one(queued: QueuedBatch, one: OneCommand) -> list[Committed | DomainError]:
    """A batch that is not atomic, each operation through ``one`` in order: one answer each.

    ``one`` is the group's (:meth:`GroupState.one`) or, without group commit,
    a command's own transaction; temporary ids are resolved here, between them.
    """
    made: dict[str, str | None] = {}
    answers: list[Committed | DomainError] = []
    for i, op in enumerate(queued.batch.operations):
        answer: Committed | DomainError
        try:
            command = resolve(i, op, made)
        except DomainError as error:
            answer = error
        else:
            digest = request_hash(command)
            waiting = QueuedCommand(command, queued.actor_id, digest, queued.traceparent)
            answer = await one(waiting, queued.refused.get(i))
            if isinstance(answer, DomainError):
                answer = _located(answer, i, op)
        if op.client_entry_ids:
            placed = answer.outcome.entries if isinstance(answer, Committed) else None
            remember(op, None if placed is None else tuple(e.entry_id for e in placed), made)
        answers.append(answer)
    return answers


class _Refused(Exception):
    """An operation of an atomic batch was refused: nothing of the batch is written."""

    def __init__(self, index: int, error: DomainError) -> None:
        super().__init__(error.message)
        self.index = index
        self.error = error


async def _atomic(state: GroupState, queued: QueuedBatch) -> list[Committed | DomainError]:
    batch, actor = queued.batch, queued.actor_id
    ops = batch.operations
    first_key = (actor, ops[0].operation_id)
    digest = atomic_hash(batch)
    try:
        replayed = _replay(state.record_of(first_key), digest, ops)
        if replayed is not None:
            return replayed
        for i, op in enumerate(ops[1:], 1):
            if state.record_of((actor, op.operation_id)) is not None:
                raise _Refused(i, _reused(i, op))
        if queued.refused:
            first = min(queued.refused)
            raise _Refused(first, _located(queued.refused[first], first, ops[first]))
        role = await state.role(actor)
        await state.flush()  # its operations read and write the tables directly
        try:
            async with state.conn.begin_nested():  # a refusal rolls back to here
                decisions = await _decide_all(state, batch, actor, role)
        finally:
            state.forget_reads()
    except _Refused as refused:
        return _all_refused(ops, refused)
    combined = _combined(decisions)
    record = writer.record(
        combined, operation_id=ops[0].operation_id, actor_id=actor, request_hash=digest
    )
    record.log["result"]["batch"] = [outcome_to_json(d.outcome) for d in decisions]
    state.pending.append(record)
    state.header = combined.playlist
    state.committed[first_key] = (digest, record.log["result"])
    version = record.log["version"]
    for op in ops[1:]:
        # Kept too, so that none is applied again on its own (nor by a later batch).
        state.batch_members.append((actor, op.operation_id, version))
        state.committed[actor, op.operation_id] = idempotency.BATCH_MEMBER
    return [Committed(d.outcome) for d in decisions]


async def _decide_all(
    state: GroupState, batch: Batch, actor: str, role: Role | None
) -> list[Decision]:
    """Every operation's decision at the one next version, its rows written as it goes.

    Raises:
        _Refused: the first operation the domain refused.
    """
    context = state.context(actor)
    current = state.header
    version = current.version if current is not None else 0
    made: dict[str, str | None] = {}
    decisions: list[Decision] = []
    for i, op in enumerate(batch.operations):
        try:
            command = resolve(i, op, made)
            view = repository.SqlPlaylistView(state.conn, state.playlist_id)
            decision = await decide(command, current, role, view, context)
        except DomainError as error:
            raise _Refused(i, _located(error, i, op)) from None
        await writer.write_changes(state.conn, decision)  # the next operation reads them
        decisions.append(decision)
        # The next operation decides on this one's result, still within the same version.
        current = dataclasses.replace(decision.playlist, version=version)
        if op.client_entry_ids:
            remember(op, tuple(e.entry_id for e in decision.outcome.entries), made)
    return decisions


def _combined(decisions: Sequence[Decision]) -> Decision:
    """One version made of every decision's changes, in order."""
    last = decisions[-1]
    outcome = Outcome(
        playlist_id=last.outcome.playlist_id,
        version=last.outcome.version,
        rebased=last.outcome.rebased,
        entries=tuple(e for d in decisions for e in d.outcome.entries),
        skipped_entry_ids=tuple(s for d in decisions for s in d.outcome.skipped_entry_ids),
        removed_entry_ids=tuple(r for d in decisions for r in d.outcome.removed_entry_ids),
    )
    changes = tuple(c for d in decisions for c in d.changes)
    return Decision(last.playlist, changes, outcome)


def _replay(
    record: Stored | None, digest: str, ops: Sequence[Operation]
) -> list[Committed | DomainError] | None:
    """The stored answers of an atomic batch that committed, or ``None``.

    Raises:
        _Refused: the first operation id committed another request.
    """
    if record is None:
        return None
    stored_hash, result = record
    if stored_hash != digest or "batch" not in result:
        raise _Refused(0, _reused(0, ops[0]))
    return [Committed(outcome_from_json(r), replayed=True) for r in result["batch"]]


def _reused(index: int, op: Operation) -> OperationIdReused:
    return OperationIdReused(
        f"operationId {op.operation_id!r} was already used for a different request",
        field=field_of(index, op, "operationId"),
    )


def _all_refused(ops: Sequence[Operation], refused: _Refused) -> list[Committed | DomainError]:
    """The refused operation's error; every other one is not applied, and says why."""
    failed = ops[refused.index]
    answers: list[Committed | DomainError] = []
    for i in range(len(ops)):
        if i == refused.index:
            answers.append(refused.error)
            continue
        answers.append(
            InvalidInput(
                f"not applied: operation {refused.index} ({failed.operation_id!r}) of this "
                f"atomic batch was refused ({refused.error.code.value})",
                field=field_of(refused.index, failed),
            )
        )
    return answers
