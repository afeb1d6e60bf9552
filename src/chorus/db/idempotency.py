"""The idempotency record: a committed command's stored answer, looked up by operation id.

Every commit path (:mod:`chorus.db.store`'s one command, :mod:`chorus.db.group_commit`'
group) writes a mutation-log row that is also the command's idempotency record:
its ``request_hash`` and stored ``result``, keyed by ``(actor id, operation id)``
(operation ids are scoped to their actor, so nothing leaks). A retry of the
same request is answered from it (``replayed``); the same operation id with
another request is ``OPERATION_ID_REUSED``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.engine import Database
from chorus.db.stored_results import outcome_from_json
from chorus.db.tables import playlist_batch_operation, playlist_mutation
from chorus.domain.decisions import Outcome
from chorus.domain.errors import OperationIdReused

Stored = tuple[str, dict[str, Any]]
"""An idempotency record: ``(request hash, stored result)``."""


@dataclass(frozen=True, slots=True)
class Committed:
    """The answer to a command: its outcome, and whether it was a replay."""

    outcome: Outcome
    replayed: bool = False


async def stored(
    conn: AsyncConnection, actor_id: str, operation_id: str, digest: str
) -> Committed | None:
    """The stored answer of ``(actor_id, operation_id)`` as a replay, or ``None``.

    Raises:
        OperationIdReused: it committed a request whose hash is not ``digest``, or an
            atomic batch holds it after its first operation (:data:`BATCH_MEMBER`).
    """
    row = (
        await conn.execute(
            select(
                playlist_mutation.c.request_hash,
                playlist_mutation.c.result,
                playlist_mutation.c.payload,
            ).where(
                playlist_mutation.c.actor_id == actor_id,
                playlist_mutation.c.operation_id == operation_id,
            )
        )
    ).first()
    if row is None:
        member = await conn.scalar(
            _BATCH_MEMBER, {"actor_id": actor_id, "operation_id": operation_id}
        )
        return replay(BATCH_MEMBER if member is not None else None, digest, operation_id)
    return replay((row.request_hash, _result(row.result, row.payload)), digest, operation_id)


async def stored_many(
    conn: AsyncConnection, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], Stored]:
    """The record of each committed ``(actor id, operation id)`` of ``keys``: a log row's, or
    :data:`BATCH_MEMBER` for one an atomic batch holds after its first operation."""
    unique = list(dict.fromkeys(keys))
    rows = await conn.execute(_STORED_MANY, {"keys": unique})
    found = {
        (r.actor_id, r.operation_id): record_of_row(r.request_hash, r.result, r.payload)
        for r in rows
    }
    members = await conn.execute(_BATCH_MEMBERS, {"keys": unique})
    for r in members:
        found.setdefault((r.actor_id, r.operation_id), BATCH_MEMBER)
    return found


def record_of_row(request_hash: str, result: dict[str, Any], payload: dict[str, Any]) -> Stored:
    """The idempotency record of a log row: its request hash and stored result."""
    return request_hash, _result(result, payload)


_STORED_MANY = select(
    playlist_mutation.c.actor_id,
    playlist_mutation.c.operation_id,
    playlist_mutation.c.request_hash,
    playlist_mutation.c.result,
    playlist_mutation.c.payload,
).where(
    tuple_(playlist_mutation.c.actor_id, playlist_mutation.c.operation_id).in_(
        bindparam("keys", expanding=True)
    )
)
"""Built once (its cache key and compiled form are memoised); the keys expand per call."""


BATCH_MEMBER_HASH = "an operation of an atomic batch"
"""The request hash of an operation id an atomic batch holds after its first: it is no
SHA-256, so no request's digest is ever equal to it and a reuse is ``OPERATION_ID_REUSED``."""

BATCH_MEMBER: Stored = (BATCH_MEMBER_HASH, {"removed_entry_ids": []})
"""The idempotency record of such an id (``playlist_batch_operation``): never replayed."""

_BATCH_MEMBER = select(playlist_batch_operation.c.version).where(
    playlist_batch_operation.c.actor_id == bindparam("actor_id"),
    playlist_batch_operation.c.operation_id == bindparam("operation_id"),
)
_BATCH_MEMBERS = select(
    playlist_batch_operation.c.actor_id, playlist_batch_operation.c.operation_id
).where(
    tuple_(playlist_batch_operation.c.actor_id, playlist_batch_operation.c.operation_id).in_(
        bindparam("keys", expanding=True)
    )
)


def _result(result: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """A log row's stored result, completed from its changes when it was stored before
    results kept ``removed_entry_ids`` (so a retry across the upgrade still names them)."""
    if "removed_entry_ids" in result:
        return result
    removed = outcome_from_json(result, payload).removed_entry_ids
    return {**result, "removed_entry_ids": list(removed)}


def replay(record: Stored | None, digest: str, operation_id: str) -> Committed | None:
    """The replayed answer of a request hashed ``digest`` if ``record`` holds one, else ``None``.

    Raises:
        OperationIdReused: ``record`` is of a different request.
    """
    if record is None:
        return None
    request_hash, result = record
    if request_hash != digest:
        raise _reused(operation_id)
    return Committed(outcome_from_json(result), replayed=True)


async def replay_after_race(
    db: Database, error: IntegrityError, actor_id: str, operation_id: str, digest: str
) -> Committed:
    """A concurrent twin committed first: answer with its stored result.

    Raises:
        IntegrityError: ``error`` again when there is no twin (another constraint failed).
        OperationIdReused: the twin was a different request.
    """
    async with db.read() as conn:
        answer = await stored(conn, actor_id, operation_id, digest)
    if answer is None:
        raise error
    return answer


def _reused(operation_id: str) -> OperationIdReused:
    return OperationIdReused(
        f"operationId {operation_id!r} was already used for a different request",
        field=("operationId",),
    )
