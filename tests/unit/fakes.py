"""An in-memory playlist store for unit tests of the domain (no server).

It answers the :class:`~chorus.domain.ports.PlaylistView` questions from a
:class:`~chorus.domain.fold.PlaylistState` and applies decisions the way
storage does: through the canonical changes, after a round trip through the
wire format. Every commit also checks what storage relies on: the versions
follow one another, every key written is a valid position key, and no two live
entries share a key.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Coroutine, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, assert_never

from chorus.domain import changes as ch
from chorus.domain import positions
from chorus.domain.changes import ChangeWire, decode_change, encode_change
from chorus.domain.commands import CreatePlaylist, PlaylistCommand, SetMemberRole
from chorus.domain.decisions import Context, Decision, Outcome
from chorus.domain.fold import PlaylistState
from chorus.domain.handlers import create_liked_songs, create_playlist, decide
from chorus.domain.limits import DEFAULT_LIMITS, Limits
from chorus.domain.model import Entry, Role, Visibility

SortKey = tuple[str, str]
T = TypeVar("T")

PLAYLIST_ID = "p1"
START = datetime(2026, 1, 1, tzinfo=UTC)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the fake never does) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("the coroutine suspended")


class MemoryPlaylist:
    """One playlist, its log and an ordered index of live entries.

    ``log`` holds ``(version, [wire change, ...])`` from version 0, as the
    mutation log does; ``floor`` is the oldest version whose changes are still
    kept (retention), so ``changes_since(v)`` answers ``None`` when
    ``v + 1 < floor``.
    """

    def __init__(
        self,
        owner: str = "owner",
        title: str = "Mix",
        *,
        visibility: Visibility = Visibility.PRIVATE,
        collaborative: bool = False,
        description: str | None = None,
        liked_songs: bool = False,
    ) -> None:
        self.limits: Limits = DEFAULT_LIMITS
        self._ids = (f"e{n:06d}" for n in itertools.count())
        self._ops = (f"op-{n}" for n in itertools.count())
        self._clock = (START + timedelta(seconds=n) for n in itertools.count())
        if liked_songs:
            decision = create_liked_songs(PLAYLIST_ID, self.context(owner))
        else:
            command = CreatePlaylist("op-create", title, description, visibility, collaborative)
            decision = create_playlist(command, PLAYLIST_ID, self.context(owner))
        self.created_at = decision.playlist.created_at
        self.state = PlaylistState.create(PLAYLIST_ID, decision.changes[0])  # type: ignore[arg-type]
        assert self.state.playlist == decision.playlist
        self.log: list[tuple[int, list[ChangeWire]]] = [
            (0, [encode_change(c) for c in decision.changes])
        ]
        self.committed_at: dict[int, datetime] = {0: self.created_at}
        self.floor = 0
        self._index: list[SortKey] = []
        self.reads = 0

    def context(self, actor: str) -> Context:
        return Context(
            actor_id=actor,
            now=next(self._clock),
            new_id=lambda: next(self._ids),
            limits=self.limits,
        )

    def op(self) -> str:
        """A fresh operation id."""
        return next(self._ops)

    @property
    def version(self) -> int:
        return self.state.playlist.version

    # --- the port --------------------------------------------------------

    async def entries(self, entry_ids: Collection[str]) -> dict[str, Entry]:
        self.reads += len(entry_ids)
        return {i: self.state.entries[i] for i in entry_ids if i in self.state.entries}

    async def live_before(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        i = len(self._index) if position is None else bisect.bisect_left(self._index, position)
        out: list[Entry] = []
        while i > 0 and len(out) < limit:
            i -= 1
            if self._index[i][1] not in exclude:
                out.append(self.state.entries[self._index[i][1]])
        self.reads += len(out)
        return out

    async def live_after(
        self, position: SortKey | None, limit: int, exclude: Collection[str] = ()
    ) -> Sequence[Entry]:
        i = 0 if position is None else bisect.bisect_right(self._index, position)
        out: list[Entry] = []
        while i < len(self._index) and len(out) < limit:
            if self._index[i][1] not in exclude:
                out.append(self.state.entries[self._index[i][1]])
            i += 1
        self.reads += len(out)
        return out

    async def live_with_media(self, media_id: str) -> Sequence[Entry]:
        found = [e for e in self.live() if e.media_id == media_id]
        self.reads += len(found)
        return found

    async def role_of(self, user_id: str) -> Role | None:
        return self.state.members.get(user_id)

    async def changes_since(self, version: int) -> Sequence[tuple[int, Sequence[ch.Change]]] | None:
        if version + 1 < self.floor:
            return None
        return [(v, [decode_change(c) for c in changes]) for v, changes in self.log if v > version]

    # --- commands ---------------------------------------------------------

    async def execute(self, command: PlaylistCommand, actor: str = "owner") -> Decision:
        role = self.state.members.get(actor)
        decision = await decide(command, self.state.playlist, role, self, self.context(actor))
        self.commit(decision)
        return decision

    def execute_sync(self, command: PlaylistCommand, actor: str = "owner") -> Decision:
        return run_sync(self.execute(command, actor))

    async def grant(self, user_id: str, role: Role) -> None:
        """The owner makes ``user_id`` a member with ``role``."""
        await self.execute(SetMemberRole(PLAYLIST_ID, self.op(), self.version, user_id, role))

    def commit(self, decision: Decision) -> Outcome:
        version = decision.outcome.version
        assert version == self.version + 1, (version, self.version)
        # Through the wire format, as storage does.
        wires = [encode_change(c) for c in decision.changes]
        changes = [decode_change(w) for w in wires]
        assert changes == list(decision.changes)
        touched: list[SortKey] = []
        for change in changes:
            match change:
                case ch.EntriesAdded():
                    for e in change.entries:
                        assert e.entry_id not in self.state.entries or not (
                            self.state.entries[e.entry_id].live
                        ), f"{e.entry_id} added while live"
                        self._insert(e.sort_key)
                        touched.append(e.sort_key)
                case ch.EntriesMoved():
                    for m in change.moves:
                        self._delete((m.previous_position_key, m.entry.entry_id))
                        self._insert(m.entry.sort_key)
                        touched.append(m.entry.sort_key)
                case ch.EntriesRemoved():
                    for e in change.entries:
                        self._delete(e.sort_key)
                case (
                    ch.DetailsUpdated()
                    | ch.MembersChanged()
                    | ch.PlaylistCreated()
                    | ch.PlaylistDeleted()
                ):
                    pass  # no live entry moves
                case _:
                    assert_never(change)
        for key, _ in touched:
            assert positions.is_valid(key), key
            assert len(key) <= positions.MAX_LENGTH, key
        for sort_key in touched:
            self._check_neighbours(sort_key)
        self.state.apply(version, changes, decision.playlist.updated_at)
        self.log.append((version, wires))
        self.committed_at[version] = decision.playlist.updated_at
        assert self.state.playlist == decision.playlist
        assert self.state.playlist.entry_count == len(self._index)
        return decision.outcome

    def _insert(self, sort_key: SortKey) -> None:
        i = bisect.bisect_left(self._index, sort_key)
        assert i == len(self._index) or self._index[i] != sort_key, sort_key
        self._index.insert(i, sort_key)

    def _delete(self, sort_key: SortKey) -> None:
        i = bisect.bisect_left(self._index, sort_key)
        assert i < len(self._index), f"{sort_key} is not live"
        assert self._index[i] == sort_key, f"{sort_key} is not live"
        del self._index[i]

    def _check_neighbours(self, sort_key: SortKey) -> None:
        """Whether ``sort_key`` (if still live) shares its position key with a neighbour."""
        i = bisect.bisect_left(self._index, sort_key)
        if i == len(self._index) or self._index[i] != sort_key:
            return  # moved again or removed later in the same version
        key = sort_key[0]
        assert i == 0 or self._index[i - 1][0] != key, f"duplicate live key {key!r}"
        assert i + 1 == len(self._index) or self._index[i + 1][0] != key, (
            f"duplicate live key {key!r}"
        )

    # --- reading back ------------------------------------------------------

    def live_ids(self) -> list[str]:
        """Live entry ids in list order (from the index; O(n))."""
        return [entry_id for _, entry_id in self._index]

    def live_keys(self) -> list[str]:
        return [key for key, _ in self._index]

    def live(self) -> list[Entry]:
        return [self.state.entries[entry_id] for _, entry_id in self._index]

    def fold_log(self) -> PlaylistState:
        """A fresh state rebuilt from ``log`` alone (wire dicts, decoded)."""
        return fold(
            PLAYLIST_ID,
            ((v, [decode_change(w) for w in wires], self.committed_at[v]) for v, wires in self.log),
        )


def fold(playlist_id: str, log: Iterable[tuple[int, list[ch.Change], datetime]]) -> PlaylistState:
    """A playlist rebuilt from its whole log alone (DESIGN §3).

    ``log``: each version's number, changes and commit time, from version 0
    (one ``PlaylistCreated``) on, in order.
    """
    state: PlaylistState | None = None
    for version, changes, committed_at in log:
        if state is None:
            assert version == 0, f"the log starts at version {version}"
            (created,) = changes
            assert isinstance(created, ch.PlaylistCreated)
            state = PlaylistState.create(playlist_id, created)
        else:
            state.apply(version, changes, committed_at)
    assert state is not None, "the log is empty"
    return state
