"""The circuit breaker's state machine, on an injected clock."""

from __future__ import annotations

import pytest

from chorus.resilience.breaker import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def breaker(clock: Clock, changes: list[BreakerState] | None = None) -> CircuitBreaker:
    on_change = changes.append if changes is not None else None
    return CircuitBreaker(failures=3, reset_s=10.0, clock=clock, on_change=on_change)


def test_closed_allows_and_opens_after_n_consecutive_failures(clock: Clock) -> None:
    b = breaker(clock)
    for _ in range(2):
        assert b.allow()
        b.record_failure()
    assert b.state is BreakerState.CLOSED
    b.record_failure()
    assert b.state is BreakerState.OPEN
    assert not b.allow()


def test_a_success_resets_the_failure_count(clock: Clock) -> None:
    b = breaker(clock)
    b.record_failure()
    b.record_failure()
    b.record_success()
    b.record_failure()
    b.record_failure()
    assert b.state is BreakerState.CLOSED


def test_open_refuses_until_reset_then_allows_exactly_one_trial(clock: Clock) -> None:
    b = breaker(clock)
    for _ in range(3):
        b.record_failure()
    clock.now += 9.9
    assert not b.allow()
    clock.now += 0.1
    assert b.allow()
    assert b.state is BreakerState.HALF_OPEN
    assert not b.allow(), "only one trial while half-open"


def test_a_successful_trial_closes(clock: Clock) -> None:
    changes: list[BreakerState] = []
    b = breaker(clock, changes)
    for _ in range(3):
        b.record_failure()
    clock.now += 10
    assert b.allow()
    b.record_success()
    assert b.state is BreakerState.CLOSED
    assert b.allow()
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]


def test_a_failed_trial_reopens_for_another_full_reset_period(clock: Clock) -> None:
    b = breaker(clock)
    for _ in range(3):
        b.record_failure()
    clock.now += 10
    assert b.allow()
    clock.now += 1
    b.record_failure()
    assert b.state is BreakerState.OPEN
    clock.now += 9.5
    assert not b.allow()
    clock.now += 0.5
    assert b.allow()


def test_a_trial_that_never_reports_is_replaced_after_the_reset_period(clock: Clock) -> None:
    b = breaker(clock)
    for _ in range(3):
        b.record_failure()
    clock.now += 10
    assert b.allow()  # the trial's caller is cancelled and never reports
    clock.now += 5
    assert not b.allow()
    clock.now += 5
    assert b.allow()


def test_the_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        CircuitBreaker(failures=0)
