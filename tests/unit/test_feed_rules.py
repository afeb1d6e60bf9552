"""The feed's pure parts: merging pages, cursors, limits and settings (issue 14)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from chorus.domain.errors import InvalidInput, LimitExceeded
from chorus.domain.follows import (
    FanOut,
    FeedItem,
    FeedLimits,
    Target,
    TargetKind,
    check_follow_limit,
    check_target,
    merge,
)
from chorus.graphql.schema.common import arguments, ids
from chorus.resolvers.request_errors import BadUserInput
from chorus.settings import Settings

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def item(playlist: str, version: int, seconds: int) -> FeedItem:
    return FeedItem(playlist, version, "alice", T0 + timedelta(seconds=seconds))


def test_merge_orders_newest_first_dedupes_and_tells_if_more_follow() -> None:
    pushed = [item("a", 3, 30), item("a", 2, 20), item("a", 1, 10)]
    pulled = [item("b", 5, 25), item("a", 2, 20)]  # a moved to pull: both hold a@2
    items, more = merge([pushed, pulled], 3)
    assert [(i.playlist_id, i.version) for i in items] == [("a", 3), ("b", 5), ("a", 2)]
    assert more
    items, more = merge([pushed, pulled], 4)
    assert len(items) == 4
    assert not more


def test_ties_in_time_order_by_playlist_then_version() -> None:
    items, _ = merge([[item("a", 1, 0), item("b", 1, 0), item("b", 2, 0)]], 10)
    assert [(i.playlist_id, i.version) for i in items] == [("b", 2), ("b", 1), ("a", 1)]


def test_push_below_the_threshold_pull_from_it_on() -> None:
    limits = FeedLimits(push_max_followers=10)
    assert limits.pushed(9)
    assert not limits.pushed(10)


def test_the_fan_out_moves_with_hysteresis() -> None:
    limits = FeedLimits()  # pulled from 10,000 followers, pushed again below 9,000
    assert limits.push_again_below == 9_000
    step = limits.next_fan_out
    assert step(FanOut.PUSH, 9_999) is FanOut.PUSH
    assert step(FanOut.PUSH, 10_000) is FanOut.PULL
    assert step(FanOut.PULL, 9_000) is FanOut.PULL  # within the band: no switch
    assert step(FanOut.PULL, 8_999) is FanOut.TO_PUSH
    assert step(FanOut.TO_PUSH, 9_500) is FanOut.TO_PUSH
    assert step(FanOut.TO_PUSH, 10_000) is FanOut.PULL  # the switch is abandoned
    assert step(FanOut.PULL, 0) is FanOut.PUSH  # nobody left to backfill
    # Untouched since migration 0010: by count, as before it.
    assert limits.fan_out(10_000, None) is FanOut.PULL
    assert limits.fan_out(10_000, FanOut.PUSH) is FanOut.PUSH
    assert FeedLimits(push_max_followers=2).push_again_below == 2  # no band below 10


def test_bad_targets_and_the_follow_limit() -> None:
    with pytest.raises(InvalidInput, match="yourself"):
        check_target("bob", Target(TargetKind.USER, "bob"))
    with pytest.raises(InvalidInput, match="user id"):
        check_target("bob", Target(TargetKind.USER, "two words"))
    check_follow_limit(1, FeedLimits(max_follows=2))
    with pytest.raises(LimitExceeded):
        check_follow_limit(2, FeedLimits(max_follows=2))


def test_feed_and_follow_cursors_round_trip() -> None:
    key = (T0, "p|x", 7)
    assert ids.decode_feed_cursor(ids.feed_cursor(*key)) == key
    follow = (T0, "USER", "a|b")
    assert ids.decode_follow_cursor(ids.follow_cursor(*follow)) == follow


@pytest.mark.parametrize(
    "cursor",
    [
        "nonsense",
        ids.cursor("d", "x|1|p"),
        ids.cursor("d", f"{T0.isoformat()}|-1|p"),
        ids.cursor("d", f"{T0.isoformat()}|1|"),
        ids.cursor("d", "2026-12-01T00:00:00|1|p"),  # no time zone
        ids.playlist_cursor(T0, "p"),  # another connection's
    ],
)
def test_a_malformed_feed_cursor_is_bad_user_input(cursor: str) -> None:
    with pytest.raises(BadUserInput, match="cursor"):
        arguments.feed_position(cursor)


def test_feed_page_sizes() -> None:
    limits = FeedLimits(page_size_default=5, page_size_max=10)
    assert arguments.feed_page_size(limits, None) == 5
    assert arguments.feed_page_size(limits, 10) == 10
    for bad in (-1, 11):
        with pytest.raises(BadUserInput, match="between 0 and 10"):
            arguments.feed_page_size(limits, bad)


def test_feed_settings_are_validated() -> None:
    settings = Settings(feed_push_max_followers=5, feed_retention_days=7)
    assert settings.feed_limits.push_max_followers == 5
    assert settings.feed_limits.retention_days == 7
    with pytest.raises(ValidationError, match="FEED_PAGE_SIZE_DEFAULT"):
        Settings(feed_page_size_default=60, feed_page_size_max=50)
    for field in ("feed_push_max_followers", "max_follows_per_user", "feed_retention_days"):
        with pytest.raises(ValidationError):
            Settings(**{field: 0})
    with pytest.raises(ValidationError, match="at least"):
        Settings(library_secret="short")
