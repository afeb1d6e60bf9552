"""Presence of this process: the sessions it holds, the views its watchers read, the store.

Presence is short-lived state, never a version (:mod:`chorus.domain.presence`):

* a **store** keeps every session of every process with an expiry —
  :class:`~chorus.subscriptions.local_presence.LocalPresenceStore` in this
  process (embedded profile: a heap of expiries forgets what expired), or
  :class:`~chorus.subscriptions.redis_presence.RedisPresenceStore` (full
  profile: a sorted set per playlist scored by expiry, and a pub/sub channel
  of changes);
* :class:`Presence` holds this process's sessions (:meth:`Presence.hold`,
  one per live ``playlistEvents`` subscription) and refreshes them every
  ``ttl_s / 3`` (the **heartbeat**), so a session outlives its process by at
  most ``ttl_s``; a declaration (:meth:`Presence.declare`, ``setPresence``)
  is not refreshed: the client repeats it;
* for each playlist someone here watches (``playlistPresence``), one
  :class:`_View` of its sessions, kept by the store's change messages and
  read again every ``ttl_s / 3`` (the **sweep**: what expired, and any
  message lost while the store was away), wakes each :class:`Watch` with
  the users that changed.

Nothing here checks access: :mod:`chorus.subscriptions.presence_stream` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from chorus.domain.presence import PresenceState, Session, UserPresence, by_user, of_user
from chorus.metrics import PRESENCE_WRITES_LOST
from chorus.resilience.tasks import cancel_and_wait

log = logging.getLogger("chorus.presence")

V = TypeVar("V")

Changed = Callable[[str, str, Session | None], None]
"""Called with ``(playlist_id, session_id, session)``; ``None``: the session ended."""

Held = tuple[str, str, Session]
"""``(playlist_id, session_id, session)``: one session a process holds."""


class PresenceStore(Protocol):
    """Where sessions live, with an expiry, and how changes to them are heard.

    Every method may raise the store's connection errors; :class:`Presence`
    logs them and goes on (presence must never fail a subscription).
    """

    async def put(self, playlist_id: str, session_id: str, session: Session, ttl_s: float) -> None:
        """Keep ``session`` for ``ttl_s`` seconds; same user and state as stored: keep its since."""
        ...

    async def refresh(self, held: Sequence[Held], ttl_s: float) -> None:
        """:meth:`put` each of ``held`` again (the heartbeat), in as few round trips as may be."""
        ...

    async def remove(self, playlist_id: str, session_id: str, ttl_s: float) -> None:
        """End a session now. A heartbeat (:meth:`refresh`) read before the removal and
        arriving after it must not write the session back, for ``ttl_s`` seconds or more."""
        ...

    async def remove_many(self, ended: Sequence[tuple[str, str]], ttl_s: float) -> None:
        """:meth:`remove` each ``(playlist_id, session_id)``, in as few round trips as may be."""
        ...

    async def read(self, playlist_id: str) -> dict[str, Session]:
        """The live (unexpired) sessions of a playlist, by session id."""
        ...

    async def listen(self, playlist_id: str) -> None:
        """Start calling the change handler for this playlist (returns once it is heard)."""
        ...

    async def unlisten(self, playlist_id: str) -> None: ...

    def on_change(self, handler: Changed) -> None: ...

    def on_gap(self, handler: Callable[[], None]) -> None:
        """``handler`` is called when changes may have been lost (a reconnect)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(eq=False)
class Watch:
    """One watcher's handle on a playlist's presence (``playlistPresence``).

    ``dirty`` holds the users whose presence may have changed since the
    watcher last looked (``everything``: all of them); ``wakeup`` is set
    with them.
    """

    view: _View
    dirty: set[str] = field(default_factory=set)
    everything: bool = False
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def present(self) -> dict[str, UserPresence]:
        """Every present user, now."""
        return self.view.present()

    def of(self, user_id: str) -> UserPresence | None:
        """One user's presence now (``None``: not present)."""
        return of_user(self.view.by_user.get(user_id, {}).values())

    def take(self) -> tuple[set[str], bool]:
        """The dirty users and whether everything is, cleared (the caller clears ``wakeup``)."""
        dirty, everything = self.dirty, self.everything
        self.dirty, self.everything = set(), False
        return dirty, everything


