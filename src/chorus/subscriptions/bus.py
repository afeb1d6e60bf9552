"""The event bus between the outbox relay and the API processes.

A bus delivers :class:`~chorus.domain.changes.PlaylistEvent` payloads per
playlist, at least once and in no guaranteed order across reconnects: every
consumer dedupes by ``(playlist_id, version)`` and repairs gaps from SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from chorus.domain.changes import PlaylistEvent

Deliver = Callable[[PlaylistEvent], None]
"""Called with each event of a subscribed playlist; must not block."""

GapHandler = Callable[[], None]
"""Called when events may have been lost (a reconnect); must not block."""

Notice = Callable[[], None]
"""Called when a user's follows changed (in another process too); must not block."""


class Bus(Protocol):
    async def publish(self, event: PlaylistEvent) -> None:
        """Send ``event`` to the subscribers of its playlist."""
        ...

    async def subscribe(self, playlist_id: str, deliver: Deliver) -> None:
        """Start calling ``deliver`` with the events of ``playlist_id``."""
        ...

    async def unsubscribe(self, playlist_id: str, deliver: Deliver) -> None:
        """Stop calling ``deliver`` for ``playlist_id``."""
        ...

    def on_gap(self, handler: GapHandler) -> None:
        """Call ``handler`` whenever events may have been lost, e.g. after a reconnect.

        Subscribers then read what they missed from SQL.
        """
        ...

    async def announce_follows(self, user_id: str) -> None:
        """Tell the other API processes that ``user_id`` followed or unfollowed something.

        Best effort: a notice lost with the connection is covered by the gap
        report that connection's loss brings (:meth:`on_gap`).
        """
        ...

    async def watch_follows(self, user_id: str, notice: Notice) -> None:
        """Call ``notice`` whenever another process announces ``user_id``'s follows changed."""
        ...

    async def unwatch_follows(self, user_id: str, notice: Notice) -> None:
        """Stop calling ``notice`` for ``user_id``."""
        ...

    async def aclose(self) -> None: ...


class InProcessBus:
    """The embedded profile's bus: a dictionary of callbacks, delivery is a call."""

    def __init__(self) -> None:
        self._subscribers: dict[str, list[Deliver]] = {}

    async def publish(self, event: PlaylistEvent) -> None:
        for deliver in list(self._subscribers.get(event["playlist_id"], ())):
            deliver(event)

    async def subscribe(self, playlist_id: str, deliver: Deliver) -> None:
        self._subscribers.setdefault(playlist_id, []).append(deliver)

    async def unsubscribe(self, playlist_id: str, deliver: Deliver) -> None:
        listeners = self._subscribers.get(playlist_id, [])
        if deliver in listeners:
            listeners.remove(deliver)
        if not listeners:
            self._subscribers.pop(playlist_id, None)

    def on_gap(self, handler: GapHandler) -> None:
        """Never called: an in-process call loses nothing."""

    async def announce_follows(self, user_id: str) -> None:
        """Nothing to do: there is no other process, and this one was told directly."""

    async def watch_follows(self, user_id: str, notice: Notice) -> None:
        """Nothing to watch: no other process announces follows."""

    async def unwatch_follows(self, user_id: str, notice: Notice) -> None:
        """Nothing was watched."""

    @property
    def subscription_count(self) -> int:
        """Playlists with at least one subscriber (for tests and metrics)."""
        return len(self._subscribers)

    async def aclose(self) -> None:
        self._subscribers.clear()


class BusPublisher:
    """The outbox relay's publisher onto a :class:`Bus` (the embedded profile).

    Satisfies :class:`chorus.events.relay.Publisher`.
    """

    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        """Publish ``events`` in order (no trace context on the bus: ``traceparents`` unused)."""
        for event in events:
            await self._bus.publish(event)
