"""The batch rules alone (``chorus.domain.batch``): checks, temporary ids, the atomic hash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chorus.domain.batch import Batch, Operation, atomic_hash, check_batch, remember, resolve
from chorus.domain.commands import AddEntries, MoveEntries, Placement, RemoveEntries
from chorus.domain.errors import InvalidInput, LimitExceeded
from chorus.domain.limits import Limits

LIMITS = Limits(max_batch_operations=10, max_batch_entries=20)


def _add(
    opid: str, n: int, client_ids: tuple[str, ...] = (), after: str | None = None
) -> Operation:
    temporaries = frozenset({after}) if after and after.startswith("t") else frozenset()
    command = AddEntries("p", opid, 0, tuple(f"m{i}" for i in range(n)), Placement(after=after))
    return Operation(command, client_ids, temporaries)


def test_a_well_formed_batch_passes() -> None:
    ops = (
        _add("a", 2, ("t1", "t2")),
        _add("b", 1, ("t3",), after="t2"),
        Operation(RemoveEntries("p", "c", 0, ("t1", "real")), temporaries=frozenset({"t1"})),
    )
    check_batch(Batch("p", 0, ops), LIMITS)


def test_a_temporary_id_declared_later_is_not_yet_known() -> None:
    ops = (_add("a", 1, after="t9"), _add("b", 1, ("t9",)))
    with pytest.raises(InvalidInput, match="no clientEntryId") as raised:
        check_batch(Batch("p", 0, ops), LIMITS)
    assert raised.value.field == ("operations", "0", "addEntries", "after")


def test_an_add_cannot_declare_a_temporary_id_it_anchors_on() -> None:
    with pytest.raises(InvalidInput):
        check_batch(Batch("p", 0, (_add("a", 1, ("t1",), after="t1"),)), LIMITS)


def test_only_an_add_declares_temporary_ids() -> None:
    op = Operation(RemoveEntries("p", "a", 0, ("x",)), client_entry_ids=("t",))
    with pytest.raises(InvalidInput, match="only addEntries"):
        check_batch(Batch("p", 0, (op,)), LIMITS)


def test_limits_count_every_id_of_every_operation() -> None:
    ops = tuple(_add(str(i), 2) for i in range(10))
    check_batch(Batch("p", 0, ops), LIMITS)  # 20 ids: at the limit
    with pytest.raises(LimitExceeded, match="21"):
        check_batch(Batch("p", 0, (*ops[:9], _add("x", 3))), LIMITS)
    with pytest.raises(LimitExceeded, match="operations"):
        check_batch(Batch("p", 0, tuple(_add(str(i), 1) for i in range(11))), LIMITS)


def test_a_temporary_id_of_an_add_that_did_not_commit_refuses_its_user() -> None:
    op = Operation(MoveEntries("p", "m", 0, ("t1",)), temporaries=frozenset({"t1"}))
    made: dict[str, str | None] = {}
    remember(_add("a", 1, ("t1",)), None, made)
    with pytest.raises(InvalidInput, match="did not commit") as raised:
        resolve(3, op, made)
    assert raised.value.field == ("operations", "3", "moveEntries", "entryIds", "0")


@given(
    st.lists(
        st.sampled_from(["t1", "t2", "real-1", "real-2"]), min_size=1, max_size=4, unique=True
    ),
    st.sampled_from([None, "t3", "real-3"]),
)
def test_resolve_swaps_exactly_the_temporary_ids(targets: list[str], anchor: str | None) -> None:
    refs = [*targets, *([anchor] if anchor else [])]
    temporaries = frozenset(r for r in refs if r.startswith("t"))
    command = MoveEntries("p", "m", 0, tuple(targets), Placement(after=anchor))
    made: dict[str, str | None] = {"t1": "e1", "t2": "e2", "t3": "e3", "real-1": "WRONG"}
    resolved = resolve(0, Operation(command, temporaries=temporaries), made)
    assert isinstance(resolved, MoveEntries)
    assert resolved.entry_ids == tuple("e" + t[1] if t.startswith("t") else t for t in targets)
    expected_anchor = None if anchor is None else ("e3" if anchor == "t3" else anchor)
    assert resolved.placement.after == expected_anchor
    assert (resolved.operation_id, resolved.base_version) == ("m", 0)


def test_the_atomic_hash_sees_every_operation_and_its_temporary_ids() -> None:
    one = Batch("p", 0, (_add("a", 1, ("t1",)), _add("b", 1)), atomic=True)
    assert atomic_hash(one) == atomic_hash(Batch("p", 0, one.operations, atomic=True))
    assert atomic_hash(one) != atomic_hash(Batch("p", 0, (_add("a", 1, ("t2",)), _add("b", 1))))
    assert atomic_hash(one) != atomic_hash(Batch("p", 0, (_add("a", 1, ("t1",)), _add("b", 2))))
