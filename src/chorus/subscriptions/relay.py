"""The outbox relay: unpublished outbox rows → the bus, then stamped published.

It drains in batches until the outbox is empty, then sleeps until a commit
:meth:`OutboxRelay.notify`\\ s it (same process) or ``poll_interval_s``
passes (another process committed). Delivery is at least once; consumers
dedupe by ``(playlist_id, version)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from chorus.db import outbox
from chorus.db.engine import Database
from chorus.subscriptions.bus import Bus

log = logging.getLogger("chorus.relay")


class OutboxRelay:
    """Publishes committed events in outbox order.

    Args:
        db: where the outbox is.
        bus: where events go.
        batch_size: rows claimed per transaction.
        poll_interval_s: the longest sleep between looks at an empty outbox.
    """

    def __init__(
        self,
        db: Database,
        bus: Bus,
        *,
        batch_size: int = 200,
        poll_interval_s: float = 0.5,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._db = db
        self._bus = bus
        self._batch_size = batch_size
        self._poll_interval_s = poll_interval_s
        self._clock = clock
        self._wake = asyncio.Event()
        self.published = 0

    def notify(self) -> None:
        """A commit happened: look at the outbox now."""
        self._wake.set()

    async def drain_once(self) -> int:
        """Publish one batch; how many events it held."""
        async with self._db.write() as conn:
            rows = await outbox.claim(conn, self._batch_size)
            for row in rows:
                await self._bus.publish(row.payload)
            await outbox.stamp(conn, [r.event_id for r in rows], self._clock())
        self.published += len(rows)
        return len(rows)

    async def run(self) -> None:
        """Drain forever (until cancelled); errors are logged and retried."""
        while True:
            self._wake.clear()
            try:
                while await self.drain_once() == self._batch_size:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("outbox relay failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_interval_s)
