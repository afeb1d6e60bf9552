"""Batches of edits: a device's offline queue, sent at once (``applyOperations``).

A :class:`Batch` names one playlist and the base version the device last
applied; each of its :class:`Operation` values is one of the existing edits
(:data:`BatchCommand`) with its own operation id, all made against that base
version. Storage applies them in order, each rebased onto the version the
previous one left exactly as the single mutation would be, and each
committing its own version — or, ``atomic``, all of them in one version or
none (:mod:`chorus.db.batches`).

**Temporary ids.** An add may name its new entries with client-chosen
``client_entry_ids`` (one per media id, in order); a later operation of the
same batch uses them as anchors or targets. Which ids of an operation are
temporary is said by its ``temporaries``; :func:`resolve` swaps them for the
entry ids the add made, just before the operation is decided. A temporary id
whose add did not commit makes the operation that uses it fail.

**Checks before anything runs** (:func:`check_batch`): a batch is refused as
a whole — nothing applied — when it is empty, has more than
``max_batch_operations`` operations or more than ``max_batch_entries`` media
and entry ids in all, repeats an operation id or a temporary id, gives an add
a wrong number of temporary ids, or uses a temporary id no earlier add of
the batch declares. These are client bugs, not concurrent edits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from chorus.domain.commands import (
    AddEntries,
    MoveEntries,
    Placement,
    RemoveEntries,
    UpdatePlaylist,
    request_hash,
)
from chorus.domain.errors import InvalidInput, LimitExceeded
from chorus.domain.limits import Limits
from chorus.domain.validation import check_id

BatchCommand = AddEntries | MoveEntries | RemoveEntries | UpdatePlaylist
"""The edits a batch may hold."""

KIND: Mapping[type[BatchCommand], str] = {
    AddEntries: "addEntries",
    MoveEntries: "moveEntries",
    RemoveEntries: "removeEntries",
    UpdatePlaylist: "updatePlaylist",
}
"""Each edit's name in an operation (and in the field path of its errors)."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One edit of a batch.

    Attributes:
        command: the edit, with the batch's playlist id and base version; its
            anchors and targets are entry ids or temporary ids.
        client_entry_ids: an add's temporary ids, one per media id, in order;
            empty: the add names none.
        temporaries: the ids in ``command`` (anchors, targets) that are
            temporary ids of earlier adds of the batch.
    """

    command: BatchCommand
    client_entry_ids: tuple[str, ...] = ()
    temporaries: frozenset[str] = frozenset()

    @property
    def operation_id(self) -> str:
        return self.command.operation_id

    @property
    def kind(self) -> str:
        return KIND[type(self.command)]


@dataclass(frozen=True, slots=True)
class Batch:
    """Edits made offline against ``base_version`` of ``playlist_id``, in the order made."""

    playlist_id: str
    base_version: int
    operations: tuple[Operation, ...]
    atomic: bool = False


def field_of(index: int, operation: Operation, *inner: str) -> tuple[str, ...]:
    """The input path of ``operation`` (the ``index``-th) or of a field inside it."""
    return ("operations", str(index), operation.kind, *inner)


def _size(command: BatchCommand) -> int:
    match command:
        case AddEntries():
            return len(command.media_ids)
        case MoveEntries() | RemoveEntries():
            return len(command.entry_ids)
        case UpdatePlaylist():
            return 0


def _referenced(command: BatchCommand) -> list[tuple[str, tuple[str, ...]]]:
    """Every anchor and target id of ``command`` with its field inside the operation."""
    found: list[tuple[str, tuple[str, ...]]] = []
    if isinstance(command, AddEntries | MoveEntries):
        placement = command.placement
        found += [(placement.after, ("after",))] if placement.after is not None else []
        found += [(placement.before, ("before",))] if placement.before is not None else []
    if isinstance(command, MoveEntries | RemoveEntries):
        found += [(e, ("entryIds", str(i))) for i, e in enumerate(command.entry_ids)]
    return found


def check_batch(batch: Batch, limits: Limits) -> None:
    """Refuse a batch that is malformed as a whole; see the module docstring.

    Raises:
        InvalidInput: empty, a repeated operation id or temporary id, a wrong
            number of temporary ids, an undeclared temporary id (field: the
            path of the first at fault, e.g. ``operations.3.moveEntries.after``).
        LimitExceeded: more than ``limits.max_batch_operations`` operations or
            ``limits.max_batch_entries`` ids in all.
    """
    ops = batch.operations
    if not ops:
        raise InvalidInput("operations must not be empty", field=("operations",))
    if len(ops) > limits.max_batch_operations:
        raise LimitExceeded(
            f"at most {limits.max_batch_operations} operations per batch", field=("operations",)
        )
    total = sum(_size(op.command) for op in ops)
    if total > limits.max_batch_entries:
        raise LimitExceeded(
            f"at most {limits.max_batch_entries} media and entry ids per batch (this one "
            f"has {total})",
            field=("operations",),
        )
    operation_ids: set[str] = set()
    declared: set[str] = set()
    for i, op in enumerate(ops):
        if op.operation_id in operation_ids:
            raise InvalidInput(
                f"operationId {op.operation_id!r} appears twice in this batch",
                field=field_of(i, op, "operationId"),
            )
        operation_ids.add(op.operation_id)
        _check_references(i, op, declared)
        _check_declared(i, op, declared, limits)


def _check_references(index: int, op: Operation, declared: set[str]) -> None:
    for value, inner in _referenced(op.command):
        if value in op.temporaries and value not in declared:
            raise InvalidInput(
                f"{value!r} is no clientEntryId of an earlier addEntries of this batch",
                field=field_of(index, op, *inner),
            )
    if not op.temporaries <= {value for value, _ in _referenced(op.command)}:
        raise InvalidInput(
            "temporaries name ids the operation does not use", field=field_of(index, op)
        )


def _check_declared(index: int, op: Operation, declared: set[str], limits: Limits) -> None:
    if not op.client_entry_ids:
        return
    command = op.command
    if not isinstance(command, AddEntries):
        raise InvalidInput("only addEntries declares clientEntryIds", field=field_of(index, op))
    if len(op.client_entry_ids) != len(command.media_ids):
        raise InvalidInput(
            f"clientEntryIds must have one id per media id ({len(command.media_ids)})",
            field=field_of(index, op, "clientEntryIds"),
        )
    for j, client_id in enumerate(op.client_entry_ids):
        at = field_of(index, op, "clientEntryIds", str(j))
        check_id(client_id, at, limits, "a clientEntryId")
        if client_id in declared:
            raise InvalidInput(f"clientEntryId {client_id!r} is declared twice", field=at)
        declared.add(client_id)


Made = Mapping[str, str | None]
"""Temporary id → the entry id its add made, or ``None`` when that add did not commit."""


def resolve(index: int, op: Operation, made: Made) -> BatchCommand:
    """``op``'s command with its temporary ids replaced by the entry ids they name.

    Args:
        index: the operation's place in the batch (for the error's field).
        op: the operation, checked by :func:`check_batch`.
        made: what the batch's earlier adds made.

    Raises:
        InvalidInput: a temporary id whose add did not commit (field: where it is used).
    """
    if not op.temporaries:
        return op.command
    for value, inner in _referenced(op.command):
        if value in op.temporaries and made.get(value) is None:
            raise InvalidInput(
                f"clientEntryId {value!r} names no entry: the addEntries that declared "
                "it did not commit",
                field=field_of(index, op, *inner),
            )

    def real(value: str | None) -> str | None:
        return made[value] if value is not None and value in op.temporaries else value

    command = op.command
    if isinstance(command, AddEntries | MoveEntries):
        placement = Placement(
            after=real(command.placement.after), before=real(command.placement.before)
        )
        command = dataclasses.replace(command, placement=placement)
    if isinstance(command, MoveEntries | RemoveEntries):
        entry_ids = tuple(str(real(e)) for e in command.entry_ids)
        command = dataclasses.replace(command, entry_ids=entry_ids)
    return command


def remember(op: Operation, entry_ids: tuple[str, ...] | None, made: dict[str, str | None]) -> None:
    """Record what an add's temporary ids name: its new ``entry_ids``; ``None``: not committed."""
    if entry_ids is None:
        made.update((client_id, None) for client_id in op.client_entry_ids)
    else:
        made.update(zip(op.client_entry_ids, entry_ids, strict=True))


def atomic_hash(batch: Batch) -> str:
    """SHA-256 (hex) of an atomic batch as sent: every operation, unresolved, in order.

    The one log row of an atomic batch's version is its idempotency record, so
    a retry of the same batch replays it and a different request under its
    first operation id is ``OPERATION_ID_REUSED``.
    """
    body = [
        [request_hash(op.command), list(op.client_entry_ids), sorted(op.temporaries)]
        for op in batch.operations
    ]
    text = json.dumps(["atomic", body], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
