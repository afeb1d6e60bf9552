"""An in-memory playlist store for unit tests of the domain (no server).

It answers the :class:`~chorus.domain.ports.PlaylistView` questions from a
:class:`~chorus.domain.replay.PlaylistState` and applies decisions the way
storage does: through the canonical changes.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

from chorus.domain.changes import (
    Change,
    EntriesAdded,
    EntriesMoved,
    EntriesRemoved,
    decode_change,
    encode_change,
)
from chorus.domain.commands import CreatePlaylist, PlaylistCommand
from chorus.domain.handlers import Context, Decision, Outcome, create_playlist, decide
from chorus.domain.model import Entry, Role
from chorus.domain.replay import PlaylistState

SortKey = tuple[str, str]


class MemoryPlaylist:
    """One playlist, its log and an ordered index of live entries."""

    def __init__(self, owner: str = "owner", title: str = "Mix") -> None:
        self._ids = (f"e{n:06d}" for n in itertools.count())
        self._clock = (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n) for n in itertools.count())
        decision = create_playlist(CreatePlaylist("op-create", title), "p1", self.context(owner))
        self.state = PlaylistState.create("p1", decision.changes[0])  # type: ignore[arg-type]
        self.log: list[tuple[int, list[dict[str, object]]]] = [
            (0, [dict(encode_change(c)) for c in decision.changes])
        ]
        self.floor = 0
        self._index: list[SortKey] = []
        self.reads = 0

    def context(self, actor: str) -> Context:
        return Context(actor_id=actor, now=next(self._clock), new_id=lambda: next(self._ids))

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

    async def role_of(self, user_id: str) -> Role | None:
        return self.state.members.get(user_id)

    async def changes_since(self, version: int) -> Sequence[tuple[int, Sequence[Change]]] | None:
        if version + 1 < self.floor:
            return None
        return [
            (v, [decode_change(c) for c in changes])  # type: ignore[arg-type]
            for v, changes in self.log
            if v > version
        ]

    # --- commands ---------------------------------------------------------

    async def execute(self, command: PlaylistCommand, actor: str = "owner") -> Decision:
        role = self.state.members.get(actor)
        decision = await decide(command, self.state.playlist, role, self, self.context(actor))
        self.commit(decision)
        return decision

    def commit(self, decision: Decision) -> Outcome:
        version = decision.outcome.version
        # Through the wire format, as storage does.
        wires = [dict(encode_change(c)) for c in decision.changes]
        changes = [decode_change(w) for w in wires]  # type: ignore[arg-type]
        for change in changes:
            match change:
                case EntriesAdded():
                    for e in change.entries:
                        bisect.insort(self._index, e.sort_key)
                case EntriesMoved():
                    for m in change.moves:
                        self._index.remove((m.previous_position_key, m.entry.entry_id))
                        bisect.insort(self._index, m.entry.sort_key)
                case EntriesRemoved():
                    for e in change.entries:
                        self._index.remove(e.sort_key)
                case _:
                    pass
        self.state.apply(version, changes, decision.playlist.updated_at)
        self.log.append((version, wires))
        assert self.state.playlist == decision.playlist
        return decision.outcome

    def live_ids(self) -> list[str]:
        return [e.entry_id for e in self.state.live()]
