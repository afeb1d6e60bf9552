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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import idempotency, repository, writer
from chorus.db.engine import Database, DatabaseUnavailable, finish_even_if_cancelled
from chorus.db.idempotency import Committed
from chorus.domain.changes import MembersChanged
from chorus.domain.commands import PlaylistCommand, RevertPlaylist
from chorus.domain.errors import DomainError
from chorus.domain.handlers import Context, Decision, Outcome, decide
from chorus.domain.model import Playlist, Role


@dataclass(frozen=True, slots=True)
class QueuedCommand:
    """A command waiting in an owner queue, with its request hash."""

    command: PlaylistCommand
    actor_id: str
    digest: str

    @property
    def key(self) -> tuple[str, str]:
        """The idempotency key: operation ids are scoped to their actor."""
        return self.actor_id, self.command.operation_id


class GroupCommit:
    """The owner queue's commit (:class:`~chorus.db.owners.OwnerQueues`' ``commit``).

    Args:
        db: the database.
        context: the handlers' context of an actor id (clock, ids, limits).
        committed: called with the group's last outcome and how many commands
            committed, after the transaction committed (never for replays).
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
        self, playlist_id: str, group: Sequence[QueuedCommand]
    ) -> list[Committed | BaseException]:
        """One answer per command of ``group``, in order; never raises."""
        try:
            return await finish_even_if_cancelled(self._group(playlist_id, group))
        except DatabaseUnavailable as error:
            return [error] * len(group)
        except Exception as error:
            if len(group) > 1:
                # Nothing of the group committed (or all of it, if COMMIT lost the
                # connection, and then each retry replays): one by one, the command
                # at fault fails alone.
                return [a for c in group for a in await self(playlist_id, [c])]
            if isinstance(error, IntegrityError):  # a twin committed in another transaction
                (only,) = group
                try:
                    return [
                        await idempotency.replay_after_race(
                            self._db, error, only.actor_id, only.command.operation_id, only.digest
                        )
                    ]
                except Exception as replay_error:
                    return [replay_error]
            return [error]

    async def _group(
        self, playlist_id: str, group: Sequence[QueuedCommand]
    ) -> list[Committed | BaseException]:
        answers: list[Committed | BaseException] = []
        pending: list[writer.Record] = []
        """Log rows and outbox events not written yet (they wait for the group's end)."""
        committed: dict[tuple[str, str], idempotency.Stored] = {}
        """This group's commits: idempotency key → (request hash, stored result)."""
        async with self._db.write() as conn:
            header = await repository.get_playlist(conn, playlist_id, for_update=True)
            stored = await idempotency.stored_many(conn, [c.key for c in group])
            roles: dict[str, Role | None] = {}
            for c in group:
                try:
                    record = stored.get(c.key) or committed.get(c.key)
                    if replay := idempotency.replay(record, c.digest, c.command.operation_id):
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
        c: QueuedCommand,
        header: Playlist | None,
        roles: dict[str, Role | None],
        pending: list[writer.Record],
    ) -> Decision:
        """Decide ``c`` on ``header``, write its entry and member rows, add its records."""
        view = repository.SqlPlaylistView(conn, c.command.playlist_id)
        context = self._context(c.actor_id)
        decision = await decide(c.command, header, roles[c.actor_id], view, context)
        await writer.write_decision(
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
