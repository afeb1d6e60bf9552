"""Per-user rate limits (off unless configured): mutations, and query cost points.

A token bucket per user and process: ``per_minute`` tokens a minute on
average, bursts of up to ``per_minute``. Mutations take one token each
(``CHORUS_RATE_LIMIT_PER_MINUTE``); refused commands come back as the
``RATE_LIMITED`` user error, committing nothing; the client retries later
with the same operation id. A retry of a command that already committed is
free: it is answered from the store and its token is given back
(:meth:`RateLimiter.refund`), even when the bucket is empty. Operations take their cost
(:mod:`chorus.graphql.guards.cost`, ``CHORUS_QUERY_COST_PER_MINUTE``); a refused
one is the top-level ``RATE_LIMITED`` error and runs nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class RateLimiter:
    """Token buckets keyed by user id.

    Args:
        per_minute: sustained rate and burst size.
        clock: monotonic seconds.
        max_users: buckets kept; the least recently used are dropped beyond it.
    """

    limited = True
    """False for :class:`Unlimited`, the limiter of a limit that is off."""

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

    def allow(self, user_id: str, cost: float = 1) -> bool:
        """Take ``cost`` tokens from the user's bucket; ``False`` (taking none) when short.

        A cost above ``per_minute`` (a batch of more operations than a minute's
        tokens) is taken from a full bucket, which goes into debt: it could never
        be allowed otherwise, and a client retrying it would be stuck for good.
        The user then waits until the debt is paid, so the rate holds on average.
        """
        tokens = self.available(user_id)
        allowed = tokens >= min(cost, float(self.per_minute))
        self._buckets.pop(user_id, None)  # re-inserted last: the most recently used
        self._buckets[user_id] = (tokens - cost if allowed else tokens, self._clock())
        if len(self._buckets) > self._max_users:
            del self._buckets[next(iter(self._buckets))]
        return allowed

    def refund(self, user_id: str, cost: float = 1) -> None:
        """Give back ``cost`` tokens taken for work that turned out free (a replay).

        The bucket never holds more than ``per_minute``.
        """
        tokens = min(float(self.per_minute), self.available(user_id) + cost)
        self._buckets.pop(user_id, None)
        self._buckets[user_id] = (tokens, self._clock())

    def retry_after_ms(self, user_id: str, cost: float = 1) -> int:
        """Milliseconds until the user's bucket holds what :meth:`allow` asks for ``cost``
        (at least 1): the ``retryAfterMs`` of a refusal."""
        short = min(cost, float(self.per_minute)) - self.available(user_id)
        return max(1, math.ceil(short * 60_000 / self.per_minute))

    def available(self, user_id: str) -> float:
        """Tokens in the user's bucket now (a user not seen yet has a full one)."""
        now = self._clock()
        tokens, seen = self._buckets.get(user_id, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - seen) * self.per_minute / 60)


class Unlimited(RateLimiter):
    """The limiter of a limit that is off (its setting unset or 0, :mod:`chorus.bootstrap`).

    It allows everything, keeps no bucket and gives back nothing; ``per_minute``
    is 0, and :meth:`retry_after_ms` is never asked, since nothing is refused.
    """

    limited = False

    def __init__(self) -> None:
        super().__init__(0, max_users=0)

    def allow(self, user_id: str, cost: float = 1) -> bool:
        return True

    def refund(self, user_id: str, cost: float = 1) -> None:
        return None

    def available(self, user_id: str) -> float:
        return math.inf
