"""A circuit breaker: stop calling a server that keeps failing, try again later.

States (the classic breaker, as in Nygard's *Release It!*)::

    CLOSED ──N consecutive failures──▶ OPEN ──reset_s later──▶ HALF_OPEN
       ▲                                 ▲                        │ one trial call
       └──────────── success ────────────┼────────────────────────┤
                                         └──────── failure ───────┘

While OPEN, :meth:`CircuitBreaker.allow` says no at once, so callers take
their fallback without waiting for a timeout. HALF_OPEN lets exactly one
trial through; a trial that never reports back (its caller was cancelled)
is given up after another ``reset_s`` and a new one is allowed.

Not thread-safe: meant for one asyncio event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    """Calls go through."""
    OPEN = "open"
    """Calls are refused until ``reset_s`` has passed."""
    HALF_OPEN = "half_open"
    """One trial call is in flight; its outcome closes or reopens the breaker."""


class CircuitBreaker:
    """Counts consecutive failures and refuses calls while the server looks down.

    Args:
        failures: consecutive failures that open the breaker (>= 1).
        reset_s: seconds the breaker stays open before one trial call.
        clock: monotonic seconds (injectable for tests).
        on_change: called with the new state on every transition.
    """

    def __init__(
        self,
        *,
        failures: int = 5,
        reset_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        if failures < 1:
            raise ValueError("failures must be at least 1")
        self.threshold = failures
        self.reset_s = reset_s
        self._clock = clock
        self._on_change = on_change
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._since = 0.0
        """When the breaker opened, or when the current trial started."""

    @property
    def state(self) -> BreakerState:
        return self._state

    def allow(self) -> bool:
        """Whether a call may go to the server now.

        In HALF_OPEN a ``True`` is the trial: the caller must report its
        outcome with :meth:`record_success` or :meth:`record_failure`.
        """
        if self._state is BreakerState.CLOSED:
            return True
        if self._clock() - self._since < self.reset_s:
            return False
        # Open long enough, or the last trial never reported: try once more.
        self._since = self._clock()
        self._set(BreakerState.HALF_OPEN)
        return True

    def record_success(self) -> None:
        """A call succeeded: the server is back."""
        self._consecutive = 0
        self._set(BreakerState.CLOSED)

    def record_failure(self) -> None:
        """A call failed (an error or a timeout)."""
        self._consecutive += 1
        if self._state is BreakerState.HALF_OPEN or self._consecutive >= self.threshold:
            self._since = self._clock()
            self._set(BreakerState.OPEN)

    def _set(self, state: BreakerState) -> None:
        if state is not self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)
