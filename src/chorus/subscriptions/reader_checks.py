"""Who may still read a playlist after a version that changed access, read once for every stream.

A version that changes members, visibility or deletes the playlist is
followed, in every stream of that playlist, by an access check
(:mod:`chorus.subscriptions.stream`). With a thousand subscribers that
would be a thousand pairs of SQL queries for one version: instead the first
stream to check reads the playlist's header and every member's role once,
and the others of this process look themselves up in that answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from dataclasses import dataclass

from chorus.db import repository
from chorus.db.engine import Database
from chorus.domain.model import Playlist, Role, role_can_read

KEPT = 256
"""Answers kept, by ``(playlist, version)`` (least recently used out first)."""


@dataclass(frozen=True, slots=True)
class Readers:
    """A playlist's header and its members' roles, as read after one version."""

    header: Playlist | None
    roles: dict[str, Role]

    def can_read(self, viewer: str) -> bool:
        return self.header is not None and role_can_read(self.roles.get(viewer), self.header)


class SharedAccess:
    """One read of a playlist's readers per version that changed access, shared by every stream."""

    def __init__(self, db: Database, *, kept: int = KEPT) -> None:
        self._db = db
        self._kept = kept
        self._answers: OrderedDict[tuple[str, int], asyncio.Future[Readers]] = OrderedDict()
        self.reads = 0
        """SQL reads made (for tests)."""
        self._heads: dict[str, tuple[float, asyncio.Future[int | None]]] = {}
        self._waiting: dict[str, asyncio.Future[Readers]] = {}
        """Per playlist: the read that has not started yet, which arriving callers share."""
        self._reading: dict[str, asyncio.Future[Readers]] = {}
        """Per playlist: the read under way."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def since_now(self, playlist_id: str) -> Readers:
        """The playlist's header and members' roles, as read after this call began.

        What a new subscriber needs: its stream joined the hub first, so a
        read that starts later misses nothing the stream will not hear. The
        callers arriving while such a read is under way share the next one,
        which starts when it ends (at most one read under way and one waiting
        per playlist): 10,000 subscribes at once made 10,000 reads, and the
        last ones waited a minute for a pooled connection and failed.
        """
        waiting = self._waiting.get(playlist_id)
        if waiting is None:
            waiting = self._waiting[playlist_id] = asyncio.get_running_loop().create_future()
            # Retrieved here too, so that no caller left means no "never retrieved".
            waiting.add_done_callback(lambda f: f.cancelled() or f.exception())
            task = asyncio.ensure_future(self._read_in_turn(playlist_id, waiting))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(waiting)

    async def _read_in_turn(self, playlist_id: str, waiting: asyncio.Future[Readers]) -> None:
        reading = self._reading.get(playlist_id)
        if reading is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(reading)
        # From here on, arriving callers wait for the next read: this one may
        # already be too old for them.
        if self._waiting.get(playlist_id) is waiting:
            del self._waiting[playlist_id]
        read = asyncio.ensure_future(self._read(playlist_id))
        self._reading[playlist_id] = read
        try:
            waiting.set_result(await read)
        except Exception as error:
            waiting.set_exception(error)
        finally:
            if self._reading.get(playlist_id) is read:
                del self._reading[playlist_id]

    async def can_read(self, playlist_id: str, version: int, viewer: str) -> bool:
        """Whether ``viewer`` may read ``playlist_id`` now, checked after ``version`` was sent.

        The read happens after ``version`` committed (so it sees that
        version's change, or a later one), once per version for the process.
        """
        return (await self.readers(playlist_id, version)).can_read(viewer)

    async def readers(self, playlist_id: str, version: int) -> Readers:
        """The playlist's header and members' roles, read once after ``version`` for the process."""
        key = (playlist_id, version)
        future = self._answers.get(key)
        if future is None:
            future = asyncio.ensure_future(self._read(playlist_id))
            self._answers[key] = future
            while len(self._answers) > self._kept:
                self._answers.popitem(last=False)
        try:
            return await asyncio.shield(future)
        except Exception:
            self._answers.pop(key, None)  # the next stream reads again
            raise

    async def fresh(self, playlist_id: str) -> Readers:
        """The playlist's header and members' roles, read now (not shared)."""
        return await self._read(playlist_id)

    async def head(self, playlist_id: str, *, max_age_s: float) -> int | None:
        """The playlist's version (``None``: no such playlist), as read at most ``max_age_s`` ago.

        What a quiet stream asks to learn whether it missed an event: every
        quiet stream of the playlist shares one read.
        """
        now = time.monotonic()
        found = self._heads.get(playlist_id)
        if (
            found is None
            or now - found[0] > max_age_s
            or (found[1].done() and found[1].exception() is not None)
        ):
            if len(self._heads) >= self._kept:
                self._heads.clear()  # only recent reads matter: start afresh
            found = (now, asyncio.ensure_future(self._read_head(playlist_id)))
            self._heads[playlist_id] = found
        return await asyncio.shield(found[1])

    async def _read_head(self, playlist_id: str) -> int | None:
        self.reads += 1
        async with self._db.read() as conn:
            header = await repository.get_playlist(conn, playlist_id)
        return header.version if header is not None else None

    async def _read(self, playlist_id: str) -> Readers:
        self.reads += 1
        async with self._db.read() as conn:
            header = await repository.get_playlist(conn, playlist_id)
            members = await repository.get_members(conn, playlist_id)
        return Readers(header, {m.user_id: m.role for m in members})


__all__ = ["KEPT", "Readers", "SharedAccess"]
