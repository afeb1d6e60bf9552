"""Delivery groups: one rendering of a version for every subscriber who would get the same bytes.

Subscribers of one playlist whose subscription has the same document,
variables and operation name form a **group**. Each of them still runs its
own stream (:mod:`chorus.subscriptions.stream`: its own catch-up, gap repair,
resync and access check), but when two of them reach the same version, the
first renders it and the others take its rendering (:class:`RenderMemo`),
as long as the rendering says that its audience is shared (it read no field
that depends on the viewer). A rendering whose audience is one viewer is
kept for that viewer only.

Nothing here knows GraphQL: a rendering is an opaque value with its
:attr:`Rendering.shared` flag; :mod:`chorus.graphql.execution.delivery` makes them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

MEMO_SIZE = 1_024
"""Renderings kept at once (LRU over groups × versions × audiences)."""

MEMO_TTL_S = 5.0
"""Seconds a rendering is reused: subscribers of one commit get one rendering;
a catch-up much later renders again (media metadata may have changed)."""

_SHARED = "*"
_MISSING = object()
_FAILED = object()


class Rendering(Protocol):
    """What a render gives back; ``shared``: every viewer of the group may get it."""

    @property
    def shared(self) -> bool: ...


R = TypeVar("R", bound=Rendering)


class DirectSink(Protocol):
    """One subscriber's socket, written without waking its stream (:meth:`Hub.release`)."""

    def write(self, rendering: object) -> bool:
        """Send ``rendering`` (a shared one, from :class:`RenderMemo`) now, without waiting.

        Returns:
            Whether it went out; ``False`` (socket closing, its buffer over
            its bound, a rendering it cannot send) leaves the version to the
            subscriber's stream.
        """
        ...


@dataclass(slots=True)
class _Slot:
    future: asyncio.Future[object]
    made_at: float


class RenderMemo:
    """Single-flight renderings by ``(group key, version, audience)``.

    Args:
        size: renderings kept (least recently used out first).
        ttl_s: seconds a rendering is reused.
    """

    def __init__(self, *, size: int = MEMO_SIZE, ttl_s: float = MEMO_TTL_S) -> None:
        self._slots: OrderedDict[tuple[Hashable, int, str], _Slot] = OrderedDict()
        self._size = size
        self._ttl_s = ttl_s
        self.renders = 0
        """Renderings made (for tests and metrics)."""
        self.reuses = 0
        """Renderings handed out again instead of made."""

    async def render(
        self, key: Hashable, version: int, viewer: str, make: Callable[[], Awaitable[R]]
    ) -> R:
        """The rendering of ``version`` for ``viewer`` in group ``key``; ``make`` runs at most once.

        The first caller of a version makes it. If it came out shared, every
        later caller of the group gets it; if not, it is kept for its viewer
        and every other viewer makes (once) their own. A ``make`` that
        raises gives its error to its own caller only: the others make their own.
        """
        shared_key = (key, version, _SHARED)
        found = await self._lookup(shared_key)
        if found is _MISSING:
            return await self._make(shared_key, viewer, make)
        if found is not _FAILED and _is_shared(found):
            self.reuses += 1
            return found  # type: ignore[return-value]  # the slot holds what make gave
        own_key = (key, version, viewer)
        own = await self._lookup(own_key)
        if own is not _MISSING and own is not _FAILED:
            self.reuses += 1
            return own  # type: ignore[return-value]
        return await self._make(own_key, viewer, make)

    def peek(self, key: Hashable, version: int) -> Rendering | None:
        """The finished rendering of ``version`` every viewer of group ``key`` may get, or ``None``.

        Not counted in :attr:`reuses`: whoever hands it out counts it.
        """
        slot = self._slots.get((key, version, _SHARED))
        if slot is None or time.monotonic() - slot.made_at > self._ttl_s:
            return None
        future = slot.future
        if not future.done() or future.exception() is not None:
            return None
        found = future.result()
        return cast("Rendering", found) if _is_shared(found) else None

    async def _lookup(self, slot_key: tuple[Hashable, int, str]) -> object:
        slot = self._slots.get(slot_key)
        if slot is None or time.monotonic() - slot.made_at > self._ttl_s:
            return _MISSING
        self._slots.move_to_end(slot_key)
        future = slot.future
        if future.done():  # the common case: no shield, no task switch
            return _FAILED if future.exception() is not None else future.result()
        try:
            return await asyncio.shield(future)
        except Exception:
            return _FAILED

    async def _make(
        self,
        slot_key: tuple[Hashable, int, str],
        viewer: str,
        make: Callable[[], Awaitable[R]],
    ) -> R:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._put(slot_key, future)
        self.renders += 1
        try:
            made = await make()
        except BaseException:
            # Waiters see a failure and make their own; the slot is not reused.
            future.set_exception(RuntimeError("the rendering failed"))
            future.exception()
            self._slots.pop(slot_key, None)
            raise
        future.set_result(made)
        key, version, audience = slot_key
        if audience == _SHARED and not made.shared:
            own: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            own.set_result(made)
            self._put((key, version, viewer), own)
        return made

    def _put(self, slot_key: tuple[Hashable, int, str], future: asyncio.Future[object]) -> None:
        self._slots[slot_key] = _Slot(future, time.monotonic())
        self._slots.move_to_end(slot_key)
        while len(self._slots) > self._size:
            self._slots.popitem(last=False)


def _is_shared(rendering: object) -> bool:
    return bool(getattr(rendering, "shared", False))


class Groups:
    """Which subscriptions of this process share a group (for ``/metrics``).

    A group is named by its key (playlist, document, variables, operation
    name); :meth:`enter` and :meth:`leave` count its sockets.
    """

    def __init__(self) -> None:
        self._sizes: Counter[Hashable] = Counter()

    def enter(self, key: Hashable) -> None:
        self._sizes[key] += 1

    def leave(self, key: Hashable) -> None:
        self._sizes[key] -= 1
        if self._sizes[key] <= 0:
            del self._sizes[key]

    @property
    def count(self) -> int:
        """Groups with at least one subscription."""
        return len(self._sizes)

    @property
    def sizes(self) -> list[int]:
        """Subscriptions per group, largest first."""
        return sorted(self._sizes.values(), reverse=True)


__all__ = ["MEMO_SIZE", "MEMO_TTL_S", "DirectSink", "Groups", "RenderMemo", "Rendering"]
