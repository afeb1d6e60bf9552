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
what is queued in one transaction (:mod:`chorus.db.group_commit`), exactly as if
they had been committed one by one in queue order. The idempotency record a
retry is answered from is :mod:`chorus.db.idempotency`'s.

Operation ids are decided before a command gets here, once: by the
mutation's admission (:mod:`chorus.resolvers.admission`), which refuses a
malformed one before any look-up; the domain's handlers refuse one too, for
callers that come straight here (an importer, a bench).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import batches, idempotency, repository, writer
from chorus.db.engine import Database, finish_even_if_cancelled
from chorus.db.group_commit import GroupCommit
from chorus.db.idempotency import Committed
from chorus.db.owner_queue_items import (
    Answer,
    BatchAnswer,
    Queued,
    QueuedBatch,
    QueuedCommand,
    weight,
)
from chorus.db.owners import OwnerQueues
from chorus.domain import library
from chorus.domain.batch import Batch, check_batch
from chorus.domain.commands import (
    CreatePlaylist,
    LikeMedia,
    PlaylistCommand,
    UnlikeMedia,
    request_hash,
)
from chorus.domain.decisions import Context, Decision, Outcome
from chorus.domain.errors import DomainError, RateLimited
from chorus.domain.handlers import create_liked_songs, create_playlist, decide
from chorus.domain.limits import DEFAULT_LIMITS, Limits
from chorus.domain.model import role_can_read
from chorus.metrics import COMMITS
from chorus.tracing import current_traceparent

# Committed is the idempotency module's; its callers take it from here, with the store.
__all__ = ["BatchAnswer", "Committed", "PlaylistStore"]

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