@dataclass(eq=False)
class _View:
    """A watched playlist's sessions in this process, and its watchers."""

    sessions: dict[str, Session] = field(default_factory=dict)
    by_user: dict[str, dict[str, Session]] = field(default_factory=dict)
    watchers: set[Watch] = field(default_factory=set)
    ready: asyncio.Future[None] = field(default_factory=asyncio.Future)
    early: list[tuple[str, Session | None]] | None = field(default_factory=list)
    """Changes heard before the first read answered (applied after it); ``None`` once read."""

    def present(self) -> dict[str, UserPresence]:
        return by_user(self.sessions.values())

    def apply(self, session_id: str, session: Session | None) -> set[str]:
        """Take one change; the users it concerns."""
        users: set[str] = set()
        old = self.sessions.pop(session_id, None)
        if old is not None:
            users.add(old.user_id)
            mine = self.by_user.get(old.user_id, {})
            mine.pop(session_id, None)
            if not mine:
                self.by_user.pop(old.user_id, None)
        if session is not None:
            users.add(session.user_id)
            self.sessions[session_id] = session
            self.by_user.setdefault(session.user_id, {})[session_id] = session
        return users

    def replace(self, sessions: dict[str, Session]) -> set[str]:
        """Take a whole read; the users whose sessions differ."""
        users: set[str] = set()
        for session_id in set(self.sessions) | set(sessions):
            new = sessions.get(session_id)
            if self.sessions.get(session_id) != new:
                users |= self.apply(session_id, new)
        return users

    def tell(self, users: Iterable[str], *, everything: bool = False) -> None:
        users = set(users)
        if not users and not everything:
            return
        for watch in self.watchers:
            watch.dirty |= users
            watch.everything = watch.everything or everything
            watch.wakeup.set()


class Presence:
    """This process's presence: its sessions, their heartbeat, the views of its watchers.

    Args:
        store: where sessions live.
        ttl_s: how long a session lives unless refreshed (seconds,
            ``CHORUS_PRESENCE_TTL_S``); the heartbeat and the sweep run every
            ``ttl_s / 3``.
    """

    def __init__(self, store: PresenceStore, *, ttl_s: float = 30.0) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.store = store
        self.ttl_s = ttl_s
        self.interval_s = ttl_s / 3
        self._held: dict[tuple[str, str], Session] = {}
        self._views: dict[str, _View] = {}
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._sweep_now = asyncio.Event()
        # New held sessions and ended ones, each written in one store call per burst.
        self._joins = _Coalesced[Session](self._write_joins, "presence-joins")
        self._leaves = _Coalesced[None](self._write_leaves, "presence-leaves")
        self._lost_since_log = 0
        self._logged_at = -float("inf")
        store.on_change(self._changed)
        store.on_gap(self._sweep_now.set)

    async def start(self) -> None:
        """Start the heartbeat and the sweep (idempotent)."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._heartbeat(), name="presence-heartbeat"),
                asyncio.create_task(self._sweep(), name="presence-sweep"),
            ]

    async def aclose(self) -> None:
        """Stop, and end this process's sessions at once (a graceful stop leaves no one behind)."""
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks = []
        await self._joins.aclose()  # the queued joins are held: removed below
        ended = [*self._held, *await self._leaves.aclose()]
        self._held = {}
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self.store.remove_many(ended, self.ttl_s)
        await self.store.aclose()

    @contextlib.asynccontextmanager
    async def hold(self, playlist_id: str, user_id: str) -> AsyncIterator[None]:
        """``user_id`` is VIEWING ``playlist_id`` while the block runs (a live subscription)."""
        session_id = f"s:{uuid.uuid4().hex}"
        session = Session(user_id, PresenceState.VIEWING, time.time())
        self._held[(playlist_id, session_id)] = session
        try:
            # One store call at a time (one pipeline on a single Redis): a burst of
            # thousands of subscribes takes one connection, not one each.
            await self._joins.add((playlist_id, session_id), session)
            yield
        finally:
            self._held.pop((playlist_id, session_id), None)
            # Shielded: the subscription's task is being cancelled as it closes.
            await asyncio.shield(self._leaves.add((playlist_id, session_id), None))

    async def declare(self, playlist_id: str, user_id: str, state: PresenceState | None) -> None:
        """``setPresence``: the user's declared state for ``ttl_s`` seconds (``None``: withdrawn).

        Declaring the same state again keeps its ``since`` and extends it.

        Raises:
            the store's connection errors (the caller answers unavailable).
        """
        session_id = f"d:{user_id}"
        if state is None:
            await self.store.remove(playlist_id, session_id, self.ttl_s)
        else:
            session = Session(user_id, state, time.time())
            await self.store.put(playlist_id, session_id, session, self.ttl_s)

    async def current(self, playlist_id: str) -> dict[str, UserPresence]:
        """Every present user of a playlist, now (from a watched view, else the store).

        Raises:
            the store's connection errors.
        """
        view = self._views.get(playlist_id)
        if view is not None and view.ready.done() and view.ready.exception() is None:
            return view.present()
        return by_user((await self.store.read(playlist_id)).values())

    @contextlib.asynccontextmanager
    async def watch(
        self, playlist_id: str, wakeup: asyncio.Event | None = None
    ) -> AsyncIterator[Watch]:
        """A :class:`Watch` of the playlist's presence while the block runs.

        ``wakeup``: an event the watcher shares with what else it waits for.

        Raises:
            the store's connection errors, when the first read fails.
        """
        async with self._lock:
            view = self._views.get(playlist_id)
            if view is None:
                view = self._views[playlist_id] = _View()
                try:
                    await self.store.listen(playlist_id)
                    view.replace(await self.store.read(playlist_id))
                except BaseException as error:
                    del self._views[playlist_id]
                    view.ready.set_exception(error)
                    view.ready.exception()  # retrieved: no "never retrieved" warning
                    raise
                for session_id, session in view.early or ():
                    view.apply(session_id, session)
                view.early = None
                view.ready.set_result(None)
            watch = Watch(view) if wakeup is None else Watch(view, wakeup=wakeup)
            view.watchers.add(watch)
        try:
            yield watch
        finally:
            view.watchers.discard(watch)
            if not view.watchers and self._views.get(playlist_id) is view:
                del self._views[playlist_id]
                await asyncio.shield(self._quietly(self.store.unlisten(playlist_id)))

    @property
    def held_count(self) -> int:
        """Sessions this process holds (for tests and metrics)."""
        return len(self._held)

    def _changed(self, playlist_id: str, session_id: str, session: Session | None) -> None:
        view = self._views.get(playlist_id)
        if view is None:
            return
        if view.early is not None:
            view.early.append((session_id, session))
            return
        view.tell(view.apply(session_id, session))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            held = [(p, s, session) for (p, s), session in self._held.items()]
            if held:
                await self._quietly(self.store.refresh(held, self.ttl_s), writes=len(held))

    async def _sweep(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s):
                    await self._sweep_now.wait()
            gap = self._sweep_now.is_set()
            self._sweep_now.clear()
            for playlist_id, view in list(self._views.items()):
                if view.early is not None:
                    continue  # its first read is under way
                try:
                    sessions = await self.store.read(playlist_id)
                except Exception as error:
                    log.warning("presence of %s not read: %s", playlist_id, error)
                    continue
                view.tell(view.replace(sessions), everything=gap)

    async def _write_joins(self, batch: dict[tuple[str, str], Session]) -> None:
        # A subscription that ended while queued is not written back.
        held = [(p, s, v) for (p, s), v in batch.items() if (p, s) in self._held]
        if held:
            await self._quietly(self.store.refresh(held, self.ttl_s), writes=len(held))

    async def _write_leaves(self, batch: dict[tuple[str, str], None]) -> None:
        # When thousands of sockets close at once (a gateway restarted, a network
        # cut): one call, not one connection each from a pool that refuses past its limit.
        await self._quietly(self.store.remove_many(list(batch), self.ttl_s), writes=len(batch))

    async def _quietly(self, call: Awaitable[None], *, writes: int = 1) -> None:
        """Await a best-effort write: a failure is counted, and logged once per interval."""
        try:
            await call
        except Exception as error:
            PRESENCE_WRITES_LOST.inc(writes)
            self._lost_since_log += writes
            now = time.monotonic()
            if now - self._logged_at >= self.interval_s:
                log.warning(
                    "presence store: %s (%d writes lost since the last such warning)",
                    error,
                    self._lost_since_log,
                )
                self._logged_at, self._lost_since_log = now, 0


