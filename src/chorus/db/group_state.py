"""A group commit's transaction as its commands go by, and the entries it reads.

:class:`GroupState` holds what the group has decided and not written yet;
:class:`GroupView` is the view of the playlist its handlers read: the rows
of the group's last write with the entries added since merged in.
:mod:`chorus.db.group_commit` runs the group; :mod:`chorus.db.batches` applies a
batch inside one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import idempotency, repository, writer
from chorus.db.idempotency import Committed
from chorus.db.owner_queue_items import QueuedCommand
from chorus.domain.changes import Change, MembersChanged
from chorus.domain.commands import RevertPlaylist
from chorus.domain.decisions import Context, Decision
from chorus.domain.errors import DomainError
from chorus.domain.handlers import decide
from chorus.domain.model import Entry, Playlist, Role
from chorus.domain.ports import SortKey

__all__ = ["GroupState", "GroupView", "NeedsTransaction"]

T = TypeVar("T")


class NeedsTransaction(Exception):
    """A group read outside a transaction cannot be committed as one statement
    (:mod:`chorus.db.group_commit`): nothing was written; it is run again in one.

    Attributes:
        reason: a label of ``chorus_group_commit_fallbacks_total``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    batch_members: list[tuple[str, str, int]] = field(default_factory=list)
    """(actor id, operation id, version) of each operation of the group's atomic batches
    after the first, written after the log rows (``playlist_batch_operation``)."""
    one_statement: bool = False
    """``conn`` is outside a transaction, the playlist not locked: everything is written
    by the end's one statement, so a command that writes rows before it (anything but
    added entries) raises :class:`NeedsTransaction` before it writes."""

    async def flush(self) -> None:
        """Write the entries added and not written yet; forget the reads."""
        if self.added and self.one_statement:
            raise NeedsTransaction("writes_rows")
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
                if self.one_statement:
                    raise NeedsTransaction("writes_rows")
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
        if not deferred and self.one_statement:
            raise NeedsTransaction("writes_rows")
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
