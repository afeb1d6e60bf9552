"""One embedded-profile ``chorus serve`` per PostgreSQL database: a session advisory lock.

An embedded-profile server hears commits on its in-process bus and keeps
its head registry in memory. A second one on the same database would take
some of the outbox's events for its own bus, so the first would serve
cached answers its registry still thinks current and its subscribers would
miss events (the full profile carries every commit to every process through
Kafka and Redis). SQLite's file lock (``chorus.cli.process``) cannot reach
PostgreSQL, so the server holds ``pg_try_advisory_lock`` on a connection of
its own for as long as it runs. PostgreSQL releases a session lock when its
connection ends, however the process ended (``kill -9`` too).

The connection lives on a daemon thread with its own event loop, so the lock
is taken before uvicorn starts (a second server exits 2) and is held whatever
the server's loop does. If the connection is lost (the database restarted),
the thread connects again and takes the lock again; if another process took
it meanwhile, this server logs an error and stops as on SIGTERM (it drains,
then exits): of two servers on one database, the later one keeps it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg
from sqlalchemy.engine import URL

from chorus.db.watch import until_lost
from chorus.resilience.backoff import Backoff

log = logging.getLogger("chorus.db.serve_lock")

SERVE_LOCK_KEY = 0x63686F7275730001
"""The advisory lock's key (``pg_try_advisory_lock(bigint)``; "chorus" and 1 in hex).
Advisory locks are per database, so one key serves every database."""

APPLICATION_NAME_PREFIX = "chorus serve"
"""How the holding connection names itself in ``pg_stat_activity``:
``chorus serve <pid> on <host>``, shown to the server that is refused."""

CONNECT_TIMEOUT_S = 10.0
CHECK_S = 30.0
"""Seconds between two liveness checks of the holding connection."""


@dataclass(frozen=True)
class Held:
    """Another process holds the lock: what ``pg_stat_activity`` says of it."""

    holder: str
    """Its ``application_name`` and client address, or ``"unknown"``."""


class ServeLock:
    """The held lock; :meth:`close` releases it (so does the process ending)."""

    def __init__(self, holding: concurrent.futures.Future[None]) -> None:
        self._holding = holding

    def close(self) -> None:
        self._holding.cancel()  # cancels the task on the lock's loop: its connection ends


def _dsn(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


async def _connect(dsn: str) -> asyncpg.Connection:
    name = f"{APPLICATION_NAME_PREFIX} {os.getpid()} on {socket.gethostname()}"[:63]
    return await asyncpg.connect(
        dsn, timeout=CONNECT_TIMEOUT_S, server_settings={"application_name": name}
    )


async def _take(dsn: str) -> asyncpg.Connection | Held:
    conn = await _connect(dsn)
    try:
        if await conn.fetchval("SELECT pg_try_advisory_lock($1)", SERVE_LOCK_KEY):
            return conn
        row = await conn.fetchrow(
            "SELECT a.application_name, host(a.client_addr) AS address"
            " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.database = ("
            "   SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.objid = ($1::bigint & 4294967295) AND l.classid = ($1::bigint >> 32)",
            SERVE_LOCK_KEY,
        )
    except BaseException:
        conn.terminate()
        raise
    await conn.close()
    if row is None:
        return Held("unknown")
    address = f" from {row['address']}" if row["address"] else ""
    return Held(f"{row['application_name'] or 'a connection'}{address}")


async def _hold(dsn: str, conn: asyncpg.Connection, taken_over: Callable[[str], None]) -> None:
    """Keep the lock until cancelled; take it again after a lost connection, or call
    ``taken_over`` (once) when another process holds it by then."""
    backoff = Backoff(0.5, 10.0)
    try:
        while True:
            try:
                await until_lost(conn, CHECK_S)
            except Exception as error:  # the check itself failed: the connection is suspect
                log.warning("the one-serve lock's connection failed its check: %r", error)
            conn.terminate()
            log.warning("lost the connection holding the one-serve lock; taking it again")
            while True:
                await asyncio.sleep(backoff.next())
                try:
                    taken = await _take(dsn)
                except Exception as error:
                    # Any failure, not only the driver's connection errors: an attempt
                    # cut short by a terminated backend can also fail as asyncpg's
                    # InternalClientError ("another operation is in progress"), and
                    # this thread ending then would leave the database unguarded.
                    log.warning("cannot take the one-serve lock again: %r", error)
                    continue
                if isinstance(taken, Held):
                    log.error(
                        "another chorus serve (%s) took this database while the connection "
                        "holding the one-serve lock was lost: this one stops (the embedded "
                        "profile serves a database from one process)",
                        taken.holder,
                    )
                    taken_over(taken.holder)
                    return
                conn = taken
                backoff.reset()
                break
    finally:
        conn.terminate()


def _stop_this_process(holder: str) -> None:
    # SIGTERM: the drain of chorus.drain (readyz 503, then close), as an operator's stop.
    os.kill(os.getpid(), signal.SIGTERM)


def hold_serve_lock(
    url: URL, *, taken_over: Callable[[str], None] = _stop_this_process
) -> ServeLock | Held:
    """Take the one-serve lock of the PostgreSQL database at ``url`` and keep it.

    Args:
        url: the primary, past any pooler (a transaction pooler would drop a
            session lock between transactions).
        taken_over: called with the holder's name (from the lock's thread) when the
            lock was lost with its connection and another process took it meanwhile;
            by default this process stops as on SIGTERM, since two embedded servers
            must not serve one database.

    Returns:
        The held lock, or :class:`Held` naming the process that holds it.

    Raises:
        OSError, TimeoutError, asyncpg.PostgresError: the database cannot be reached.
    """
    dsn = _dsn(url)
    loop = asyncio.new_event_loop()

    def run() -> None:
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def hold(conn: asyncpg.Connection) -> None:
        try:
            await _hold(dsn, conn, taken_over)
        finally:
            loop.call_soon(loop.stop)  # the thread ends once the lock is let go

    thread = threading.Thread(target=run, name="chorus serve lock", daemon=True)
    thread.start()
    try:
        taken = asyncio.run_coroutine_threadsafe(_take(dsn), loop).result(CONNECT_TIMEOUT_S * 2)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        raise
    if isinstance(taken, Held):
        loop.call_soon_threadsafe(loop.stop)
        return taken
    return ServeLock(asyncio.run_coroutine_threadsafe(hold(taken), loop))
