"""Rewinding (chorus.domain.version_history) against folding the log forward from version 0.

Property: for any history of edits (adds, moves, removes, details, members,
reverts) and any anchor ``c`` at or after a version ``v``, rewinding the
state at ``c`` by the log ``v+1 … c`` and laying it over any keyset window of
``c``'s list gives exactly the state the forward fold
(:class:`~chorus.domain.fold.PlaylistState`) reached at ``v``: header, count
and every window's entries.
"""

from __future__ import annotations

import copy
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chorus.domain.changes import Change, decode_change
from chorus.domain.commands import (
    AddEntries,
    MoveEntries,
    Placement,
    PlaylistCommand,
    RemoveEntries,
    RemoveMember,
    RevertPlaylist,
    UpdatePlaylist,
)
from chorus.domain.fold import PlaylistState
from chorus.domain.model import Role, Visibility
from chorus.domain.version_history import Rewound, Window, checkpoint_due, left_out, overlay, rewind
from tests.unit.fakes import PLAYLIST_ID, MemoryPlaylist, run_sync

STEP = st.tuples(
    st.sampled_from(["add", "move", "remove", "details", "member", "revert"]), st.integers(0, 10**6)
)


def _history(steps: list[tuple[str, int]]) -> tuple[MemoryPlaylist, dict[int, PlaylistState]]:
    p = MemoryPlaylist(visibility=Visibility.PUBLIC, collaborative=True)
    states = {0: copy.deepcopy(p.state)}
    for kind, n in steps:
        live = [e.entry_id for e in p.state.live()]
        v = p.version
        if kind == "move" and len(live) >= 2:
            target, anchor = live[n % len(live)], live[(n // 7) % len(live)]
            placement = Placement(after=anchor) if anchor != target else Placement()
            command: PlaylistCommand = MoveEntries(PLAYLIST_ID, p.op(), v, (target,), placement)
        elif kind == "remove" and live:
            command = RemoveEntries(PLAYLIST_ID, p.op(), v, (live[n % len(live)],))
        elif kind == "details":
            visibility = Visibility.PRIVATE if n % 2 else Visibility.PUBLIC
            command = UpdatePlaylist(
                PLAYLIST_ID, p.op(), v, title=f"t{n}", description=f"d{n}", visibility=visibility
            )
        elif kind == "member":
            if n % 2:
                run_sync(p.grant("bob", Role.EDITOR))
                states[p.version] = copy.deepcopy(p.state)
                continue
            command = RemoveMember(PLAYLIST_ID, p.op(), v, "bob")
        elif kind == "revert" and v > 0:
            command = RevertPlaylist(PLAYLIST_ID, p.op(), v, to_version=n % v)
        else:
            after = live[n % len(live)] if live and n % 3 else None
            command = AddEntries(
                PLAYLIST_ID, p.op(), v, (f"m{n}", f"n{n}")[: 1 + n % 2], Placement(after=after)
            )
        p.execute_sync(command)
        states[p.version] = copy.deepcopy(p.state)
    return p, states


def _log(p: MemoryPlaylist, first: int, last: int) -> list[tuple[int, list[Change]]]:
    return [(v, [decode_change(c) for c in w]) for v, w in p.log if first <= v <= last]


def _rewound(p: MemoryPlaylist, states: dict[int, PlaylistState], v: int, c: int) -> Rewound:
    committed_at: datetime = p.committed_at[v]
    return rewind(states[c].playlist, _log(p, v + 1, c), committed_at)


@settings(max_examples=60, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=25), st.data())
def test_rewinding_from_any_anchor_gives_the_fold_at_that_version(
    steps: list[tuple[str, int]], data: st.DataObject
) -> None:
    p, states = _history(steps)
    c = data.draw(st.integers(0, p.version), label="anchor")
    v = data.draw(st.integers(0, c), label="version")
    rewound = _rewound(p, states, v, c)
    then = states[v]
    assert rewound.playlist == then.playlist
    expected = then.live()
    anchor = states[c].live()
    # The whole list, then windows around every key either list holds.
    assert overlay(anchor, rewound, Window(), limit=10**6) == expected
    keys = sorted({e.sort_key for e in expected} | {e.sort_key for e in anchor})
    limit = data.draw(st.integers(0, 4), label="limit")
    for key in keys[:6]:
        for window in (Window(after=key), Window(before=key), Window(after=key, inclusive=True)):
            inside = [e for e in expected if e.sort_key in window]
            rows = [e for e in anchor if e.sort_key in window]
            wanted = limit + left_out(rewound, window)
            got = overlay(rows[:wanted], rewound, window, limit=limit)
            assert got == inside[:limit]
            got = overlay(
                rows[-wanted:] if wanted else [], rewound, window, limit=limit, from_end=True
            )
            assert got == (inside[-limit:] if limit else [])


def test_a_rewind_to_the_anchor_changes_nothing() -> None:
    p, states = _history([("add", 1), ("add", 2)])
    rewound = _rewound(p, states, p.version, p.version)
    assert rewound.playlist == states[p.version].playlist
    assert (rewound.then, rewound.at_anchor) == ({}, {})


def test_a_log_that_does_not_lead_to_the_anchor_is_refused() -> None:
    p, states = _history([("add", 1), ("add", 2), ("add", 3)])
    with pytest.raises(ValueError, match="does not lead"):
        rewind(states[3].playlist, _log(p, 1, 2), p.committed_at[0])


@pytest.mark.parametrize(
    ("before", "after", "due"),
    [
        (0, 1, False),
        (3, 4, True),
        (4, 5, False),
        (2, 9, True),
        (7, 8, True),
        (8, 11, False),
        (-1, 0, False),
    ],
)
def test_a_checkpoint_is_due_when_a_commit_reaches_a_multiple(
    before: int, after: int, due: bool
) -> None:
    assert checkpoint_due(before, after, every=4) is due
