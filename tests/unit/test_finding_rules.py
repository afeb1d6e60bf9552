"""The rules of finding playlists without a server: title keys, prefix ranges, cursors, cost."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from graphql import parse
from hypothesis import given
from hypothesis import strategies as st

from chorus.domain.playlist_search import (
    Direction,
    OrderField,
    PlaylistKey,
    PlaylistOrder,
    prefix_end,
    title_key,
)
from chorus.graphql.guards.cost import operation_cost
from chorus.graphql.guards.document_limits import RequestLimits
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.durations import Durations

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@given(TEXT, TEXT)
def test_the_prefix_range_holds_exactly_the_strings_that_start_with_the_key(
    key: str, other: str
) -> None:
    for candidate in (other, key + other, key[:-1] + other):
        end = prefix_end(key)
        in_range = key <= candidate and (end is None or candidate < end)
        assert in_range == candidate.startswith(key), (key, candidate, end)
        # Code point order is the bytewise order of UTF-8 (what COLLATE "C" compares).
        if end is not None:
            assert (candidate < end) == (candidate.encode() < end.encode())


def test_prefix_end_skips_surrogates_and_the_last_code_point() -> None:
    assert prefix_end("ab") == "ac"
    assert prefix_end("a\ud7ff") == "a\ue000"
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("") is None


def test_title_keys_fold_case_and_white_space() -> None:
    assert title_key("  Chill\t\tMIX ") == "chill mix"
    assert title_key("Straße") == "strasse"
    assert len(title_key("ΐ" * 200)) == 600  # the column holds 800


ORDERS = st.builds(PlaylistOrder, st.sampled_from(OrderField), st.sampled_from(Direction))
TIMES = st.datetimes(timezones=st.just(UTC))
TITLES = st.text(st.characters(exclude_categories=["Cc", "Cs"]), max_size=200).map(title_key)
IDS = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=64)


@given(ORDERS, TIMES, TITLES, IDS)
def test_an_ordered_cursor_decodes_to_its_order_and_keyset(
    order: PlaylistOrder, when: datetime, title: str, playlist_id: str
) -> None:
    value = title if order.field is OrderField.TITLE else when
    key = PlaylistKey(order, value, playlist_id)
    assert ids.decode_ordered_playlist_cursor(ids.ordered_playlist_cursor(key)) == key


@pytest.mark.parametrize(
    "text",
    [
        '["TITLE","ASC","\\u0000","x"]',
        '["TITLE","ASC","\\ud800","x"]',
        '["TITLE","UP","a","x"]',
        '["CREATED_AT","ASC","2020-01-01T00:00:00","x"]',  # no time zone
        '["CREATED_AT","ASC","yesterday","x"]',
        '["TITLE","ASC","a",""]',
        '["TITLE","ASC",1,"x"]',
        '["TITLE","ASC","a"]',
        "{}",
        "[" * 3000 + "]" * 3000,  # json.loads: RecursionError
        '[["TITLE"],"ASC","a","x"]',
    ],
)
def test_a_forged_ordered_cursor_is_malformed(text: str) -> None:
    with pytest.raises(ids.MalformedId):
        ids.decode_ordered_playlist_cursor(ids.cursor("o", text))


def test_an_old_cursor_without_a_time_zone_is_malformed() -> None:
    with pytest.raises(ids.MalformedId):
        ids.decode_ordered_playlist_cursor(ids.cursor("p", "2020-01-01T00:00:00|x"))


SCHEMA = build_schema()._schema


def cost(document: str) -> int:
    found = operation_cost(SCHEMA, parse(document), None, {}, RequestLimits())
    assert found is not None
    return found.cost


def test_the_new_connections_and_the_duration_are_costed() -> None:
    assert cost('{ searchPlaylists(query: "a", first: 10) { edges { node { id } } } }') == 21
    # A read of its own per user: 50 more than its selection (cost.OWN_READ_FIELDS).
    assert cost('{ user(id: "u") { playlists(last: 10) { edges { node { id } } } } }') == 72
    per_entry = (
        '{ playlist(id: "p") { entries(first: 100) { edges { node {'
        " addedBy { playlists(first: 0) { totalCount } } } } } } }"
    )
    assert cost(per_entry) > 100 * 50  # 24 aliases of it ran 4-8 s within the limit
    assert cost("{ viewer { playlists { edges { node { id } } } } }") == 2 + 50 * 2
    assert cost("{ viewer { playlists(first: 10) { edges { node { totalDurationMs } } } } }") == (
        2 + 10 * (2 + 50)
    )
    nested = (
        "{ viewer { playlists(first: 100) { edges { node { owner { "
        "playlists(first: 100) { edges { node { id } } } } } } } } }"
    )
    assert cost(nested) > RequestLimits().max_query_cost


def test_durations_are_kept_for_their_time_and_size_only(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("chorus.resolvers.durations.time.monotonic", lambda: now[0])
    memo = Durations(ttl_s=10, size=2)
    memo.put("a", 1, 500)
    assert memo.get("a", 1) == 500
    assert memo.get("a", 2) is None
    now[0] = 110.0
    assert memo.get("a", 1) is None
    memo.put("a", 1, 1)
    memo.put("b", 1, 2)
    memo.put("c", 1, 3)
    assert memo.get("a", 1) is None
    assert (memo.get("b", 1), memo.get("c", 1)) == (2, 3)
