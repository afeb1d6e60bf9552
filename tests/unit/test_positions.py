"""Position keys: allocation, rebalancing, and the insertion patterns of DESIGN §4.

The pure functions are checked against an independent model (exact fractions
of base-62 digit strings); the insertion patterns run through the command
handlers and :class:`~tests.unit.fakes.MemoryPlaylist`, against a plain
Python list.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from fractions import Fraction

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from chorus.domain import positions
from chorus.domain.changes import EntriesAdded, EntriesMoved
from chorus.domain.commands import AddEntries, MoveEntries, Placement, RemoveEntries
from chorus.domain.decisions import Decision
from chorus.domain.errors import LimitExceeded
from tests.unit.fakes import PLAYLIST_ID, MemoryPlaylist

DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
B = 62
SOFT = positions.SOFT_MAX_LENGTH
REBALANCE_LENGTH = positions.REBALANCE_MAX_LENGTH

PROPERTY = settings(max_examples=300, deadline=None, database=None)


# --- an independent model of keys -------------------------------------------


def frac(key: str) -> Fraction:
    """The fraction a key denotes, digit by digit (``"V"`` is 31/62)."""
    return sum((Fraction(DIGITS.index(ch), B ** (i + 1)) for i, ch in enumerate(key)), Fraction(0))


def bound(key: str | None, default: int) -> Fraction:
    return Fraction(default) if key is None else frac(key)


def free_slots(low: str | None, high: str | None, length: int) -> int:
    """How many keys of at most ``length`` digits lie strictly between the bounds."""
    lo = math.floor(bound(low, 0) * B**length)
    hi = math.ceil(bound(high, 1) * B**length)
    return max(hi - lo - 1, 0)


def assert_keys_between(keys: Sequence[str], low: str | None, high: str | None) -> None:
    assert all(positions.is_valid(k) for k in keys), keys
    assert list(keys) == sorted(keys)
    assert len(set(keys)) == len(keys)
    fractions = [frac(k) for k in keys]
    assert fractions == sorted(fractions)
    assert bound(low, 0) < fractions[0]
    assert fractions[-1] < bound(high, 1)
    if low is not None:
        assert low < keys[0]
    if high is not None:
        assert keys[-1] < high


def assert_valid_and_increasing(keys: Sequence[str]) -> None:
    assert all(positions.is_valid(k) for k in keys)
    assert all(a < b for a, b in itertools.pairwise(keys))


# --- strategies -------------------------------------------------------------


@st.composite
def keys(draw: st.DrawFn, max_size: int = SOFT) -> str:
    """A valid key: base-62 digits, never ending in ``0``."""
    body = draw(st.text(DIGITS, max_size=max_size - 1))
    return body + draw(st.sampled_from(DIGITS[1:]))


@st.composite
def gaps(draw: st.DrawFn, max_size: int = SOFT) -> tuple[str | None, str | None]:
    """Two bounds ``low < high`` (``None`` = an end), often very close together."""
    kind = draw(st.sampled_from(["any", "close", "prefix", "carry", "append", "prepend", "both"]))
    if kind == "append":
        return draw(keys(max_size)), None
    if kind == "prepend":
        return None, draw(keys(max_size))
    if kind == "both":
        return None, None
    if kind == "close":
        # A long shared prefix, then two different tails.
        prefix = draw(st.text(DIGITS, max_size=max_size - 2))
        a, b = draw(keys(max_size - len(prefix))), draw(keys(max_size - len(prefix)))
        low, high = prefix + a, prefix + b
    elif kind == "prefix":
        # ``high`` extends ``low``: the gap is below ``high``'s extra digits.
        low = draw(keys(max_size - 1))
        high = low + draw(keys(max_size - len(low)))
    elif kind == "carry":
        # "Vzzz…" and "W": adjacent at the first digit, close in value.
        stem = draw(st.text(DIGITS, max_size=max_size - 3))
        digit = draw(st.integers(0, B - 2))
        nines = draw(st.integers(1, max_size - len(stem) - 1))
        low = stem + DIGITS[digit] + "z" * nines
        high = stem + DIGITS[digit + 1]
    else:
        low, high = draw(keys(max_size)), draw(keys(max_size))
    assume(low != high)
    return (low, high) if low < high else (high, low)


# --- key basics -------------------------------------------------------------


def test_digits_are_the_base_62_alphabet_in_byte_order() -> None:
    assert positions.DIGITS == DIGITS
    assert list(positions.DIGITS) == sorted(positions.DIGITS)
    assert all(ch.isascii() for ch in positions.DIGITS)
    assert positions.BASE == B
    assert positions.SOFT_MAX_LENGTH <= positions.MAX_LENGTH == 32


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("V", True),
        ("1", True),
        ("z" * 32, True),
        ("z" * 33, False),
        ("", False),
        ("0", False),
        ("V0", False),
        ("V!", False),
        ("Vé", False),
        ("V ", False),
        ("-V", False),
    ],
)
def test_is_valid(key: str, valid: bool) -> None:
    assert positions.is_valid(key) is valid


@PROPERTY
@given(keys(positions.MAX_LENGTH), keys(positions.MAX_LENGTH))
@example("V", "V1")
@example("1", "z")
@example("Uzzzzzzzzzzz", "V")
def test_bytewise_order_is_fraction_order(a: str, b: str) -> None:
    assert (a < b) == (frac(a) < frac(b))
    assert (a.encode() < b.encode()) == (a < b)
    assert (a == b) == (frac(a) == frac(b))


def test_max_length() -> None:
    assert positions.max_length([]) == 0
    assert positions.max_length(["V", "VVV", "VV"]) == 3


# --- allocate ---------------------------------------------------------------


@PROPERTY
@given(gaps(), st.integers(1, 120))
@example(("V", "W"), 1)
@example(("V", "V1"), 61)
@example(("V", "V1"), 62)
@example(("z" * 19, None), 61)
@example(("z" * 19, None), 62)
@example((None, "0" * 19 + "1"), 1)
@example(("Uzzzzzzzzzzzzzzzzzzz", "V"), 1)
def test_allocate_gives_short_increasing_keys_strictly_inside_the_gap(
    gap: tuple[str | None, str | None], count: int
) -> None:
    low, high = gap
    got = positions.allocate(low, high, count)
    # ``None`` exactly when fewer than ``count`` keys of at most SOFT_MAX_LENGTH
    # digits fit in the gap: it never asks for a rebalance it does not need.
    assert (got is None) == (free_slots(low, high, SOFT) < count)
    if got is not None:
        assert len(got) == count
        assert positions.max_length(got) <= SOFT
        assert_keys_between(got, low, high)


@PROPERTY
@given(gaps(), st.integers(1, 100))
def test_allocate_takes_the_shortest_length_with_room_between_neighbours(
    gap: tuple[str | None, str | None], count: int
) -> None:
    low, high = gap
    assume(low is not None and high is not None)
    got = positions.allocate(low, high, count)
    assume(got is not None)
    assert got is not None
    length = positions.max_length(got)
    assert free_slots(low, high, length) >= count
    if length > 1:
        assert free_slots(low, high, length - 1) < count


def test_allocate_in_an_empty_list_starts_in_the_middle() -> None:
    assert positions.allocate(None, None, 1) == ["V"]
    assert positions.allocate(None, None, 61) == list(DIGITS[1:])


@pytest.mark.parametrize("count", [1, 62, 100, 10_100])
def test_allocate_in_an_empty_list_always_has_room(count: int) -> None:
    got = positions.allocate(None, None, count)
    assert got is not None
    assert len(got) == count
    assert positions.max_length(got) <= 3
    assert_keys_between(got, None, None)


def test_ten_thousand_appends_stay_at_three_or_four_digits() -> None:
    keys_: list[str] = []
    last: str | None = None
    for _ in range(10_000):
        got = positions.allocate(last, None, 1)
        assert got is not None
        last = got[0]
        keys_.append(last)
    assert_valid_and_increasing(keys_)
    assert 3 <= positions.max_length(keys_) <= 4


def test_ten_thousand_prepends_stay_at_three_or_four_digits() -> None:
    keys_: list[str] = []
    first: str | None = None
    for _ in range(10_000):
        got = positions.allocate(None, first, 1)
        assert got is not None
        first = got[0]
        keys_.append(first)
    keys_.reverse()
    assert_valid_and_increasing(keys_)
    assert positions.max_length(keys_) <= 4


def test_allocate_asks_for_a_rebalance_when_the_gap_is_too_tight() -> None:
    low = "V" + "0" * (SOFT - 2) + "1"
    high = "V" + "0" * (SOFT - 2) + "2"
    assert positions.allocate(low, high, 1) is None
    assert positions.allocate("z" * SOFT, None, 1) is None
    assert positions.allocate(None, "0" * (SOFT - 1) + "1", 1) is None


@pytest.mark.parametrize("count", [0, -1])
def test_allocate_refuses_a_count_below_one(count: int) -> None:
    with pytest.raises(ValueError, match="count"):
        positions.allocate(None, None, count)


@pytest.mark.parametrize(("low", "high"), [("V", "V"), ("W", "V"), ("V1", "V")])
def test_allocate_refuses_an_empty_gap(low: str, high: str) -> None:
    with pytest.raises(ValueError, match="empty gap"):
        positions.allocate(low, high, 1)


# --- rebalance --------------------------------------------------------------


@PROPERTY
@given(gaps(), st.integers(1, 300))
@example((None, None), 10_100)
@example(("V", "W"), 1)
@example(("V", "W"), 1_000)
@example(("V" + "0" * 10 + "1", "V" + "0" * 10 + "2"), 1)
def test_rebalance_spreads_keys_evenly_or_asks_for_a_wider_window(
    gap: tuple[str | None, str | None], count: int
) -> None:
    low, high = gap
    got = positions.rebalance(low, high, count)
    # Room at REBALANCE_MAX_LENGTH digits for ``count`` keys spaced at least
    # REBALANCE_SPACING units apart (and from both bounds).
    lo = math.floor(bound(low, 0) * B**REBALANCE_LENGTH)
    hi = math.ceil(bound(high, 1) * B**REBALANCE_LENGTH)
    assert (got is None) == ((hi - lo) // (count + 1) < positions.REBALANCE_SPACING)
    if got is None:
        return
    assert len(got) == count
    assert positions.max_length(got) <= REBALANCE_LENGTH
    assert_keys_between(got, low, high)
    points = [bound(low, 0), *(frac(k) for k in got), bound(high, 1)]
    unit = Fraction(1, B**REBALANCE_LENGTH)
    for a, b in itertools.pairwise(points):
        assert b - a >= positions.REBALANCE_SPACING * unit - unit


def test_rebalance_of_a_whole_full_list_fits_in_five_digits() -> None:
    got = positions.rebalance(None, None, 10_100)
    assert got is not None
    assert len(got) == 10_100
    assert positions.max_length(got) <= 5
    assert_valid_and_increasing(got)


@pytest.mark.parametrize("count", [0, -3])
def test_rebalance_refuses_a_count_below_one(count: int) -> None:
    with pytest.raises(ValueError, match="count"):
        positions.rebalance("V", "W", count)


@pytest.mark.parametrize(("low", "high"), [("V", "V"), ("W", "V")])
def test_rebalance_refuses_an_empty_window(low: str, high: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        positions.rebalance(low, high, 1)


# --- insertion patterns through the handlers ---------------------------------

N = 9_990
"""Inserts per pattern: stays under the 10,000 live entries of a playlist."""


def add_one(pl: MemoryPlaylist, placement: Placement | None = None) -> Decision:
    command = AddEntries(PLAYLIST_ID, pl.op(), pl.version, ("m",), placement or Placement())
    return pl.execute_sync(command)


def added_id(decision: Decision) -> str:
    (entry,) = decision.outcome.entries
    return entry.entry_id


class KeyWatch:
    """Every position key a run of commands writes, and the rows it rewrites."""

    def __init__(self) -> None:
        self.longest = 0
        self.rewritten = 0
        self.commands = 0

    def see(self, decision: Decision) -> None:
        self.commands += 1
        for change in decision.changes:
            if isinstance(change, EntriesAdded):
                keys_ = [e.position_key for e in change.entries]
            elif isinstance(change, EntriesMoved):
                keys_ = [m.entry.position_key for m in change.moves]
            else:
                continue
            assert all(positions.is_valid(k) for k in keys_)
            self.longest = max(self.longest, positions.max_length(keys_))
        # Rows rewritten besides the command's own: the rebalance moves.
        own = {e.entry_id for e in decision.outcome.entries}
        self.rewritten += sum(
            1
            for change in decision.changes
            if isinstance(change, EntriesMoved)
            for m in change.moves
            if m.entry.entry_id not in own
        )


def assert_list(pl: MemoryPlaylist, model: list[str]) -> None:
    """The playlist's order is the model's, and its keys are short and distinct."""
    assert pl.live_ids() == model
    live_keys = pl.live_keys()
    assert len(set(live_keys)) == len(live_keys)
    assert positions.max_length(live_keys) <= positions.SOFT_MAX_LENGTH <= positions.MAX_LENGTH
    assert_valid_and_increasing(live_keys)
    assert pl.state.playlist.entry_count == len(model)


def finish(pl: MemoryPlaylist, model: list[str], watch: KeyWatch) -> None:
    assert_list(pl, model)
    assert watch.longest <= positions.SOFT_MAX_LENGTH
    # Rebalancing is local: on average a command rewrites a few neighbours,
    # not the list.
    assert watch.rewritten <= 16 * watch.commands
    rebuilt = pl.fold_log()
    assert rebuilt.entries == pl.state.entries
    assert [e.entry_id for e in rebuilt.live()] == model


def test_inserts_directly_after_one_anchor() -> None:
    pl, watch = MemoryPlaylist(), KeyWatch()
    anchor = added_id(add_one(pl))
    tail = added_id(add_one(pl))
    model = [anchor, tail]
    for i in range(N):
        decision = add_one(pl, Placement(after=anchor))
        watch.see(decision)
        model.insert(1, added_id(decision))
        if i % 1_000 == 0:
            assert_list(pl, model)
    finish(pl, model, watch)
    assert watch.rewritten > 0, "this pattern must have needed rebalancing"


def test_inserts_directly_before_one_anchor() -> None:
    pl, watch = MemoryPlaylist(), KeyWatch()
    head = added_id(add_one(pl))
    anchor = added_id(add_one(pl))
    model = [head, anchor]
    for i in range(N):
        decision = add_one(pl, Placement(before=anchor))
        watch.see(decision)
        model.insert(len(model) - 1, added_id(decision))
        if i % 1_000 == 0:
            assert_list(pl, model)
    finish(pl, model, watch)


def test_inserts_at_the_front() -> None:
    pl, watch = MemoryPlaylist(), KeyWatch()
    first = added_id(add_one(pl))
    model = [first]
    for i in range(N):
        decision = add_one(pl, Placement(before=first))
        watch.see(decision)
        first = added_id(decision)
        model.insert(0, first)
        if i % 1_000 == 0:
            assert_list(pl, model)
    finish(pl, model, watch)


def test_appends_at_the_end() -> None:
    pl, watch = MemoryPlaylist(), KeyWatch()
    model: list[str] = []
    for _ in range(N):
        decision = add_one(pl)
        watch.see(decision)
        model.append(added_id(decision))
    finish(pl, model, watch)
    assert watch.rewritten == 0
    assert watch.longest <= 4


def test_inserts_alternating_between_two_neighbours() -> None:
    pl, watch = MemoryPlaylist(), KeyWatch()
    left = added_id(add_one(pl))
    right = added_id(add_one(pl))
    model = [left, right]
    for i in range(N):
        placement = Placement(after=left) if i % 2 == 0 else Placement(before=right)
        decision = add_one(pl, placement)
        watch.see(decision)
        model.insert(1 if i % 2 == 0 else len(model) - 1, added_id(decision))
        if i % 1_000 == 0:
            assert_list(pl, model)
    finish(pl, model, watch)


def test_inserts_alternating_after_the_newest_entries() -> None:
    """Zig-zag: each insert goes between the two previous ones."""
    pl, watch = MemoryPlaylist(), KeyWatch()
    a = added_id(add_one(pl))
    b = added_id(add_one(pl))
    model = [a, b]
    at = 1  # a is model[at - 1], b is model[at]: always neighbours
    for i in range(N):
        placement = Placement(after=a) if i % 2 == 0 else Placement(before=b)
        decision = add_one(pl, placement)
        watch.see(decision)
        new = added_id(decision)
        model.insert(at, new)
        if i % 2 == 0:
            a, at = new, at + 1
        else:
            b = new
    finish(pl, model, watch)


def test_batches_of_a_hundred_after_one_anchor() -> None:
    pl, watch = MemoryPlaylist(), KeyWatch()
    anchor = added_id(add_one(pl))
    model = [anchor]
    for _ in range(99):
        media = tuple(f"m{i}" for i in range(100))
        decision = pl.execute_sync(
            AddEntries(PLAYLIST_ID, pl.op(), pl.version, media, Placement(after=anchor))
        )
        watch.see(decision)
        assert [e.media_id for e in decision.outcome.entries] == list(media)
        model[1:1] = [e.entry_id for e in decision.outcome.entries]
    finish(pl, model, watch)
    assert len(model) == 9_901


def test_the_max_live_entries_limit_holds_at_ten_thousand() -> None:
    pl = MemoryPlaylist()
    for _ in range(100):
        media = tuple(f"m{i}" for i in range(100))
        pl.execute_sync(AddEntries(PLAYLIST_ID, pl.op(), pl.version, media))
    assert pl.state.playlist.entry_count == 10_000
    version = pl.version
    with pytest.raises(LimitExceeded):
        add_one(pl)
    assert pl.version == version
    first = pl.live_ids()[0]
    pl.execute_sync(RemoveEntries(PLAYLIST_ID, pl.op(), pl.version, (first,)))
    add_one(pl, Placement(before=pl.live_ids()[0]))
    assert pl.state.playlist.entry_count == 10_000


def test_moves_directly_after_one_anchor() -> None:
    """Moving the last entry right after the first, again and again, crowds one gap."""
    pl, watch = MemoryPlaylist(), KeyWatch()
    for _ in range(30):
        media = tuple(f"m{i}" for i in range(100))
        pl.execute_sync(AddEntries(PLAYLIST_ID, pl.op(), pl.version, media))
    model = pl.live_ids()
    anchor = model[0]
    for _ in range(6_000):
        target = model.pop()
        decision = pl.execute_sync(
            MoveEntries(PLAYLIST_ID, pl.op(), pl.version, (target,), Placement(after=anchor))
        )
        watch.see(decision)
        model.insert(1, target)
    finish(pl, model, watch)
    assert watch.rewritten > 0


@pytest.mark.parametrize("seed", [1, 2])
def test_random_moves_on_a_large_list(seed: int) -> None:
    rng = random.Random(seed)
    pl, watch = MemoryPlaylist(), KeyWatch()
    for _ in range(60):
        media = tuple(f"m{i}" for i in range(100))
        pl.execute_sync(AddEntries(PLAYLIST_ID, pl.op(), pl.version, media))
    model = pl.live_ids()
    # A hot spot: most moves land near a few anchors, so gaps get crowded.
    hot = rng.sample(model, 3)
    for step in range(3_000):
        targets = rng.sample(model, rng.randint(1, 5))
        moving = set(targets)
        rest = [i for i in model if i not in moving]
        anchor = rng.choice(hot) if rng.random() < 0.7 else rng.choice(rest)
        if anchor in targets:
            anchor = rng.choice(rest)
        kind = rng.choice(["after", "before", "end"])
        if kind == "after":
            placement, at = Placement(after=anchor), rest.index(anchor) + 1
        elif kind == "before":
            placement, at = Placement(before=anchor), rest.index(anchor)
        else:
            placement, at = Placement(), len(rest)
        decision = pl.execute_sync(
            MoveEntries(PLAYLIST_ID, pl.op(), pl.version, tuple(targets), placement)
        )
        watch.see(decision)
        assert [e.entry_id for e in decision.outcome.entries] == targets
        model = rest[:at] + targets + rest[at:]
        if step % 500 == 0:
            assert_list(pl, model)
    finish(pl, model, watch)
