"""The one backoff every retry loop waits with."""

from __future__ import annotations

import pytest

from chorus.resilience.backoff import Backoff


def test_delays_double_up_to_the_maximum_and_reset_starts_small() -> None:
    backoff = Backoff(0.05, 0.3)
    assert [backoff.next() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    backoff.reset()
    assert backoff.next() == 0.05


@pytest.mark.parametrize(("first", "most"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_a_backoff_that_would_never_wait_or_shrink_is_refused(first: float, most: float) -> None:
    with pytest.raises(ValueError, match="0 < first_s <= max_s"):
        Backoff(first, most)


async def test_sleep_waits_the_next_delay() -> None:
    backoff = Backoff(0.001, 0.002)
    assert await backoff.sleep() == 0.001
    assert await backoff.sleep() == 0.002
