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
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from opentelemetry.context import Context as TraceContext
from sqlalchemy import Integer, String, Text, column, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import batches, idempotency, repository, writer
from chorus.db.engine import Database, DatabaseUnavailable, finish_even_if_cancelled
from chorus.db.idempotency import Committed
from chorus.db.queued import Answer, BatchAnswer, Queued, QueuedBatch, QueuedCommand
from chorus.db.tables import UTCDateTime
from chorus.domain.changes import Change, MembersChanged
from chorus.domain.commands import RevertPlaylist
from chorus.domain.errors import DomainError
from chorus.domain.handlers import Context, Decision, Outcome, decide
from chorus.domain.model import Entry, Playlist, Role
from chorus.domain.ports import SortKey
from chorus.tracing import links_to, tracer

__all__ = ["GroupCommit", "GroupState", "GroupView", "QueuedBatch", "QueuedCommand"]

T = TypeVar("T")


@dataclass(slots=True)
class GroupState:
    """One group's transaction as its commands go by: the header, the rows still to write.

    Attributes:
        playlist_id: the group's playlist.
        conn: the group's write transaction, the playlist row locked.
        header: the playlist as the previous command left it (``None``: missing).
        stored: the idempotency records of the group's operation ids before it.
        context: the handlers' context of an actor id.
        pending: log rows and outbox events not written yet (they wait for the group's end).
        committed: this group's commits: idempotency key → (request hash, stored result).
        roles: the actors' roles, read once each (a member change forgets one).
        added: entries the group added and has not written yet (entry id → entry):
            a command that only adds entries leaves its rows here, and they are
            written in one ``INSERT`` before anything else is written (:meth:`flush`),
            so a hot playlist's run of appends costs one statement, not one each.
        reads: the entry reads of the group's view since its last write
            (:class:`GroupView`); the row lock keeps every other writer out, so
            they hold until this group writes.
    """

    playlist_id: str
    conn: AsyncConnection
    header: Playlist | None
    stored: dict[tuple[str, str], idempotency.Stored]
    context: Callable[[str], Context]
    pending: list[writer.Record] = field(default_factory=list)
    committed: dict[tuple[str, str], idempotency.Stored] = field(default_factory=dict)
    roles: dict[str, Role | None] = field(default_factory=dict)
    added: dict[str, Entry] = field(default_factory=dict)
    reads: dict[tuple[object, ...], object] = field(default_factory=dict)

    async def flush(self) -> None:
        """Write the entries added and not written yet; forget the reads."""
        if self.added:
            await writer.write_added(self.conn, self.playlist_id, list(self.added.values()))
            self.added = {}
        self.forget_reads()

    def forget_reads(self) -> None:
        """The tables changed (or may have): the next read goes to the database."""
        self.reads.clear()

    def record_of(self, key: tuple[str, str]) -> idempotency.Stored | None:
        """The idempotency record of ``key``: committed before the group or in it."""
        return self.stored.get(key) or self.committed.get(key)

    async def role(self, actor_id: str) -> Role | None:
        if actor_id not in self.roles:
            self.roles[actor_id] = await repository.get_role(self.conn, self.playlist_id, actor_id)
        return self.roles[actor_id]

    async def one(
        self, c: QueuedCommand, refusal: DomainError | None = None
    ) -> Committed | DomainError:
        """Replay, refuse or decide-and-write ``c`` on the header as the group left it.

        ``refusal``: the error to answer unless ``c`` replays (refused before it was queued).
        """
        try:
            if replay := idempotency.replay(
                self.record_of(c.key), c.digest, c.command.operation_id
            ):
                return replay
            if refusal is not None:
                return refusal
            role = await self.role(c.actor_id)
            if isinstance(c.command, RevertPlaylist):
                # It reads the log: the group's versions so far must be in it.
                await self.flush()
                await writer.write_records(self.conn, self.pending)
                self.pending = []
            decision = await self._decide_and_write(c, role)
        except DomainError as error:
            return error
        self.header = decision.playlist
        self.committed[c.key] = (c.digest, self.pending[-1].log["result"])
        return Committed(decision.outcome)

    async def _decide_and_write(self, c: QueuedCommand, role: Role | None) -> Decision:
        """Decide ``c`` on the header, write its entry and member rows, add its records."""
        view = GroupView(self)
        decision = await decide(c.command, self.header, role, view, self.context(c.actor_id))
        deferred = writer.only_adds(decision)
        if not deferred:
            await self.flush()  # its rows are written after those added before it
        await writer.write_decision(
            self.conn,
            decision,
            operation_id=c.command.operation_id,
            actor_id=c.actor_id,
            request_hash=c.digest,
            group=self.pending,
            added=self.added if deferred else None,
            trace_context=c.traceparent,
        )
        if not deferred:
            self.forget_reads()
        self.forget_roles(decision)
        return decision

    def forget_roles(self, decision: Decision) -> None:
        """The next command reads a changed member's new role."""
        for change in decision.changes:
            if isinstance(change, MembersChanged):
                self.roles.pop(change.user_id, None)


