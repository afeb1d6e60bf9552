"""The unit of work: one command, one transaction, commit is the acknowledgement.

For a command on a playlist, inside one transaction (DESIGN §3):

1. lock the playlist row (``SELECT … FOR UPDATE``; SQLite: ``BEGIN IMMEDIATE``
   already made this the only writer);
2. look the operation id up: a retry of the same request returns the stored
   result (``replayed``), the same id with another request is
   ``OPERATION_ID_REUSED``. This comes before the access checks so that the
   retry of a delete, or of a command whose author lost access since, still
   gets its original answer; operation ids are scoped to their actor, so
   nothing leaks;
3. let the domain decide (membership, base version, validation, placement);
4. write entry rows, the header (``version + 1``), the log row and the outbox
   event, and commit.

Concurrent duplicates of one operation id queue on the row lock (or, for a
create, on the unique index), and the late ones find the first one's commit
and replay it. A domain error rolls everything back.

**Group commit** (the default; ``group_commit=False`` keeps the one-command
path above, which stays the reference): commands on an existing playlist
wait in its owner queue (:mod:`chorus.db.owners`), and the owner commits
what is queued in **one** transaction: lock the row once, look every
operation id up in one query, then for each command in queue order decide
against the header as the previous one left it and write its entry and
member rows (the next command reads them); at the end write the header once
and every log row and outbox event, one ``INSERT`` each. Each command keeps
its own version, log row, outbox event and idempotency record; a command the
domain refuses gets its error and the others go on; a duplicate inside the
group replays the first, a reused id is refused, exactly as if they had been
committed one by one in that order. If the group's transaction fails, it
left nothing (or, when the connection was lost during COMMIT, possibly all
of it): each command is then retried in a transaction of its own, where a
retry of a command that did commit replays it, so no group is ever partly
committed, and every command gets its own answer. The database being
unavailable is answered to each command at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import repository, writer
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.db.owners import OwnerQueues
from chorus.db.tables import playlist_mutation
from chorus.db.writer import outcome_from_json, write_decision
from chorus.domain import library
from chorus.domain.changes import MembersChanged
from chorus.domain.commands import (
    CreatePlaylist,
    LikeMedia,
    PlaylistCommand,
    RevertPlaylist,
    UnlikeMedia,
    request_hash,
)
from chorus.domain.errors import DomainError, OperationIdReused
from chorus.domain.handlers import (
    Context,
    Decision,
    Outcome,
    create_liked_songs,
    create_playlist,
    decide,
)
from chorus.domain.limits import DEFAULT_LIMITS, Limits
from chorus.domain.model import Playlist, Role
from chorus.domain.validation import check_operation_id
from chorus.metrics import COMMITS

T = TypeVar("T")

OWNER_QUEUE_SIZE = 1024
"""Commands that may wait per playlist and process (``CHORUS_OWNER_QUEUE_SIZE``)."""
OWNER_QUEUE_PER_USER = 256
"""Of which one user's at most (``CHORUS_OWNER_QUEUE_PER_USER``)."""
MAX_GROUP = 64
"""Commands committed in one transaction at most: bounds its time and its lock."""


def new_id() -> str:
    """A random id: 32 lowercase hex digits (UUID4)."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


async def _finish_even_if_cancelled(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its commit or rollback even when the caller is cancelled.

    A transaction torn down mid-statement can leave the SQLite writer's lock
    held until garbage collection, stalling every other writer; shielded, the
    transaction always ends cleanly, and the client's retry with the same
    operation id replays whatever it committed.
    """
    return await asyncio.shield(work)


_LIKED_SONGS_HASH = hashlib.sha256(b"CreateLikedSongs").hexdigest()
"""The request hash stored with version 0 of a Liked Songs (no client sends it)."""


@dataclass(frozen=True, slots=True)
class Committed:
    """The answer to a command: its outcome, and whether it was a replay."""

    outcome: Outcome
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class _Command:
    """A command waiting in an owner queue, with its request hash."""

    command: PlaylistCommand
    actor_id: str
    digest: str

    @property
    def key(self) -> tuple[str, str]:
        """The idempotency key: operation ids are scoped to their actor."""
        return self.actor_id, self.command.operation_id


