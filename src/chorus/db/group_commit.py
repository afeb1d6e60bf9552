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

One statement. On PostgreSQL without a transaction pooler, a group of
``addEntries`` commands is first tried outside a transaction, in two round trips
where a transaction takes four (``BEGIN``, lock and read, the end, ``COMMIT``):
one statement reads the header and what the group reads (:data:`_READ`), the
commands are decided on it, and one statement writes the end
(:func:`~chorus.db.writer.write_end` with :class:`~chorus.db.writer.Unlocked`),
only if the playlist's row is still at the version read and is the row read (its
``xmin``), and the deciding actors' member rows are as read. Every commit that
changes the playlist's entries, members or log bumps its version, and a change
made without one (by hand in SQL) rewrites the row or a member row, so a write
that finds them unchanged decided on what a transaction locking the row first
would have read;
the statement is atomic on its own. Nothing is written, and the group runs again
in a transaction, when:

* another commit, or a change by hand, landed between the read and the write
  (``moved_on``: another process's owner, or a transaction that holds the lock);
* a command writes rows before the end: anything but added entries (an add that
  adds nothing, ``writes_rows``);
* the group keeps a history checkpoint, a statement of its own (``checkpoint``);
* a command was refused and none committed: a refusal has no write to check that
  its later reads saw the header's version (``refused``).

Commits by one owner in one process never meet the first case: its queue runs
one group of a playlist at a time. ``chorus_group_commits_total`` counts the
groups by path, ``chorus_group_commit_fallbacks_total`` the second tries.

Carried. A group committed as one statement leaves what it knew of its playlist
(:class:`_Carried`: the header it wrote, the last live entry, the roles; the
4,096 playlists committed last, per process). The next group of adds of that
playlist whose actors' roles are all known decides on it without reading, and
its end also writes only if none of its operation ids is committed already (a
retry's record was not read): one round trip while this process is the
playlist's only writer. When that end writes nothing (the playlist moved on, or
an operation id is known) or its commands commit nothing (a refusal may be a
retry's), the group is decided again on a read, drawing the same ids again
(:class:`_Drawn`).
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from opentelemetry.context import Context as TraceContext
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import batches, idempotency, repository, writer
from chorus.db.direct import fetch_direct, fetch_in_transaction
from chorus.db.engine import Database, DatabaseUnavailable, finish_even_if_cancelled
from chorus.db.group_state import GroupState, GroupView, NeedsTransaction
from chorus.db.idempotency import Committed
from chorus.db.owner_queue_items import Answer, BatchAnswer, Queued, QueuedBatch, QueuedCommand
from chorus.db.tables import playlist
from chorus.domain.commands import AddEntries
from chorus.domain.decisions import Context, Outcome
from chorus.domain.errors import DomainError
from chorus.domain.model import Entry, Playlist, Role
from chorus.metrics import GROUP_COMMIT_FALLBACKS, GROUP_COMMITS, child
from chorus.tracing import enabled as tracing_enabled
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
        self._carried: OrderedDict[str, _Carried] = OrderedDict()
        """By playlist: what its last group committed as one statement left (LRU)."""

    async def __call__(
        self, playlist_id: str, group: Sequence[Queued]
    ) -> list[Answer | BaseException]:
        """One answer per item of ``group``, in order; never raises."""
        try:
            # The owner's task outlives the request that started it: each group
            # is its own trace, linked to every request it commits. No tracer
            # provider: no span (the API's no-op span and its context managers were
            # ~1% of a commit's CPU, py-spy on bench/writes.py).
            traced = (
                tracer.start_as_current_span(
                    "db.group_commit",
                    context=TraceContext(),
                    links=links_to(c.traceparent for c in group),
                    attributes={
                        "chorus.group.size": len(group),
                        "chorus.playlist.id": playlist_id,
                    },
                )
                if tracing_enabled()
                else nullcontext()
            )
            with traced:
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
        context = self._context
        if self._db.direct_reads and all(_adds(c) for c in group):
            drawn = _Drawn(self._context)
            context = drawn.context
            try:
                try:
                    answers = await self._one_statement(playlist_id, group, context, carry=True)
                except _Unread:
                    drawn.give_back()
                    answers = await self._one_statement(playlist_id, group, context, carry=False)
            except NeedsTransaction as why:
                child(GROUP_COMMIT_FALLBACKS, why.reason).inc()
                drawn.give_back()
            else:
                child(GROUP_COMMITS, "one_statement").inc()
                return answers
        self._carried.pop(playlist_id, None)
        answers = await self._in_transaction(playlist_id, group, context)
        child(GROUP_COMMITS, "transaction").inc()
        return answers

    async def _one_statement(
        self,
        playlist_id: str,
        group: Sequence[Queued],
        context: Callable[[str], Context],
        *,
        carry: bool,
    ) -> list[Answer | BaseException]:
        """The group read and written outside a transaction, one statement each (module
        docstring, "One statement").

        ``carry``: decide on what this process's last group of the playlist left
        (:class:`_Carried`), if it left it and knows every actor's role, without reading.

        Raises:
            _Unread: ``carry``, and the group decided on carried state wrote nothing:
                it must be decided again on what is read (nothing was written).
            NeedsTransaction: nothing was written; the group must run in a transaction.
        """
        answers: list[Answer | BaseException] = []
        keys = [c.key for c in group if isinstance(c, QueuedCommand)]
        actors = list(dict.fromkeys(c.actor_id for c in group))
        carried = self._carried.pop(playlist_id, None) if carry else None
        if carried is not None and not all(a in carried.roles for a in actors):
            carried = None
        async with self._db.write_statements() as conn:
            if carried is not None:
                state = GroupState(
                    playlist_id, conn, carried.header, {}, context, roles=dict(carried.roles)
                )
                state.reads["before", None, 1] = carried.tail
                row = carried.row
            else:
                params, one = _read_params(playlist_id, keys, actors)
                rows = await fetch_direct(conn, _READ[one], params)
                found = next((r for r in rows if r[0] == _LOCKED), None)
                row = found[1] if found is not None else ""
                state = _state(conn, playlist_id, _header(found), rows, actors, context)
            decided_on = state.header
            roles = {a: state.roles.get(a) for a in actors}
            state.one_statement = True
            for c in group:
                assert isinstance(c, QueuedCommand)
                answers.append(await state.one(c))
            if not state.committed:
                if carried is not None:
                    raise _Unread  # a refusal may be a retry's, whose record was not read
                if any(isinstance(a, DomainError) for a in answers):
                    # Its later reads may be of a later snapshot than the header's; a
                    # commit's end checks that none landed, a refusal has no end.
                    raise NeedsTransaction("refused")
                return answers  # replays only: each answers its stored result
            assert state.header is not None
            assert decided_on is not None  # a command committed on it
            if writer.keeps_checkpoint(state.pending):
                raise NeedsTransaction("checkpoint")
            tail = list(await GroupView(state).live_before(None, 1))
            written = await writer.write_end(
                conn,
                state.header,
                state.pending,
                list(state.added.values()),
                before=decided_on.version,
                unlocked=writer.Unlocked(row, roles, ids_read=carried is None),
            )
            if written is None:
                if carried is not None:
                    raise _Unread  # moved on, or an operation id was known
                raise NeedsTransaction("moved_on")
        self._carry(playlist_id, _Carried(state.header, written, tail, state.roles))
        self._committed(Outcome(state.header.id, state.header.version), _versions(answers))
        return answers

    def _carry(self, playlist_id: str, carried: _Carried) -> None:
        """Keep what a group committed as one statement left, the most recent last; at most
        :data:`CARRIED_PLAYLISTS`."""
        self._carried[playlist_id] = carried
        if len(self._carried) > CARRIED_PLAYLISTS:
            self._carried.popitem(last=False)

    async def _in_transaction(
        self, playlist_id: str, group: Sequence[Queued], context: Callable[[str], Context]
    ) -> list[Answer | BaseException]:
        """The group in one transaction, the playlist's row locked before it reads."""
        answers: list[Answer | BaseException] = []
        keys = [k for c in group for k in (c.keys if isinstance(c, QueuedBatch) else [c.key])]
        actors = list(dict.fromkeys(c.actor_id for c in group))
        async with self._db.write() as conn:
            if conn.dialect.name == "postgresql":
                state = await _lock_and_read(conn, playlist_id, keys, actors, context)
            else:
                header = await repository.get_playlist(conn, playlist_id, for_update=True)
                stored = await idempotency.stored_many(conn, keys)
                state = GroupState(playlist_id, conn, header, stored, context)
            before = state.header.version if state.header is not None else 0
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
                await writer.write_end(conn, state.header, state.pending, added, before=before)
                if state.batch_members:  # after their log rows, which they reference
                    await writer.write_batch_members(conn, playlist_id, state.batch_members)
        if state.committed:
            assert state.header is not None
            self._committed(Outcome(state.header.id, state.header.version), _versions(answers))
        return answers


CARRIED_PLAYLISTS = 4096
"""Playlists whose last one-statement commit a process keeps (:class:`_Carried`): each is
a header, an entry and a few roles; the least recently committed is forgotten first."""


@dataclass(slots=True)
class _Carried:
    """What a playlist's last group committed as one statement in this process left: the
    next group of adds decides on it without reading (module docstring, "Carried").

    Attributes:
        header: the playlist at the version that group committed.
        row: its row as that group wrote it (:attr:`~chorus.db.writer.Unlocked.row`).
        tail: its last live entry then (what an append decides on), or none.
        roles: the roles the group read or knew, by user id (adds change none).
    """

    header: Playlist
    row: str
    tail: list[Entry]
    roles: dict[str, Role | None]


class _Unread(Exception):
    """A group decided on carried state committed nothing: decide it again on a read."""


class _Drawn:
    """The handlers' contexts of a group's tries, and the ids each try draws.

    A try that wrote nothing gives its ids back, and the next try draws them again, in
    the same order, before new ones: a group decided twice makes the ids it would have
    made deciding once (``tests/integration/test_group_commit.py`` compares them with the
    commands committed one by one).
    """

    def __init__(self, context: Callable[[str], Context]) -> None:
        self._made = context
        self._given_back: deque[str] = deque()
        self._drawn: list[str] = []

    def context(self, actor_id: str) -> Context:
        made = self._made(actor_id)
        base = made.new_id

        def new_id() -> str:
            fresh = self._given_back.popleft() if self._given_back else base()
            self._drawn.append(fresh)
            return fresh

        return dataclasses.replace(made, new_id=new_id)

    def give_back(self) -> None:
        """The ids drawn since the last give-back are drawn again first."""
        self._given_back.extendleft(reversed(self._drawn))
        self._drawn = []


def _read_params(
    playlist_id: str, keys: Sequence[tuple[str, str]], actors: Sequence[str]
) -> tuple[dict[str, Any], bool]:
    """The parameters of :func:`_reads`' statements, and whether they are the ones for
    one operation id of one actor."""
    unique = list(dict.fromkeys(keys))
    params: dict[str, Any] = {
        "playlist_id": playlist_id,
        "actors": [a for a, _ in unique],
        "operations": [o for _, o in unique],
        "users": list(actors),
        "batch_member": idempotency.BATCH_MEMBER_HASH,
        "batch_result": json.dumps(idempotency.BATCH_MEMBER[1]),
    }
    one = len(unique) == 1 and len(actors) == 1
    if one:
        params.update(actor=unique[0][0], operation=unique[0][1], user=actors[0])
    return params, one


def _header(row: Any) -> Playlist | None:
    """The playlist of a row of kind :data:`_LOCKED` (``None``: no row)."""
    if row is None:
        return None
    return repository.playlist_from_row(dict(zip(_HEADER_COLUMNS, row[_HEADER_AT:], strict=True)))


async def _lock_and_read(
    conn: AsyncConnection,
    playlist_id: str,
    keys: Sequence[tuple[str, str]],
    actors: Sequence[str],
    context: Callable[[str], Context],
) -> GroupState:
    """A group's state on PostgreSQL: the header locked, and what the group reads, in
    **one** statement when nothing stands in the way (:data:`_LOCK_AND_READ`).

    What the group reads is the idempotency records of its operation ids, its
    actors' roles and the playlist's last live entry (what an append decides on);
    three statements once, each ~0.3 ms of the process's CPU through SQLAlchemy.
    One statement reads at one snapshot, taken before it locks; so it locks with
    ``SKIP LOCKED`` and also reads the header's version at that snapshot:

    * the row was locked by another transaction (the lock skipped it): the header
      is locked again, waiting (:func:`~chorus.db.repository.lock_playlist`), and the
      rest read after it (:data:`_AFTER_LOCK`), at a snapshot after that wait;
    * the locked row's version is not the snapshot's (a commit landed between the
      snapshot and the lock): the rest is read again, after the lock;
    * else nothing committed on the playlist since the snapshot (every commit that
      writes its log, entries or members bumps its version under this lock), so
      what the statement read is what a read after the lock would read.

    Run on asyncpg itself (:func:`~chorus.db.direct.fetch_in_transaction`): its values
    are SQLAlchemy's (no column has a result processor that changes what asyncpg
    returns).
    """
    params, one = _read_params(playlist_id, keys, actors)
    rows = await fetch_in_transaction(conn, _LOCK_AND_READ[one], params)
    locked: Any = next((r for r in rows if r[0] == _LOCKED), None)  # asyncpg's Record
    seen = next((r[1] for r in rows if r[0] == _SEEN), None)
    header = _header(locked)
    if locked is None and seen is not None:
        header = await repository.lock_playlist(conn, playlist_id)
        rows = await fetch_in_transaction(conn, _AFTER_LOCK[one], params)
    elif header is not None and str(header.version) != seen:
        rows = await fetch_in_transaction(conn, _AFTER_LOCK[one], params)
    return _state(conn, playlist_id, header, rows, actors, context)


def _state(
    conn: AsyncConnection,
    playlist_id: str,
    header: Playlist | None,
    rows: Sequence[Sequence[Any]],
    actors: Sequence[str],
    context: Callable[[str], Context],
) -> GroupState:
    """The group's state from the rows of :data:`_AFTER_LOCK` (or :data:`_LOCK_AND_READ`,
    whose header and version rows it passes over)."""
    stored: dict[tuple[str, str], idempotency.Stored] = {}
    roles: dict[str, Role | None] = dict.fromkeys(actors)
    tail: list[Entry] = []
    for kind, a, b, c, d, e, f, t, *_ in rows:
        if kind == 1 and c == idempotency.BATCH_MEMBER_HASH:
            # A log row of the same id wins, as in idempotency.stored: both exist only when
            # a batch and another edit took it at once (docs/api.md), and that edit's retry
            # replays it.
            stored.setdefault((a, b), idempotency.BATCH_MEMBER)
        elif kind == 1:
            stored[a, b] = idempotency.record_of_row(c, json.loads(d), json.loads(e))
        elif kind == 2:
            roles[a] = Role(b)
        elif kind == 3:
            tail.append(Entry(a, f, b, c, t))
    state = GroupState(playlist_id, conn, header, stored, context, roles=roles)
    # What GroupView.live_before(None, 1) reads: an append's neighbour.
    state.reads["before", None, 1] = tail
    return state


def _reads(one: bool, nulls: str = "") -> str:
    """The reads of a group, one ``UNION ALL`` branch each: its operation ids' records
    (kind 1), its actors' roles (2), the last live entry (3). ``one``: for one operation id
    of one actor (``:actor``, ``:operation``, ``:user``), else for arrays (``:actors``,
    ``:operations``, ``:users``). ``nulls``: the header's columns of
    :data:`_LOCK_AND_READ`, null in these rows."""
    if one:
        logged = "playlist_mutation m WHERE m.actor_id = :actor AND m.operation_id = :operation"
        held = (
            "playlist_batch_operation b WHERE b.actor_id = :actor AND b.operation_id = :operation"
        )
        users = "user_id = :user"
    else:
        keys = "unnest(CAST(:actors AS varchar[]), CAST(:operations AS varchar[])) AS k(a, o) "
        logged = (
            f"{keys} CROSS JOIN LATERAL (SELECT * FROM playlist_mutation "
            "WHERE actor_id = k.a AND operation_id = k.o LIMIT 1) AS m"
        )
        held = (
            f"{keys} CROSS JOIN LATERAL (SELECT * FROM playlist_batch_operation "
            "WHERE actor_id = k.a AND operation_id = k.o LIMIT 1) AS b"
        )
        users = "user_id = ANY(CAST(:users AS varchar[]))"
    return (
        "SELECT 1 AS kind, m.actor_id AS a, m.operation_id AS b, m.request_hash AS c, "
        "CAST(m.result AS text) AS d, CAST(m.payload AS text) AS e, NULL AS f, "
        f"CAST(NULL AS timestamptz) AS t{nulls} FROM {logged} "
        "UNION ALL SELECT 1, b.actor_id, b.operation_id, :batch_member, :batch_result, '{}', "
        f"NULL, NULL{nulls} FROM {held} "
        f"UNION ALL SELECT 2, user_id, role, NULL, NULL, NULL, NULL, NULL{nulls} "
        f"FROM playlist_member WHERE playlist_id = :playlist_id AND {users} "
        "UNION ALL (SELECT 3, entry_id, media_id, added_by, NULL, NULL, position_key, "
        f"added_at{nulls} FROM playlist_entry WHERE playlist_id = :playlist_id "
        "AND removed_at IS NULL ORDER BY position_key DESC, entry_id DESC LIMIT 1)"
    )


_HEADER_COLUMNS = [c.name for c in playlist.c]
_HEADER_AT = 8
"""Where the header's columns start in a row of :data:`_LOCK_AND_READ` (after ``kind`` and
the seven columns of :func:`_reads`)."""
_LOCKED, _SEEN = 0, 4
"""The kinds of :data:`_LOCK_AND_READ`'s own rows: the locked header, the snapshot's version."""

_AFTER_LOCK = {one: text(_reads(one)) for one in (True, False)}
"""The records of the group's operation ids (kind 1: a log row's, or
:data:`~chorus.db.idempotency.BATCH_MEMBER` for an atomic batch's later operation), its
actors' roles (2) and the last live entry (3), in the order of
:func:`chorus.db.repository.entries_page`; by whether the group holds one operation id of
one actor (the statement for one, else the one for arrays).

Each statement is prepared once per connection, and PostgreSQL keeps a *generic* plan
only when it costs no more than the plans it makes for each call's values. Two
consequences, both measured under ``bench/writes.py`` (``pg_stat_statements``,
``auto_explain``):

* With arrays, the generic plan guesses 10 keys; the plans for one key cost less, so
  PostgreSQL planned the statement again at every commit (0.2-0.3 ms of its CPU). The
  usual group, a command alone, has one key: its statement compares plain parameters,
  whose generic plan costs what the others do, and is kept.
* Each operation id is looked up on its own, by the unique index (with arrays, a
  ``LATERAL`` subquery with ``LIMIT 1``, which the planner can neither flatten nor hash).
  Written as ``(actor_id, operation_id) IN (SELECT * FROM unnest(...))``, the plan was a
  hash semi join over a sequential scan whenever it was made while the log was small (a
  fresh database, or statistics never gathered: autovacuum off), and it stayed cached
  while the log grew: every commit read the whole log (0.4 ms at 1,300 rows).
"""

_NULL_HEADER = "".join(", NULL" for _ in _HEADER_COLUMNS)
_LOCK_AND_READ = {
    one: text(
        "WITH locked AS MATERIALIZED "
        "(SELECT * FROM playlist WHERE id = :playlist_id FOR UPDATE SKIP LOCKED) "
        f"SELECT {_LOCKED} AS kind, NULL AS a, NULL AS b, NULL AS c, NULL AS d, NULL AS e, "
        "NULL AS f, CAST(NULL AS timestamptz) AS t, "
        + ", ".join(f"locked.{name} AS h_{name}" for name in _HEADER_COLUMNS)
        + " FROM locked UNION ALL "
        f"SELECT {_SEEN}, CAST(version AS text), NULL, NULL, NULL, NULL, NULL, NULL"
        f"{_NULL_HEADER} FROM playlist WHERE id = :playlist_id UNION ALL "
        + _reads(one, _NULL_HEADER)
    )
    for one in (True, False)
}
"""The header locked (kind 0, its columns ``h_<name>``; no row when another transaction
holds the lock), its version at the statement's snapshot (kind 4, in ``a``; no row when
there is no such playlist) and :data:`_AFTER_LOCK`'s rows, in one statement
(:func:`_lock_and_read`)."""

_READ = {
    one: text(
        f"SELECT {_LOCKED} AS kind, CAST(xmin AS text) AS a, NULL AS b, NULL AS c, "
        "NULL AS d, NULL AS e, NULL AS f, CAST(NULL AS timestamptz) AS t, "
        + ", ".join(f"{name} AS h_{name}" for name in _HEADER_COLUMNS)
        + " FROM playlist WHERE id = :playlist_id UNION ALL "
        + _reads(one, _NULL_HEADER)
    )
    for one in (True, False)
}
""":data:`_LOCK_AND_READ`'s rows without the lock: the header (kind 0, its row's ``xmin`` in
``a``; no row when there
is no such playlist) and :data:`_AFTER_LOCK`'s rows, at one snapshot (the one-statement
path, :meth:`GroupCommit._one_statement`)."""


def _adds(queued: Queued) -> bool:
    """Whether ``queued`` is an ``addEntries``: the command whose commit is only added
    entries and its records, which the one-statement path writes. Others would be
    decided, then decided again in a transaction (``writes_rows``)."""
    return isinstance(queued, QueuedCommand) and isinstance(queued.command, AddEntries)


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