class GroupView:
    """The :class:`~chorus.domain.ports.PlaylistView` a group's command decides on.

    The entries as the commands before it left them: the database's rows as
    of the group's last write, read once each (``GroupState.reads``), with the
    entries added since (``GroupState.added``, all live) merged in; a role is
    the group's (``GroupState.role``); the log is the database's (a revert
    writes the group's versions before it reads it).
    """

    def __init__(self, state: GroupState) -> None:
        self._state = state
        self._sql = repository.SqlPlaylistView(state.conn, state.playlist_id)

    async def _read(self, key: tuple[object, ...], load: Callable[[], Awaitable[T]]) -> T:
        reads = self._state.reads
        if key not in reads:
            reads[key] = await load()
        return reads[key]  # type: ignore[return-value]

    async def entries(self, entry_ids: Collection[str]) -> dict[str, Entry]:
        ids = frozenset(entry_ids)
        found = dict(await self._read(("entries", ids), lambda: self._sql.entries(ids)))
        added = self._state.added
        found.update((i, added[i]) for i in ids if i in added)
        return found

    async def live_before(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        over = limit + len(exclude)
        rows = await self._read(
            ("before", position, over), lambda: self._sql.live_before(position, over)
        )
        added = [e for e in self._state.added.values() if position is None or e.sort_key < position]
        return _nearest(rows, added, limit, exclude, descending=True)

    async def live_after(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        over = limit + len(exclude)
        rows = await self._read(
            ("after", position, over), lambda: self._sql.live_after(position, over)
        )
        added = [e for e in self._state.added.values() if position is None or e.sort_key > position]
        return _nearest(rows, added, limit, exclude, descending=False)

    async def live_with_media(self, media_id: str) -> Sequence[Entry]:
        rows = await self._read(("media", media_id), lambda: self._sql.live_with_media(media_id))
        added = [e for e in self._state.added.values() if e.media_id == media_id]
        return sorted(_merged(rows, added), key=lambda e: e.sort_key)

    async def role_of(self, user_id: str) -> Role | None:
        return await self._state.role(user_id)

    async def changes_since(self, version: int) -> Sequence[tuple[int, Sequence[Change]]] | None:
        return await self._sql.changes_since(version)


def _merged(rows: Sequence[Entry], added: Sequence[Entry]) -> list[Entry]:
    """``rows`` and ``added`` once each by entry id (an added one wins: a revert's re-add)."""
    return list({**{e.entry_id: e for e in rows}, **{e.entry_id: e for e in added}}.values())


def _nearest(
    rows: Sequence[Entry],
    added: Sequence[Entry],
    limit: int,
    exclude: Collection[str],
    *,
    descending: bool,
) -> list[Entry]:
    """The ``limit`` entries nearest the position, of the database's nearest ``limit +
    len(exclude)`` and every added one on that side: the true nearest are among them."""
    merged = sorted(_merged(rows, added), key=lambda e: e.sort_key, reverse=descending)
    return [e for e in merged if e.entry_id not in exclude][:limit]


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
            header = await repository.get_playlist(conn, playlist_id, for_update=True)
            if conn.dialect.name == "postgresql":
                state = await _read_after_lock(
                    conn, playlist_id, header, keys, actors, self._context
                )
            else:
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
                await state.flush()
                await writer.write_end(conn, state.header, state.pending)
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
    snapshot from before the wait.
    """
    unique = list(dict.fromkeys(keys))
    rows = await conn.execute(
        _AFTER_LOCK,
        {
            "playlist_id": playlist_id,
            "actors": [a for a, _ in unique],
            "operations": [o for _, o in unique],
            "users": list(actors),
        },
    )
    stored: dict[tuple[str, str], idempotency.Stored] = {}
    roles: dict[str, Role | None] = dict.fromkeys(actors)
    tail: list[Entry] = []
    for kind, a, b, c, d, e, f, t in rows:
        if kind == 1:
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
    "SELECT 1 AS kind, actor_id AS a, operation_id AS b, request_hash AS c, "
    "CAST(result AS text) AS d, CAST(payload AS text) AS e, NULL AS f, "
    "CAST(NULL AS timestamptz) AS t FROM playlist_mutation "
    "WHERE (actor_id, operation_id) IN "
    "(SELECT * FROM unnest(CAST(:actors AS varchar[]), CAST(:operations AS varchar[]))) "
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
"""The records of the group's operation ids (kind 1), its actors' roles (2) and the
last live entry (3), in the order of :func:`chorus.db.repository.entries_page`."""


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
