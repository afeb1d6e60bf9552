"""Any sequence of concurrent edits gives the list a plain Python model predicts.

Several actors (the owner and two editors, plus a viewer whose edits are
refused) send adds, moves, removes, title changes and reverts, each against a
random stale base version and with random anchors and targets, removed ones
included. The model is a list of entry ids, updated from the semantics of each
command (DESIGN §4): new or moved entries go contiguously right after or
before a live anchor, to the place a removed anchor's tombstone held, or at the
end; a revert brings back the list of that version. After every step the
playlist's order equals the model's, and folding the log (wire dicts, as
JSON text) from version 0 rebuilds exactly the same entries.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from chorus.domain import placement, positions
from chorus.domain.changes import (
    DetailsUpdated,
    EntriesAdded,
    EntriesMoved,
    EntriesRemoved,
    decode_change,
)
from chorus.domain.commands import (
    AddEntries,
    MoveEntries,
    Placement,
    PlaylistCommand,
    RemoveEntries,
    RevertPlaylist,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.decisions import Decision
from chorus.domain.errors import (
    AnchorNotFound,
    DomainError,
    Forbidden,
    InvalidInput,
    NotFound,
    VersionConflict,
)
from chorus.domain.model import Role
from tests.unit.fakes import PLAYLIST_ID, MemoryPlaylist, fold

OWNER, EDITORS, VIEWER = "owner", ("ed1", "ed2"), "vi"
ACTORS = (OWNER, *EDITORS, OWNER, *EDITORS, VIEWER)
"""Who sends the next command; the viewer now and then."""
UNKNOWN = "never-an-entry"
TITLES = ("Mix", "Road trip", "🎧 Late night")
MEDIA = ("m-a", "m-b", "m-c", "m-d")

SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

stats = {"rebalanced": 0, "tombstone_anchors": 0, "rebased": 0, "reverts": 0}
"""What the runs exercised, so a test can insist the interesting paths were hit."""

Snapshot = tuple[tuple[str, ...], dict[str, str], str]
"""The model at one version: live ids in order, their keys, the title."""


class PlaylistMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pl = MemoryPlaylist(OWNER, collaborative=True)
        for editor in EDITORS:
            self.pl.execute_sync(self._grant(editor, Role.EDITOR))
        self.pl.execute_sync(self._grant(VIEWER, Role.VIEWER))
        # The model.
        self.order: list[str] = []
        self.keys: dict[str, str] = {}
        """Every entry ever: its current key, or the key its tombstone keeps."""
        self.media: dict[str, str] = {}
        self.ever: list[str] = []
        self.title = "Mix"
        self.history: dict[int, Snapshot] = {
            v: self._snapshot() for v in range(self.pl.version + 1)
        }

    def _grant(self, user: str, role: Role) -> PlaylistCommand:
        return SetMemberRole(PLAYLIST_ID, self.pl.op(), self.pl.version, user, role)

    def _snapshot(self) -> Snapshot:
        return tuple(self.order), {i: self.keys[i] for i in self.order}, self.title

    # --- drawing commands --------------------------------------------------

    def _common(self, data: st.DataObject) -> tuple[str, int, bool]:
        actor = data.draw(st.sampled_from(ACTORS), label="actor")
        base = data.draw(st.integers(0, self.pl.version), label="base")
        strict = data.draw(st.integers(0, 5), label="strict") == 0
        return actor, base, strict

    def _refusal(self, actor: str, base: int, strict: bool) -> type[DomainError] | None:
        """The error every command checks first: access, then the base version."""
        if actor == VIEWER:
            return Forbidden
        if strict and base != self.pl.version:
            return VersionConflict
        return None

    def _placement(self, data: st.DataObject) -> Placement:
        side = data.draw(st.sampled_from(["end", "after", "before"]), label="side")
        if side == "end" or not self.ever:
            return Placement()
        anchor = data.draw(st.sampled_from([*self.ever, UNKNOWN]), label="anchor")
        return Placement(after=anchor) if side == "after" else Placement(before=anchor)

    def _targets(self, data: st.DataObject) -> tuple[str, ...]:
        pool = st.sampled_from([*self.ever, UNKNOWN])
        return tuple(data.draw(st.lists(pool, min_size=1, max_size=4, unique=True), "targets"))

    # --- running them ------------------------------------------------------

    def _run(
        self, command: PlaylistCommand, actor: str, error: type[DomainError] | None
    ) -> Decision | None:
        before, log = self.pl.version, len(self.pl.log)
        if error is not None:
            with pytest.raises(error):
                self.pl.execute_sync(command, actor)
            assert (self.pl.version, len(self.pl.log)) == (before, log)
            return None
        decision = self.pl.execute_sync(command, actor)
        assert decision.outcome.version == before + 1 == self.pl.version
        assert decision.outcome.rebased == (command.base_version < before)
        stats["rebased"] += decision.outcome.rebased
        return decision

    def _where(self, rest: Sequence[str], where: Placement) -> int:
        """The index in ``rest`` (live entries, none moving) where entries go."""
        anchor = where.anchor
        if anchor is None:
            return len(rest)
        if anchor in rest:
            i = rest.index(anchor)
            return i + 1 if where.after is not None else i
        # Removed: the place its tombstone's key holds among the live keys.
        stats["tombstone_anchors"] += 1
        return bisect.bisect_left([(self.keys[i], i) for i in rest], (self.keys[anchor], anchor))

    def _follow(self, decision: Decision, own: Sequence[str] = ()) -> None:
        """Update the model's keys from the canonical changes, checking them on the way."""
        live = set(self.order)
        for change in decision.changes:
            match change:
                case EntriesAdded():
                    for e in change.entries:
                        assert e.entry_id in live
                        if e.entry_id not in self.keys:
                            self.ever.append(e.entry_id)
                        else:  # a revert brings an entry back as it was
                            assert self.media[e.entry_id] == e.media_id
                        self.keys[e.entry_id] = e.position_key
                        self.media[e.entry_id] = e.media_id
                case EntriesMoved():
                    for m in change.moves:
                        assert m.entry.entry_id in live
                        assert m.previous_position_key == self.keys[m.entry.entry_id]
                        self.keys[m.entry.entry_id] = m.entry.position_key
                        if m.entry.entry_id not in own:
                            stats["rebalanced"] += 1
                case EntriesRemoved():
                    for e in change.entries:
                        assert e.entry_id not in live
                        assert e.position_key == self.keys[e.entry_id]
                case DetailsUpdated():
                    assert change.details.title == self.title
                case _:
                    raise AssertionError(f"unexpected change {change!r}")
        self.history[self.pl.version] = self._snapshot()

    # --- rules ---------------------------------------------------------------

    @initialize(n=st.integers(0, 8))
    def start(self, n: int) -> None:
        if n:
            self.add_entries(OWNER, self.pl.version, False, Placement(), MEDIA[:1] * n)

    def add_entries(
        self, actor: str, base: int, strict: bool, where: Placement, media: Sequence[str]
    ) -> None:
        command = AddEntries(PLAYLIST_ID, self.pl.op(), base, tuple(media), where, strict)
        error = self._refusal(actor, base, strict)
        if error is None and where.anchor == UNKNOWN:
            error = AnchorNotFound
        decision = self._run(command, actor, error)
        if decision is None:
            return
        placed = decision.outcome.entries
        new = [e.entry_id for e in placed]
        assert [e.media_id for e in placed] == list(media)
        assert all(e.added_by == actor for e in placed)
        assert not set(new) & set(self.keys), "entry ids are never reused"
        at = self._where(self.order, where)
        self.order[at:at] = new
        self._follow(decision)
        assert [self.keys[i] for i in new] == [e.position_key for e in placed]

    @rule(data=st.data(), media=st.lists(st.sampled_from(MEDIA), min_size=1, max_size=3))
    def add(self, data: st.DataObject, media: list[str]) -> None:
        actor, base, strict = self._common(data)
        self.add_entries(actor, base, strict, self._placement(data), media)

    @precondition(lambda self: self.ever)
    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        actor, base, strict = self._common(data)
        targets = self._targets(data)
        where = self._placement(data)
        command = MoveEntries(PLAYLIST_ID, self.pl.op(), base, targets, where, strict)
        error = self._refusal(actor, base, strict)
        if error is None:
            if where.anchor in targets:
                error = InvalidInput
            elif UNKNOWN in targets:
                error = NotFound
            elif where.anchor == UNKNOWN:
                error = AnchorNotFound
        decision = self._run(command, actor, error)
        if decision is None:
            return
        live = set(self.order)
        moving = [t for t in targets if t in live]
        assert list(decision.outcome.skipped_entry_ids) == [t for t in targets if t not in live]
        assert [e.entry_id for e in decision.outcome.entries] == moving
        if not moving:
            assert decision.changes == ()
        else:
            rest = [i for i in self.order if i not in set(moving)]
            at = self._where(rest, where)
            self.order = [*rest[:at], *moving, *rest[at:]]
        self._follow(decision, own=moving)

    @precondition(lambda self: self.ever)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        actor, base, strict = self._common(data)
        targets = self._targets(data)
        command = RemoveEntries(PLAYLIST_ID, self.pl.op(), base, targets, strict)
        error = self._refusal(actor, base, strict)
        if error is None and UNKNOWN in targets:
            error = NotFound
        decision = self._run(command, actor, error)
        if decision is None:
            return
        live = set(self.order)
        assert list(decision.outcome.skipped_entry_ids) == [t for t in targets if t not in live]
        self.order = [i for i in self.order if i not in set(targets)]
        removed = [
            e.entry_id for c in decision.changes if isinstance(c, EntriesRemoved) for e in c.entries
        ]
        assert removed == [t for t in targets if t in live]
        self._follow(decision)

    @rule(data=st.data(), title=st.sampled_from(TITLES))
    def rename(self, data: st.DataObject, title: str) -> None:
        actor, base, strict = self._common(data)
        command = UpdatePlaylist(PLAYLIST_ID, self.pl.op(), base, title=title, strict=strict)
        decision = self._run(command, actor, self._refusal(actor, base, strict))
        if decision is None:
            return
        assert (decision.changes == ()) == (title == self.title)
        self.title = title
        self._follow(decision)

    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        actor, base, strict = self._common(data)
        to_version = data.draw(st.integers(0, self.pl.version), label="to_version")
        command = RevertPlaylist(PLAYLIST_ID, self.pl.op(), base, to_version, strict)
        decision = self._run(command, actor, self._refusal(actor, base, strict))
        if decision is None:
            return
        stats["reverts"] += 1
        order, keys, title = self.history[to_version]
        self.order, self.title = list(order), title
        self._follow(decision)
        assert {i: self.keys[i] for i in self.order} == keys

    # --- invariants ----------------------------------------------------------

    @invariant()
    def the_list_is_the_models(self) -> None:
        assert self.pl.live_ids() == self.order
        assert self.pl.state.playlist.title == self.title
        assert self.pl.state.playlist.entry_count == len(self.order)
        sort_keys = [(self.keys[i], i) for i in self.order]
        assert sort_keys == sorted(sort_keys), "the model's order is its keys' order"
        live_keys = [self.keys[i] for i in self.order]
        assert self.pl.live_keys() == live_keys
        assert len(set(live_keys)) == len(live_keys), "two live entries share a key"
        assert all(positions.is_valid(k) and len(k) <= positions.MAX_LENGTH for k in live_keys)
        assert all(positions.is_valid(k) for k in self.keys.values())

    @invariant()
    def folding_the_log_rebuilds_the_list(self) -> None:
        log = self.pl.log
        assert [v for v, _ in log] == list(range(len(log))), "versions are contiguous"
        decoded = [(v, [decode_change(json.loads(json.dumps(w))) for w in ws]) for v, ws in log]
        state = fold(PLAYLIST_ID, ((v, c, self.pl.committed_at[v]) for v, c in decoded))
        live = state.live()
        assert [e.entry_id for e in live] == self.order
        assert [e.position_key for e in live] == [self.keys[i] for i in self.order]
        assert [e.media_id for e in live] == [self.media[i] for i in self.order]
        assert state.entries == self.pl.state.entries
        assert state.playlist == self.pl.state.playlist
        assert state.members == self.pl.state.members


def test_concurrent_edits_converge_on_the_model() -> None:
    run_state_machine_as_test(PlaylistMachine, settings=SETTINGS)


def test_concurrent_edits_converge_when_keys_are_tight(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same, with allocation starved so that most edits rebalance, widening windows.

    Keys of at most 2 digits leave no room to append (appends step at 3
    digits) and little between neighbours; the first rebalance window is one
    entry a side, so windows widen too.
    """
    monkeypatch.setattr(positions, "SOFT_MAX_LENGTH", 2)
    monkeypatch.setattr(placement, "REBALANCE_FIRST_WIDTH", 1)
    stats.update(rebalanced=0, tombstone_anchors=0, rebased=0, reverts=0)
    run_state_machine_as_test(PlaylistMachine, settings=SETTINGS)
    assert stats["rebalanced"] > 100
    assert stats["tombstone_anchors"] > 10
    assert stats["rebased"] > 100
    assert stats["reverts"] > 10
