"""Exponential backoff between retries of a server that is away.

Every retry loop of Chorus (the outbox relay, the Kafka consumers, the Redis
pub/sub reader, the CLI waiting for its database) waits with one
:class:`Backoff`: ``first_s``, then twice the last delay, never more than
``max_s``; :meth:`Backoff.reset` after a success starts small again.
"""

from __future__ import annotations

import asyncio


class Backoff:
    """Delays of ``first_s`` seconds doubling up to ``max_s``.

    Args:
        first_s: the first delay (seconds, > 0).
        max_s: the longest delay (seconds, >= ``first_s``).

    Raises:
        ValueError: ``first_s`` not above 0, or ``max_s`` below it.
    """

    def __init__(self, first_s: float, max_s: float) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError("backoff needs 0 < first_s <= max_s")
        self.first_s = first_s
        self.max_s = max_s
        self._next = first_s

    def reset(self) -> None:
        """The call succeeded: the next failure waits ``first_s`` again."""
        self._next = self.first_s

    def next(self) -> float:
        """The delay to wait now (seconds); the one after it doubles."""
        delay = self._next
        self._next = min(delay * 2, self.max_s)
        return delay

    async def sleep(self) -> float:
        """Wait :meth:`next` seconds; returns how long that was."""
        delay = self.next()
        await asyncio.sleep(delay)
        return delay