__all__ = ["Changed", "Held", "Presence", "PresenceStore", "Watch"]


class _Coalesced(Generic[V]):
    """Writes of ``(playlist_id, session_id) → V`` coalesced: ``write`` is called with every
    item queued while the call before it ran, one call at a time, by a task of ``name``."""

    def __init__(
        self, write: Callable[[dict[tuple[str, str], V]], Awaitable[None]], name: str
    ) -> None:
        self._write = write
        self._name = name
        self.queued: dict[tuple[str, str], tuple[V, asyncio.Future[None]]] = {}
        self.writing: asyncio.Task[None] | None = None

    async def add(self, key: tuple[str, str], value: V) -> None:
        """Queue ``value`` and return once a write holding it ended (or :meth:`aclose`)."""
        done = asyncio.get_running_loop().create_future()
        self.queued[key] = (value, done)
        if self.writing is None or self.writing.done():
            self.writing = asyncio.create_task(self._run(), name=self._name)
        await done

    async def _run(self) -> None:
        while self.queued:
            batch, self.queued = self.queued, {}
            try:
                await self._write({key: value for key, (value, _) in batch.items()})
            except asyncio.CancelledError:  # aclose: returned, and let go, there
                self.queued = batch | self.queued
                raise
            for _, done in batch.values():
                _let_go(done)

    async def aclose(self) -> list[tuple[str, str]]:
        """Stop writing; the keys not written, their callers let go (also those of a task
        cancelled before it ran, which lets go of no one)."""
        if self.writing is not None:
            await cancel_and_wait(self.writing)
            self.writing = None
        left, self.queued = self.queued, {}
        for _, done in left.values():
            _let_go(done)
        return list(left)


def _let_go(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
