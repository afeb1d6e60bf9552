"""Commits made by other processes to an embedded (SQLite) database, noticed promptly.

An embedded server publishes every commit through its outbox relay
(:mod:`chorus.events.relay`), which a commit of its own wakes at once. A
CLI command beside it (``chorus import …``) commits to the same file from
another process, where no wake-up can reach the server. :func:`watch_commits`
closes that gap: it asks SQLite's ``PRAGMA data_version`` on one connection
of its own every :data:`COMMIT_POLL_S`, and calls back when the number
changed, which SQLite guarantees whenever *another* connection (of any
process) committed since the last ask. It reads no table; the relay it
wakes finds the new outbox rows and publishes them once, in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.engine import Database
from chorus.resilience.backoff import Backoff

log = logging.getLogger("chorus.db.watch")

COMMIT_POLL_S = 0.1
"""How often the watch asks for the database's data version (seconds)."""


async def _data_version(conn: AsyncConnection) -> int:
    # Each ask in its own short transaction: inside one, SQLite would
    # answer from the snapshot the transaction began with.
    async with conn.begin():
        return int((await conn.exec_driver_sql("PRAGMA data_version")).scalar_one())


async def watch_commits(
    db: Database, on_commit: Callable[[], None], *, poll_s: float = COMMIT_POLL_S
) -> None:
    """Call ``on_commit`` soon after any other connection commits to ``db``; runs until cancelled.

    Args:
        db: a SQLite database (PostgreSQL has no data version: nothing to do there).
        on_commit: called (it must not block) at most once per ``poll_s``,
            after one or more commits made by other connections, this
            process's own writer included.
        poll_s: seconds between two asks.

    Raises:
        ValueError: ``db`` is not SQLite.
    """
    if db.dialect != "sqlite":
        raise ValueError("watch_commits needs SQLite's PRAGMA data_version")
    backoff = Backoff(poll_s, 5.0)
    while True:
        try:
            # A connection of its own for the life of the watch: data_version
            # compares commits against what this one connection saw.
            async with db.read_engine.connect() as conn:
                seen = await _data_version(conn)
                on_commit()  # whatever was committed before the first ask
                backoff.reset()
                while True:
                    await asyncio.sleep(poll_s)
                    current = await _data_version(conn)
                    if current != seen:
                        seen = current
                        on_commit()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the relay's own poll still runs meanwhile
            delay = backoff.next()
            log.warning("commit watch: %s; retrying in %.1fs", error, delay)
            await asyncio.sleep(delay)
