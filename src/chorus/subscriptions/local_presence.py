"""The embedded profile's presence store: dictionaries in this process, and a heap of expiries.

A session lives until its expiry unless put again (the heartbeat, a repeated
``setPresence``). Expiry alone bounds what is held: a timer on the event
loop fires at the earliest expiry and forgets what expired — whether or not
anyone reads that playlist's presence again (before, an expired declaration
stayed until its playlist's presence was read: 100,000 declarations with a
0.3 s TTL were all still held 2 s later, ~29 MB). Each firing handles at
most :data:`EXPIRED_PER_TURN` sessions, then lets the loop run before going
on, so a burst of expiries never holds the loop.

Every session has at most one entry in the heap, so the heap holds no more
than the sessions kept plus those removed within the last TTL. An entry
whose session was put again since (a later expiry) goes back in at that
expiry. A session that expires is told to the change handlers like a
removal (a watcher hears it at once, not at its next sweep).
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Sequence

from chorus.domain.presence import Session
from chorus.subscriptions.presence import Changed, Held

EXPIRED_PER_TURN = 500
"""Expired sessions forgotten per turn of the event loop.

About 2 µs each, the change handlers' call included (measured on the 2-core
machine): a turn holds the loop about a millisecond."""

_Key = tuple[str, str]
"""``(playlist_id, session_id)``."""


class LocalPresenceStore:
    """The embedded profile's store: a dictionary; a change is a call.

    Args:
        clock: seconds, monotonic (the expiries are compared with it; the
            timer waits on the event loop's own clock for the difference).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sessions: dict[str, dict[str, tuple[Session, float]]] = {}
        self._handlers: list[Changed] = []
        self._expiries: list[tuple[float, str, str]] = []
        self._queued: set[_Key] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    @property
    def session_count(self) -> int:
        """Sessions kept, over every playlist (expired ones not yet forgotten included)."""
        return sum(len(sessions) for sessions in self._sessions.values())

    @property
    def expiry_count(self) -> int:
        """Entries in the heap of expiries (at most one per session kept or lately removed)."""
        return len(self._expiries)

    async def put(self, playlist_id: str, session_id: str, session: Session, ttl_s: float) -> None:
        now = self._clock()
        sessions = self._sessions.setdefault(playlist_id, {})
        old = sessions.get(session_id)
        if old is not None and old[1] > now:
            kept = old[0]
            if kept.user_id == session.user_id and kept.state is session.state:
                session = kept
        expires = now + ttl_s
        sessions[session_id] = (session, expires)
        if (playlist_id, session_id) not in self._queued:
            self._queue(expires, playlist_id, session_id)
        if old is None or old[1] <= now or old[0] != session:
            self._tell(playlist_id, session_id, session)

    async def refresh(self, held: Sequence[Held], ttl_s: float) -> None:
        for playlist_id, session_id, session in held:
            await self.put(playlist_id, session_id, session, ttl_s)

    async def remove(self, playlist_id: str, session_id: str, ttl_s: float) -> None:
        # No heartbeat can write it back: refresh runs to its end without yielding, so
        # it reads the held sessions and writes them in one step (ttl_s is not needed).
        # Its heap entry stays until its time: dropped then (one entry per key at most).
        if self._forget(playlist_id, session_id):
            self._tell(playlist_id, session_id, None)

    async def remove_many(self, ended: Sequence[tuple[str, str]], ttl_s: float) -> None:
        for playlist_id, session_id in ended:
            await self.remove(playlist_id, session_id, ttl_s)

    async def read(self, playlist_id: str) -> dict[str, Session]:
        """The unexpired sessions (the timer forgets the others, and tells of them)."""
        now = self._clock()
        sessions = self._sessions.get(playlist_id, {})
        return {s: session for s, (session, expires) in sessions.items() if expires > now}

    async def listen(self, playlist_id: str) -> None:
        """Every change is told at once: nothing to subscribe."""

    async def unlisten(self, playlist_id: str) -> None: ...

    def on_change(self, handler: Changed) -> None:
        self._handlers.append(handler)

    def on_gap(self, handler: Callable[[], None]) -> None:
        """Never called: an in-process call loses nothing."""

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, float("inf")
        self._sessions.clear()
        self._expiries.clear()
        self._queued.clear()

    def _tell(self, playlist_id: str, session_id: str, session: Session | None) -> None:
        for handler in list(self._handlers):
            handler(playlist_id, session_id, session)

    def _forget(self, playlist_id: str, session_id: str) -> bool:
        sessions = self._sessions.get(playlist_id, {})
        gone = sessions.pop(session_id, None) is not None
        if not sessions:
            self._sessions.pop(playlist_id, None)
        return gone

    def _queue(self, expires: float, playlist_id: str, session_id: str) -> None:
        heapq.heappush(self._expiries, (expires, playlist_id, session_id))
        self._queued.add((playlist_id, session_id))
        if expires < self._timer_at:
            self._schedule(expires)

    def _schedule(self, at: float) -> None:
        """Fire :meth:`_expire` at ``at`` (the store's clock), replacing an earlier timer."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, at - self._clock()), self._expire
        )

    def _expire(self) -> None:
        """Forget up to :data:`EXPIRED_PER_TURN` expired sessions; set the next timer."""
        self._timer, self._timer_at = None, float("inf")
        now = self._clock()
        for _ in range(EXPIRED_PER_TURN):
            if not self._expiries or self._expiries[0][0] > now:
                break
            _, playlist_id, session_id = heapq.heappop(self._expiries)
            self._queued.discard((playlist_id, session_id))
            kept = self._sessions.get(playlist_id, {}).get(session_id)
            if kept is None:
                continue  # removed since
            if kept[1] > now:
                self._queue(kept[1], playlist_id, session_id)  # put again since
            elif self._forget(playlist_id, session_id):
                self._tell(playlist_id, session_id, None)
        if self._expiries:
            # Due already (more than one turn's worth): next turn, after others'.
            self._schedule(max(self._expiries[0][0], now))
        else:
            # Sets and dictionaries keep their largest table when emptied.
            self._queued = set()
            if not self._sessions:
                self._sessions = {}


__all__ = ["EXPIRED_PER_TURN", "LocalPresenceStore"]