class PlaylistStore:
    """Runs commands against a :class:`Database`.

    Args:
        db: the database.
        limits: the limits commands are checked against.
        clock: the commit time source (UTC).
        id_factory: makes playlist and entry ids.
        on_commit: called with ``(playlist_id, version)`` after each commit, not after
            a replay (wakes the outbox relay, bumps the cache's head version);
            after a group, once, with its last version.
        group_commit: commit a playlist's concurrent commands in groups
            through its owner queue (``CHORUS_GROUP_COMMIT``); ``False``: one
            transaction per command.
        queue_size, queue_per_user, max_group: the owner queue's bounds
            (:class:`~chorus.db.owners.OwnerQueues`).
        library_secret: the key of Liked Songs ids (:mod:`chorus.domain.library`);
            ``None``: this store keeps no Liked Songs.
    """

    def __init__(
        self,
        db: Database,
        *,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], datetime] = utcnow,
        id_factory: Callable[[], str] = new_id,
        on_commit: Callable[[str, int], None] | None = None,
        group_commit: bool = True,
        queue_size: int = OWNER_QUEUE_SIZE,
        queue_per_user: int = OWNER_QUEUE_PER_USER,
        max_group: int = MAX_GROUP,
        library_secret: bytes | None = None,
    ) -> None:
        self.db = db
        self._library_secret = library_secret
        self.limits = limits
        self._clock = clock
        self._new_id = id_factory
        self._on_commit = on_commit
        self.owners: OwnerQueues[_Command, Committed] | None = (
            OwnerQueues(
                self._commit_group, size=queue_size, per_user=queue_per_user, max_group=max_group
            )
            if group_commit
            else None
        )

    def _context(self, actor_id: str) -> Context:
        return Context(actor_id, self._clock(), self._new_id, self.limits)

    async def create(self, command: CreatePlaylist, actor_id: str) -> Committed:
        """Create a playlist owned by ``actor_id``; version 0.

        Raises:
            DomainError: invalid input, or ``OPERATION_ID_REUSED``.
        """
        return await _finish_even_if_cancelled(self._create(command, actor_id))

    async def execute(self, command: PlaylistCommand, actor_id: str) -> Committed:
        """Run a command on an existing playlist in one transaction (maybe its group's).

        Raises:
            DomainError: any expected failure; nothing was committed.
            RateLimited: the playlist's owner queue (or the actor's share of it)
                is full; nothing was queued.
            DatabaseUnavailable: the database cannot be reached.
        """
        if self.owners is None:
            return await _finish_even_if_cancelled(self._execute(command, actor_id))
        check_operation_id(command.operation_id, self.limits)
        if (
            isinstance(command, LikeMedia | UnlikeMedia)
            and self._library_secret is not None
            and command.playlist_id == self.liked_songs_id(actor_id)
        ):
            await self.ensure_liked_songs(actor_id)  # a group locks a row that exists
        waiting = _Command(command, actor_id, request_hash(command))
        return await self.owners.submit(command.playlist_id, actor_id, waiting)

    @property
    def keeps_liked_songs(self) -> bool:
        """Whether this store was given a library secret (Liked Songs ids need one)."""
        return self._library_secret is not None

    def liked_songs_id(self, user_id: str) -> str:
        """The id of ``user_id``'s Liked Songs, whether it exists yet or not.

        Raises:
            RuntimeError: the store was made without a library secret.
        """
        if self._library_secret is None:
            raise RuntimeError("this store has no library secret")
        return library.liked_songs_id(self._library_secret, user_id)

    async def ensure_liked_songs(self, user_id: str) -> str:
        """``user_id``'s Liked Songs id, after committing its version 0 if it was missing.

        Concurrent first uses commit version 0 once: the loser of the race
        finds the winner's row (SQLite has one writer; PostgreSQL's primary
        key refuses the second insert).
        """
        playlist_id = self.liked_songs_id(user_id)
        async with self.db.read() as conn:
            if await repository.get_playlist(conn, playlist_id) is not None:
                return playlist_id
        await _finish_even_if_cancelled(self._create_liked_songs(playlist_id, user_id))
        return playlist_id

    async def _create_liked_songs(self, playlist_id: str, user_id: str) -> Committed:
        decision = create_liked_songs(playlist_id, self._context(user_id))
        try:
            async with self.db.write() as conn:
                if await repository.get_playlist(conn, playlist_id, for_update=True) is not None:
                    return Committed(decision.outcome, replayed=True)
                await self._write(
                    conn, decision, library.CREATE_OPERATION_ID, user_id, _LIKED_SONGS_HASH
                )
        except IntegrityError:
            return Committed(decision.outcome, replayed=True)  # a concurrent first use won
        self._committed(decision.outcome)
        return Committed(decision.outcome)

    async def replay(
        self, command: CreatePlaylist | PlaylistCommand, actor_id: str
    ) -> Committed | None:
        """The stored result of ``command`` if ``actor_id`` already committed it, else ``None``.

        One indexed read, without the playlist lock: a commit that lands
        after it is not seen, so a ``None`` means "not committed when looked
        up", which is what a refusal (``RATE_LIMITED``) may then truthfully
        say. :meth:`execute` and :meth:`create` look up again under the lock.

        Raises:
            InvalidInput: a malformed operation id.
            OperationIdReused: the operation id committed a different request.
        """
        check_operation_id(command.operation_id, self.limits)
        async with self.db.read() as conn:
            return await self._stored(conn, actor_id, command.operation_id, request_hash(command))

    async def _create(self, command: CreatePlaylist, actor_id: str) -> Committed:
        check_operation_id(command.operation_id, self.limits)
        digest = request_hash(command)
        try:
            async with self.db.write() as conn:
                if stored := await self._stored(conn, actor_id, command.operation_id, digest):
                    return stored
                decision = create_playlist(command, self._new_id(), self._context(actor_id))
                await self._write(conn, decision, command.operation_id, actor_id, digest)
            self._committed(decision.outcome)
            return Committed(decision.outcome)
        except IntegrityError as exc:
            return await self._replay_after_race(exc, actor_id, command.operation_id, digest)

    async def _execute(self, command: PlaylistCommand, actor_id: str) -> Committed:
        check_operation_id(command.operation_id, self.limits)
        digest = request_hash(command)
        if (
            isinstance(command, LikeMedia | UnlikeMedia)
            and self._library_secret is not None
            and command.playlist_id == self.liked_songs_id(actor_id)
        ):
            await self.ensure_liked_songs(actor_id)
        try:
            async with self.db.write() as conn:
                header = await repository.get_playlist(conn, command.playlist_id, for_update=True)
                if stored := await self._stored(conn, actor_id, command.operation_id, digest):
                    return stored
                role = await repository.get_role(conn, command.playlist_id, actor_id)
                view = repository.SqlPlaylistView(conn, command.playlist_id)
                decision = await decide(command, header, role, view, self._context(actor_id))
                await self._write(conn, decision, command.operation_id, actor_id, digest)
            self._committed(decision.outcome)
            return Committed(decision.outcome)
        except IntegrityError as exc:
            return await self._replay_after_race(exc, actor_id, command.operation_id, digest)

    def _committed(self, outcome: Outcome, count: int = 1) -> None:
        COMMITS.inc(count)
        if self._on_commit is not None:
            self._on_commit(outcome.playlist_id, outcome.version)

    async def _commit_group(
        self, playlist_id: str, group: Sequence[_Command]
    ) -> list[Committed | BaseException]:
        """The owner queue's commit: one answer per command, in order; never raises."""
        try:
            return await _finish_even_if_cancelled(self._group(playlist_id, group))
        except DatabaseUnavailable as error:
            return [error] * len(group)
        except Exception as error:
            if len(group) > 1:
                # Nothing of the group committed (or all of it, if COMMIT lost the
                # connection, and then each retry replays): one by one, the command
                # at fault fails alone.
                return [a for c in group for a in await self._commit_group(playlist_id, [c])]
            if isinstance(error, IntegrityError):  # a twin committed in another transaction
                (only,) = group
                try:
                    return [
                        await self._replay_after_race(
                            error, only.actor_id, only.command.operation_id, only.digest
                        )
                    ]
                except Exception as replay_error:
                    return [replay_error]
            return [error]

    async def _group(
        self, playlist_id: str, group: Sequence[_Command]
    ) -> list[Committed | BaseException]:
        answers: list[Committed | BaseException] = []
        pending: list[writer.Record] = []
        """Log rows and outbox events not written yet (they wait for the group's end)."""
        committed: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        """This group's commits: idempotency key → (request hash, stored result)."""
        async with self.db.write() as conn:
            header = await repository.get_playlist(conn, playlist_id, for_update=True)
            stored = await self._stored_many(conn, [c.key for c in group])
            roles: dict[str, Role | None] = {}
            for c in group:
                try:
                    if replay := _replay(c, stored.get(c.key) or committed.get(c.key)):
                        answers.append(replay)
                        continue
                    if c.actor_id not in roles:
                        roles[c.actor_id] = await repository.get_role(conn, playlist_id, c.actor_id)
                    if isinstance(c.command, RevertPlaylist):
                        # It reads the log: the group's versions so far must be in it.
                        await writer.write_records(conn, pending)
                        pending = []
                    decision = await self._decide_and_write(conn, c, header, roles, pending)
                except DomainError as error:
                    answers.append(error)
                    continue
                header = decision.playlist
                committed[c.key] = (c.digest, pending[-1].log["result"])
                answers.append(Committed(decision.outcome))
            if committed:
                assert header is not None
                await writer.write_header(conn, header)
                await writer.write_records(conn, pending)
        if committed:
            assert header is not None
            self._committed(Outcome(header.id, header.version), len(committed))
        return answers

    async def _decide_and_write(
        self,
        conn: AsyncConnection,
        c: _Command,
        header: Playlist | None,
        roles: dict[str, Role | None],
        pending: list[writer.Record],
    ) -> Decision:
        """Decide ``c`` on ``header``, write its entry and member rows, add its records."""
        view = repository.SqlPlaylistView(conn, c.command.playlist_id)
        context = self._context(c.actor_id)
        decision = await decide(c.command, header, roles[c.actor_id], view, context)
        await write_decision(
            conn,
            decision,
            operation_id=c.command.operation_id,
            actor_id=c.actor_id,
            request_hash=c.digest,
            group=pending,
        )
        for change in decision.changes:
            if isinstance(change, MembersChanged):  # the next command reads the new role
                roles.pop(change.user_id, None)
        return decision

    async def _write(
        self, conn: AsyncConnection, decision: Decision, operation_id: str, actor: str, digest: str
    ) -> None:
        await write_decision(
            conn, decision, operation_id=operation_id, actor_id=actor, request_hash=digest
        )

    async def _stored(
        self, conn: AsyncConnection, actor_id: str, operation_id: str, digest: str
    ) -> Committed | None:
        row = (
            await conn.execute(
                select(playlist_mutation.c.request_hash, playlist_mutation.c.result).where(
                    playlist_mutation.c.actor_id == actor_id,
                    playlist_mutation.c.operation_id == operation_id,
                )
            )
        ).first()
        if row is None:
            return None
        if row.request_hash != digest:
            raise _reused(operation_id)
        return Committed(outcome_from_json(row.result), replayed=True)

    async def _stored_many(
        self, conn: AsyncConnection, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
        """The stored ``(request_hash, result)`` of each committed ``(actor, operation id)``."""
        rows = await conn.execute(
            select(
                playlist_mutation.c.actor_id,
                playlist_mutation.c.operation_id,
                playlist_mutation.c.request_hash,
                playlist_mutation.c.result,
            ).where(
                tuple_(playlist_mutation.c.actor_id, playlist_mutation.c.operation_id).in_(
                    list(dict.fromkeys(keys))
                )
            )
        )
        return {(r.actor_id, r.operation_id): (r.request_hash, r.result) for r in rows}

    async def _replay_after_race(
        self, error: IntegrityError, actor_id: str, operation_id: str, digest: str
    ) -> Committed:
        """A concurrent twin committed first: answer with its stored result.

        Re-raises ``error`` when there is no twin (another constraint failed).
        """
        async with self.db.read() as conn:
            stored = await self._stored(conn, actor_id, operation_id, digest)
        if stored is None:
            raise error
        return stored


def _reused(operation_id: str) -> OperationIdReused:
    return OperationIdReused(
        f"operationId {operation_id!r} was already used for a different request",
        field=("operationId",),
    )


def _replay(c: _Command, stored: tuple[str, dict[str, Any]] | None) -> Committed | None:
    """The stored answer to ``c`` if its operation id committed before (in an earlier
    transaction or earlier in this group), else ``None``.

    Raises:
        OperationIdReused: it committed for a different request.
    """
    if stored is None:
        return None
    digest, result = stored
    if digest != c.digest:
        raise _reused(c.command.operation_id)
    return Committed(outcome_from_json(result), replayed=True)
