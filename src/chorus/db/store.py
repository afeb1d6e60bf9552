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
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.tables import playlist_mutation
from chorus.db.writer import outcome_from_json, write_decision
from chorus.domain import library
from chorus.domain.commands import (
    CreatePlaylist,
    LikeMedia,
    PlaylistCommand,
    UnlikeMedia,
    request_hash,
)
from chorus.domain.errors import OperationIdReused
from chorus.domain.handlers import (
    Context,
    Decision,
    Outcome,
    create_liked_songs,
    create_playlist,
    decide,
)
from chorus.domain.limits import DEFAULT_LIMITS, Limits
from chorus.domain.validation import check_operation_id
from chorus.metrics import COMMITS


def new_id() -> str:
    """A random id: 32 lowercase hex digits (UUID4)."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


async def _finish_even_if_cancelled(work: Coroutine[Any, Any, Committed]) -> Committed:
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


class PlaylistStore:
    """Runs commands against a :class:`Database`.

    Args:
        db: the database.
        limits: the limits commands are checked against.
        clock: the commit time source (UTC).
        id_factory: makes playlist and entry ids.
        on_commit: called with ``(playlist_id, version)`` after each commit, not after
            a replay (wakes the outbox relay, bumps the cache's head version).
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
        library_secret: bytes | None = None,
    ) -> None:
        self.db = db
        self._library_secret = library_secret
        self.limits = limits
        self._clock = clock
        self._new_id = id_factory
        self._on_commit = on_commit

    def _context(self, actor_id: str) -> Context:
        return Context(actor_id, self._clock(), self._new_id, self.limits)

    async def create(self, command: CreatePlaylist, actor_id: str) -> Committed:
        """Create a playlist owned by ``actor_id``; version 0.

        Raises:
            DomainError: invalid input, or ``OPERATION_ID_REUSED``.
        """
        return await _finish_even_if_cancelled(self._create(command, actor_id))

    async def execute(self, command: PlaylistCommand, actor_id: str) -> Committed:
        """Run a command on an existing playlist in one transaction.

        Raises:
            DomainError: any expected failure; nothing was committed.
        """
        return await _finish_even_if_cancelled(self._execute(command, actor_id))

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

    def _committed(self, outcome: Outcome) -> None:
        COMMITS.inc()
        if self._on_commit is not None:
            self._on_commit(outcome.playlist_id, outcome.version)

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
            raise OperationIdReused(
                f"operationId {operation_id!r} was already used for a different request",
                field=("operationId",),
            )
        return Committed(outcome_from_json(row.result), replayed=True)

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
