from __future__ import annotations

import math

from chorus.resolvers.ratelimit import RateLimiter, Unlimited


def test_a_burst_up_to_the_rate_then_refusals_then_refill() -> None:
    now = [0.0]
    limiter = RateLimiter(3, clock=lambda: now[0])
    assert [limiter.allow("alice") for _ in range(4)] == [True, True, True, False]
    assert limiter.allow("bob")  # buckets are per user
    now[0] += 20.0  # a third of a minute: one token back
    assert limiter.allow("alice")
    assert not limiter.allow("alice")


def test_buckets_are_bounded() -> None:
    limiter = RateLimiter(1, max_users=2)
    for user in ("a", "b", "c"):
        assert limiter.allow(user)
    assert limiter.allow("a")  # "a" was dropped as least recently used: a fresh bucket


def test_a_refund_gives_tokens_back_up_to_a_full_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(3, clock=lambda: now[0])
    assert limiter.allow("alice", 2)
    limiter.refund("alice")
    assert limiter.available("alice") == 2
    limiter.refund("alice", 5)
    assert limiter.available("alice") == 3
    limiter.refund("bob")  # a user not seen yet already has a full bucket
    assert limiter.available("bob") == 3


def test_more_than_a_minute_s_tokens_is_taken_from_a_full_bucket_into_debt() -> None:
    now = [0.0]
    limiter = RateLimiter(20, clock=lambda: now[0])
    assert limiter.allow("alice", 50)  # a batch of 50 operations at 20 a minute
    assert limiter.available("alice") == -30
    now[0] += 60.0  # a minute later the debt is not paid yet: 20 tokens back, -10
    assert not limiter.allow("alice")
    assert not limiter.allow("alice", 50)  # not full: no second batch in debt
    now[0] += 90.0  # 30 more tokens: full (20) again
    assert limiter.allow("alice", 50)
    assert limiter.allow("bob", 21)
    assert limiter.available("bob") == -1


def test_the_retry_hint_is_when_the_bucket_holds_the_cost_again() -> None:
    now = [0.0]
    limiter = RateLimiter(6, clock=lambda: now[0])  # a token every 10 s
    for _ in range(6):
        assert limiter.allow("alice")
    wait = limiter.retry_after_ms("alice")
    assert wait == 10_000
    now[0] += (wait - 1) / 1000
    assert not limiter.allow("alice")
    now[0] += 0.001
    assert limiter.allow("alice")
    # A batch of 3 waits for 3 tokens; more than a minute's waits for a full bucket.
    assert limiter.retry_after_ms("alice", 3) == 30_000
    assert limiter.retry_after_ms("alice", 60) == 60_000
    assert limiter.retry_after_ms("bob") == 1  # a full bucket: at once


def test_a_limit_that_is_off_allows_everything_and_keeps_nothing() -> None:
    off = Unlimited()
    assert not off.limited
    assert RateLimiter(3).limited
    assert all(off.allow("alice", 1_000) for _ in range(100))
    off.refund("alice", 5)
    assert off.available("alice") == math.inf
