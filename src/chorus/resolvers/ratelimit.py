"""Per-user rate limiting of mutations (off unless configured).

A token bucket per user and process: ``per_minute`` commands a minute on
average, bursts of up to ``per_minute``. Refused commands come back as the
``RATE_LIMITED`` user error, committing nothing; the client retries later
with the same operation id.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RateLimiter:
    """Token buckets keyed by user id.

    Args:
        per_minute: sustained rate and burst size.
        clock: monotonic seconds.
        max_users: buckets kept; the least recently used are dropped beyond it.
    """

    def __init__(
        self,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_users: int = 100_000,
    ) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._max_users = max_users
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, user_id: str) -> bool:
        """Take one token from the user's bucket; ``False`` when it is empty."""
        now = self._clock()
        tokens, seen = self._buckets.pop(user_id, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - seen) * self.per_minute / 60)
        allowed = tokens >= 1
        self._buckets[user_id] = (tokens - 1 if allowed else tokens, now)
        if len(self._buckets) > self._max_users:
            del self._buckets[next(iter(self._buckets))]
        return allowed
