"""``chorus.domain.model.entries_of``: entries made from rows without ``Entry.__init__``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from chorus.domain.model import Entry, entries_of

AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
ROWS = [
    ("header", None, None, None, None, None, None),
    ("x", "e1", "a", "m1", "u1", AT, None),
    ("x", "e2", "b", "m2", "u2", AT, AT),
]


def test_the_entries_are_those_their_columns_make() -> None:
    """Equal to ``Entry(*columns)`` field for field, hashable alike; a row whose entry
    id is null (the header's, in a header-and-page read) has no entry."""
    made = entries_of(ROWS, 1)
    assert made == [Entry(*ROWS[1][1:]), Entry(*ROWS[2][1:])]
    assert [dataclasses.astuple(e) for e in made] == [ROWS[1][1:], ROWS[2][1:]]
    assert hash(made[0]) == hash(Entry(*ROWS[1][1:]))
    assert (made[0].live, made[1].live) == (True, False)
    assert entries_of([r[1:] for r in ROWS]) == made


def test_the_entries_stay_frozen() -> None:
    made = entries_of(ROWS, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].position_key = "z"  # type: ignore[misc]