_LIKED_SONGS_HASH = hashlib.sha256(b"CreateLikedSongs").hexdigest()
"""The request hash stored with version 0 of a Liked Songs (no client sends it)."""


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
        self._groups = GroupCommit(db, self._context, self._committed)
        self.owners: OwnerQueues[Queued, Answer] | None = (
            OwnerQueues(
                self._groups,
                size=queue_size,
                per_user=queue_per_user,
                max_group=max_group,
                weight=weight,
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
        return await finish_even_if_cancelled(self._create(command, actor_id))

    async def execute(self, command: PlaylistCommand, actor_id: str) -> Committed:
        """Run a command on an existing playlist in one transaction (maybe its group's).

        Raises:
            DomainError: any expected failure; nothing was committed.
            RateLimited: the playlist's owner queue (or the actor's share of it)
                is full and ``command`` did not commit before; nothing was queued.
            DatabaseUnavailable: the database cannot be reached.
        """
        if self.owners is None:
            return await finish_even_if_cancelled(self._execute(command, actor_id))
        if (
            isinstance(command, LikeMedia | UnlikeMedia)
            and self._library_secret is not None
            and command.playlist_id == self.liked_songs_id(actor_id)
        ):
            await self.ensure_liked_songs(actor_id)  # a group locks a row that exists
        waiting = QueuedCommand(command, actor_id, request_hash(command))
        try:
            answer = await self.owners.submit(command.playlist_id, actor_id, waiting)
        except RateLimited:
            # The queue is full, but a retry of what committed needs no place in it:
            # answered from its record (one indexed read), as past the per-minute limit.
            replayed = await self.replay(command, actor_id)
            if replayed is None:
                raise
            return replayed
        assert isinstance(answer, Committed)
        return answer

    async def apply_batch(
        self,
        batch: Batch,
        actor_id: str,
        refused: Mapping[int, DomainError] | None = None,
        *,
        checked: bool = False,
    ) -> BatchAnswer:
        """Apply a batch of edits (``applyOperations``) in order.

        Through the owner queue like any command, as one item weighing its
        operations, in its group's transaction (:mod:`chorus.db.batches`).
        Without group commit, the plain way: each operation of a batch that
        is not atomic in a transaction of its own, as :meth:`execute` commits
        a command; an atomic batch in a transaction of its own. ``refused``:
        operations (by index) refused before, answered with their error unless
        they committed already.

        Returns:
            One answer per operation (a commit, maybe replayed, or its domain
            error) and the playlist's version once the batch was applied.

        ``checked``: ``batch`` already passed :func:`chorus.domain.batch.check_batch`
        (:func:`chorus.resolvers.batch.apply_operations` checks it before charging
        the rate limit), so it is not checked again.

        Raises:
            InvalidInput, LimitExceeded: the batch is malformed as a whole
                (:func:`chorus.domain.batch.check_batch`); nothing was applied.
            RateLimited: the playlist's owner queue is full; nothing was queued.
            DatabaseUnavailable: the database cannot be reached.
        """
        if not checked:
            check_batch(batch, self.limits)
        queued = QueuedBatch(batch, actor_id, refused or {})
        if self.owners is not None:
            answer = await self.owners.submit(batch.playlist_id, actor_id, queued)
        elif not batch.atomic:
            answer = await self._apply_plain(queued)
        else:
            (alone,) = await finish_even_if_cancelled(self._groups(batch.playlist_id, [queued]))
            if isinstance(alone, BaseException):
                raise alone
            answer = alone
        assert isinstance(answer, BatchAnswer)
        return answer

    async def _apply_plain(self, queued: QueuedBatch) -> BatchAnswer:
        """A batch that is not atomic, one command and one transaction per operation."""

        async def one(c: QueuedCommand, refusal: DomainError | None) -> Committed | DomainError:
            try:
                run = self._execute(c.command, c.actor_id, refusal)
                return await finish_even_if_cancelled(run)
            except DomainError as error:
                return error

        answers = await batches.one_by_one(queued, one)
        # The version only to someone who may read the playlist (as batches.apply).
        playlist_id, actor_id = queued.batch.playlist_id, queued.actor_id
        async with self.db.read() as conn:
            header = await repository.get_playlist(conn, playlist_id)
            role = await repository.get_role(conn, playlist_id, actor_id) if header else None
        visible = header is not None and role_can_read(role, header)
        return BatchAnswer(tuple(answers), header.version if header and visible else None)

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
        await finish_even_if_cancelled(self._create_liked_songs(playlist_id, user_id))
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
        ``command``'s operation id was admitted (:mod:`chorus.resolvers.admission`).

        Raises:
            OperationIdReused: the operation id committed a different request.
        """
        async with self.db.read() as conn:
            return await idempotency.stored(
                conn, actor_id, command.operation_id, request_hash(command)
            )

    async def _create(self, command: CreatePlaylist, actor_id: str) -> Committed:
        async def settle(conn: AsyncConnection, digest: str) -> Decision | Committed:
            if stored := await idempotency.stored(conn, actor_id, command.operation_id, digest):
                return stored
            return create_playlist(command, self._new_id(), self._context(actor_id))

        return await self._commit_alone(command, actor_id, settle)

    async def _execute(
        self, command: PlaylistCommand, actor_id: str, refusal: DomainError | None = None
    ) -> Committed:
        """``command`` in a transaction of its own; ``refusal``: raised unless it replays."""
        if (
            isinstance(command, LikeMedia | UnlikeMedia)
            and self._library_secret is not None
            and command.playlist_id == self.liked_songs_id(actor_id)
        ):
            await self.ensure_liked_songs(actor_id)

        async def settle(conn: AsyncConnection, digest: str) -> Decision | Committed:
            header = await repository.get_playlist(conn, command.playlist_id, for_update=True)
            if stored := await idempotency.stored(conn, actor_id, command.operation_id, digest):
                return stored
            if refusal is not None:
                raise refusal
            role = await repository.get_role(conn, command.playlist_id, actor_id)
            view = repository.SqlPlaylistView(conn, command.playlist_id)
            return await decide(command, header, role, view, self._context(actor_id))

        return await self._commit_alone(command, actor_id, settle)

    async def _commit_alone(
        self,
        command: CreatePlaylist | PlaylistCommand,
        actor_id: str,
        settle: Callable[[AsyncConnection, str], Awaitable[Decision | Committed]],
    ) -> Committed:
        """``command`` in a write transaction of its own (steps 1-4 above).

        ``settle(conn, request_hash)`` takes the lock and answers, inside the
        transaction, a retry's stored result or the decision to write. A
        concurrent commit of the same operation id (the unique index) is
        answered as a replay of it.
        """
        digest = request_hash(command)
        try:
            async with self.db.write() as conn:
                settled = await settle(conn, digest)
                if isinstance(settled, Committed):
                    return settled
                await self._write(conn, settled, command.operation_id, actor_id, digest)
            self._committed(settled.outcome)
            return Committed(settled.outcome)
        except IntegrityError as exc:
            return await idempotency.replay_after_race(
                self.db, exc, actor_id, command.operation_id, digest
            )

    def _committed(self, outcome: Outcome, count: int = 1) -> None:
        COMMITS.inc(count)
        if self._on_commit is not None:
            self._on_commit(outcome.playlist_id, outcome.version)

    async def _write(
        self, conn: AsyncConnection, decision: Decision, operation_id: str, actor: str, digest: str
    ) -> None:
        await writer.write_decision(
            conn,
            decision,
            operation_id=operation_id,
            actor_id=actor,
            request_hash=digest,
            trace_context=current_traceparent(),
        )
