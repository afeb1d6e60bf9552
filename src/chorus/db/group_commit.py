"""Group commit: the owner queue's batch of one playlist's commands, in one transaction.

:class:`~chorus.db.store.PlaylistStore` queues the commands on an existing
playlist in its owner queue (:mod:`chorus.db.owners`), and the owner hands
what waits to :class:`GroupCommit`, which commits it in **one** transaction:
lock the row once, look every operation id up in one query, then for each
command in queue order decide against the header as the previous one left it
and write its entry and member rows (the next command reads them); at the end
write the header once and every log row and outbox event, one ``INSERT``
each. Each command keeps its own version, log row, outbox event and
idempotency record; a command the domain refuses gets its error and the
others go on; a duplicate inside the group replays the first, a reused id is
refused, exactly as if they had been committed one by one in that order. If
the group's transaction fails, it left nothing (or, when the connection was
lost during COMMIT, possibly all of it): each command is then retried in a
transaction of its own, where a retry of a command that did commit replays
it, so no group is ever partly committed, and every command gets its own
answer. The database being unavailable is answered to each command at once.

A batch (``applyOperations``, :mod:`chorus.db.batches`) waits in the queue as
one item and is applied inside the group like its operations queued one after
the other, resolving its temporary ids as it goes; an atomic batch is one
version, under a savepoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from opentelemetry.context import Context as TraceContext
from sqlalchemy import Integer, String, Text, column, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import batches, idempotency, repository, writer
from chorus.db.direct import fetch_in_transaction
from chorus.db.engine import Database, DatabaseUnavailable, finish_even_if_cancelled
from chorus.db.group_state import GroupState, GroupView
from chorus.db.idempotency import Committed
from chorus.db.owner_queue_items import Answer, BatchAnswer, Queued, QueuedBatch, QueuedCommand
from chorus.db.tables import UTCDateTime
from chorus.domain.decisions import Context, Outcome
from chorus.domain.errors import DomainError
from chorus.domain.model import Entry, Playlist, Role
from chorus.tracing import links_to, tracer

__all__ = ["GroupCommit", "GroupState", "GroupView", "QueuedBatch", "QueuedCommand"]


class GroupCommit:
    """The owner queue's commit (:class:`~chorus.db.owners.OwnerQueues`' ``commit``).

    Args:
        db: the database.
        context: the handlers' context of an actor id (clock, ids, limits).
        committed: called with the group's last outcome and how many versions
            it committed, after the transaction committed (never for replays).
    """

    def __init__(
        self,
        db: Database,
        context: Callable[[str], Context],
        committed: Callable[[Outcome, int], None],
    ) -> None:
        self._db = db
        self._context = context
        self._committed = committed

    async def __call__(
        self, playlist_id: str, group: Sequence[Queued]
    ) -> list[Answer | BaseException]:
        """One answer per item of ``group``, in order; never raises."""
        try:
            # The owner's task outlives the request that started it: each group
            # is its own trace, linked to every request it commits.
            with tracer.start_as_current_span(
                "db.group_commit",
                context=TraceContext(),
                links=links_to(c.traceparent for c in group),
                attributes={"chorus.group.size": len(group), "chorus.playlist.id": playlist_id},
            ):
                return await finish_even_if_cancelled(self._group(playlist_id, group))
        except DatabaseUnavailable as error:
            return [error] * len(group)
        except Exception as error:
            if len(group) > 1:
                # Nothing of the group committed (or all of it, if COMMIT lost the
                # connection, and then each retry replays): one by one, the command
                # at fault fails alone.
                return [a for c in group for a in await self(playlist_id, [c])]
            return await self._alone(playlist_id, group[0], error)

    async def _alone(
        self, playlist_id: str, only: Queued, error: Exception
    ) -> list[Answer | BaseException]:
        """The answer of a group of one whose transaction failed with ``error``."""
        if not isinstance(error, IntegrityError):
            return [error]
        try:
            if isinstance(only, QueuedBatch):
                # A twin of one of its operations committed in another transaction:
                # once more, and that operation replays.
                return await finish_even_if_cancelled(self._group(playlist_id, [only]))
            return [
                await idempotency.replay_after_race(
                    self._db, error, only.actor_id, only.command.operation_id, only.digest
                )
            ]
        except Exception as replay_error:
            return [replay_error]

    async def _group(
        self, playlist_id: str, group: Sequence[Queued]
    ) -> list[Answer | BaseException]:
        answers: list[Answer | BaseException] = []
        keys = [k for c in group for k in (c.keys if isinstance(c, QueuedBatch) else [c.key])]
        actors = list(dict.fromkeys(c.actor_id for c in group))
        async with self._db.write() as conn:
            if conn.dialect.name == "postgresql":
                header = await repository.lock_playlist(conn, playlist_id)
                state = await _read_after_lock(
                    conn, playlist_id, header, keys, actors, self._context
                )
            else:
                header = await repository.get_playlist(conn, playlist_id, for_update=True)
                stored = await idempotency.stored_many(conn, keys)
                state = GroupState(playlist_id, conn, header, stored, self._context)
            for c in group:
                answer: Answer | DomainError
                if isinstance(c, QueuedBatch):
                    answer = await batches.apply(state, c)
                else:
                    answer = await state.one(c)
                answers.append(answer)
            if state.committed:
                assert state.header is not None
                added, state.added = list(state.added.values()), {}
                await writer.write_end(conn, state.header, state.pending, added)
                if state.batch_members:  # after their log rows, which they reference
                    await writer.write_batch_members(conn, playlist_id, state.batch_members)
        if state.committed:
            assert state.header is not None
            self._committed(Outcome(state.header.id, state.header.version), _versions(answers))
        return answers


async def _read_after_lock(
    conn: AsyncConnection,
    playlist_id: str,
    header: Playlist | None,
    keys: Sequence[tuple[str, str]],
    actors: Sequence[str],
    context: Callable[[str], Context],
) -> GroupState:
    """A group's state on PostgreSQL, from **one** read after the lock (:data:`_AFTER_LOCK`).

    The idempotency records of its operation ids, its actors' roles and the
    playlist's last live entry (what an append decides on) — three statements
    before, each ~0.3 ms of the process's CPU through SQLAlchemy. After the
    lock, not with it: a lock that waited would leave the reads at the
    snapshot from before the wait. Run on asyncpg itself
    (:func:`~chorus.db.direct.fetch_in_transaction`): its values are SQLAlchemy's
    (no column has a result processor that changes what asyncpg returns).
    """
    unique = list(dict.fromkeys(keys))
    rows = await fetch_in_transaction(
        conn,
        _AFTER_LOCK,
        {
            "playlist_id": playlist_id,
            "actors": [a for a, _ in unique],
            "operations": [o for _, o in unique],
            "users": list(actors),
            "batch_member": idempotency.BATCH_MEMBER_HASH,
            "batch_result": json.dumps(idempotency.BATCH_MEMBER[1]),
        },
    )
    stored: dict[tuple[str, str], idempotency.Stored] = {}
    roles: dict[str, Role | None] = dict.fromkeys(actors)
    tail: list[Entry] = []
    for kind, a, b, c, d, e, f, t in rows:
        if kind == 1 and c == idempotency.BATCH_MEMBER_HASH:
            # A log row of the same id wins, as in idempotency.stored: both exist only when
            # a batch and another edit took it at once (docs/api.md), and that edit's retry
            # replays it.
            stored.setdefault((a, b), idempotency.BATCH_MEMBER)
        elif kind == 1:
            stored[a, b] = idempotency.record_of_row(c, json.loads(d), json.loads(e))
        elif kind == 2:
            roles[a] = Role(b)
        else:
            tail.append(Entry(a, f, b, c, t))
    state = GroupState(playlist_id, conn, header, stored, context, roles=roles)
    # What GroupView.live_before(None, 1) reads: an append's neighbour.
    state.reads["before", None, 1] = tail
    return state


_AFTER_LOCK = text(
    "SELECT 1 AS kind, m.actor_id AS a, m.operation_id AS b, m.request_hash AS c, "
    "CAST(m.result AS text) AS d, CAST(m.payload AS text) AS e, NULL AS f, "
    "CAST(NULL AS timestamptz) AS t "
    "FROM unnest(CAST(:actors AS varchar[]), CAST(:operations AS varchar[])) AS k(a, o) "
    "CROSS JOIN LATERAL (SELECT * FROM playlist_mutation "
    "WHERE actor_id = k.a AND operation_id = k.o LIMIT 1) AS m "
    "UNION ALL SELECT 1, b.actor_id, b.operation_id, :batch_member, :batch_result, '{}', "
    "NULL, NULL "
    "FROM unnest(CAST(:actors AS varchar[]), CAST(:operations AS varchar[])) AS k(a, o) "
    "CROSS JOIN LATERAL (SELECT * FROM playlist_batch_operation "
    "WHERE actor_id = k.a AND operation_id = k.o LIMIT 1) AS b "
    "UNION ALL SELECT 2, user_id, role, NULL, NULL, NULL, NULL, NULL FROM playlist_member "
    "WHERE playlist_id = :playlist_id AND user_id = ANY(CAST(:users AS varchar[])) "
    "UNION ALL (SELECT 3, entry_id, media_id, added_by, NULL, NULL, position_key, added_at "
    "FROM playlist_entry WHERE playlist_id = :playlist_id AND removed_at IS NULL "
    "ORDER BY position_key DESC, entry_id DESC LIMIT 1)"
).columns(
    column("kind", Integer),
    column("a", String),
    column("b", String),
    column("c", String),
    column("d", Text),
    column("e", Text),
    column("f", String),
    column("t", UTCDateTime),
)
"""The records of the group's operation ids (kind 1: a log row's, or
:data:`~chorus.db.idempotency.BATCH_MEMBER` for an atomic batch's later operation), its
actors' roles (2) and the last live entry (3), in the order of
:func:`chorus.db.repository.entries_page`.

Each operation id is looked up on its own, by the unique index (a ``LATERAL`` subquery
with ``LIMIT 1``, which the planner can neither flatten nor hash). The statement is
prepared once per connection and PostgreSQL keeps its generic plan, made for an array
of unknown length (10 keys, it guesses). Written as ``(actor_id, operation_id) IN
(SELECT * FROM unnest(...))``, that plan was a hash semi join over a sequential scan
whenever it was made while the log was small (a fresh database, or statistics never
gathered: autovacuum off). The plan stayed cached while the log grew, so every commit
read the whole log: 0.4 ms at 1,300 rows (auto_explain, ``bench/writes.py``)."""


def _versions(answers: Sequence[Answer | BaseException]) -> int:
    """How many versions the answers committed (replays and errors commit none)."""
    count = 0
    for answer in answers:
        if isinstance(answer, BatchAnswer):
            count += len(
                {a.outcome.version for a in answer.answers if isinstance(a, Committed) and _new(a)}
            )
        elif isinstance(answer, Committed) and _new(answer):
            count += 1
    return count


def _new(answer: Committed) -> bool:
    return not answer.replayed
