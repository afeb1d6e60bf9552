"""Commits made by other processes, noticed promptly: SQLite's data version, PostgreSQL's NOTIFY.

A relay publishes every commit of its outbox (:mod:`chorus.events.relay`);
a commit of its own process wakes it at once. A commit of another process
(``chorus import …`` beside a server, or an API process of the full
profile committing while ``chorus relay`` runs elsewhere) cannot reach it
that way, and waited for its next poll (0.5 s).

* SQLite: :func:`watch_commits` asks ``PRAGMA data_version`` on one
  connection of its own every :data:`COMMIT_POLL_S`, and calls back when the
  number changed, which SQLite guarantees whenever *another* connection (of
  any process) committed since the last ask.
* PostgreSQL: :func:`listen_commits` ``LISTEN``\\ s on
  :data:`OUTBOX_CHANNEL`, which a trigger on ``outbox`` notifies from every
  transaction that inserted outbox rows (migration 0009), once per
  transaction, delivered at commit.

Neither reads a table; the relay it wakes finds the new outbox rows and
publishes them once, in order. Its own poll stays as the fallback: a lost
notification, or a watch reconnecting, costs latency, never an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.engine import CONNECT_TIMEOUT_S, Database, reason
from chorus.resilience.backoff import Backoff

log = logging.getLogger("chorus.db.watch")

COMMIT_POLL_S = 0.1
"""How often the watch asks for the database's data version (seconds)."""

OUTBOX_CHANNEL = "chorus_outbox"
"""The channel the outbox trigger notifies (migration 0009)."""

LISTEN_APPLICATION_NAME = "chorus commit listener"
"""The ``application_name`` of the listening connection: how an operator (or a test)
finds it in ``pg_stat_activity`` whatever it last ran (``LISTEN`` or its ``SELECT 1``)."""

LISTEN_CHECK_S = 30.0
"""How often a listening connection is asked ``SELECT 1`` (seconds): a peer that
vanished without closing (a half-open TCP connection) is found and replaced."""


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

    async def watch() -> None:
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

    await _reconnecting("commit watch", watch, backoff)


async def _reconnecting(
    what: str, session: Callable[[], Awaitable[None]], backoff: Backoff
) -> None:
    """Run ``session`` again whenever it ends, ``backoff`` apart after a failure; until cancelled.

    A failure is logged as ``what``; the relay's own poll still runs meanwhile.
    """
    while True:
        try:
            await session()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            delay = backoff.next()
            log.warning("%s: %s; retrying in %.1fs", what, reason(error), delay)
            await asyncio.sleep(delay)


def _asyncpg_dsn(db: Database) -> str:
    # The direct URL: a pooler in transaction mode would drop LISTEN between transactions.
    return db.direct_url.set(drivername="postgresql").render_as_string(hide_password=False)


async def listen_commits(
    db: Database, on_commit: Callable[[], None], *, check_s: float = LISTEN_CHECK_S
) -> None:
    """Call ``on_commit`` as soon as any connection commits outbox rows to ``db``; runs
    until cancelled.

    One connection of its own (not the pool's; to ``db.direct_url``, past any
    pooler) ``LISTEN``\\ s on :data:`OUTBOX_CHANNEL`. ``on_commit`` is called once when listening
    starts (for whatever was committed before) and then once per
    notification; it must not block. A lost connection is logged and
    opened again with backoff.

    Args:
        db: a PostgreSQL database, migrated to 0009 or later.
        check_s: seconds between two liveness checks of the connection.

    Raises:
        ValueError: ``db`` is not PostgreSQL.
    """
    if db.dialect != "postgresql":
        raise ValueError("listen_commits needs PostgreSQL's LISTEN/NOTIFY")
    backoff = Backoff(0.1, 5.0)

    async def listen() -> None:
        conn = await asyncpg.connect(
            _asyncpg_dsn(db),
            timeout=CONNECT_TIMEOUT_S,
            server_settings={"application_name": LISTEN_APPLICATION_NAME},
        )
        try:
            await _listen(conn, on_commit, backoff, check_s)
        finally:
            conn.terminate()

    await _reconnecting("commit listener", listen, backoff)


async def _listen(
    conn: asyncpg.Connection, on_commit: Callable[[], None], backoff: Backoff, check_s: float
) -> None:
    """Listen on ``conn`` until it is lost (then raise :class:`ConnectionError`)."""
    await conn.add_listener(OUTBOX_CHANNEL, lambda *_: on_commit())
    on_commit()  # whatever was committed before listening began
    backoff.reset()
    await until_lost(conn, check_s)
    raise ConnectionError("the listening connection closed")


async def until_lost(conn: asyncpg.Connection, check_s: float) -> None:
    """Return once ``conn`` is gone: closed by the server, or silent to a ``SELECT 1``
    asked every ``check_s`` seconds (a half-open TCP connection shows only then)."""
    lost = asyncio.Event()
    conn.add_termination_listener(lambda _conn: lost.set())
    while not lost.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(check_s):
                await lost.wait()
        if not lost.is_set():
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await conn.fetchval("SELECT 1")
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                return
