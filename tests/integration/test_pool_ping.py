"""The PostgreSQL pool pings a connection that sat idle, and only such a one.

A connection the server closed while it waited in the pool is found out on
checkout and replaced: the transaction that took it runs. One used within
:data:`~chorus.db.engine.PING_AFTER_IDLE_S` is handed out without the round
trip; if the server closed it meanwhile, that transaction fails as
``DatabaseUnavailable`` (as one in flight would) and the next one reconnects.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from chorus.db import engine as engine_module
from chorus.db.engine import PING_AFTER_IDLE_S, Database, DatabaseUnavailable


@pytest.fixture
async def db(postgres: str) -> AsyncIterator[Database]:
    database = Database(postgres, pool_size=1)
    yield database
    await database.dispose()


async def _backend(db: Database) -> int:
    async with db.write() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _terminate(db: Database, pid: int) -> None:
    """Close backend ``pid`` from another connection (outside ``db``'s pool)."""
    other = Database(db.url)
    try:
        async with other.write() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        for _ in range(100):  # the backend exits a moment after the call returns
            async with other.write() as conn:
                found = await conn.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
                )
                if found.scalar_one() == 0:
                    return
            await asyncio.sleep(0.02)
        raise AssertionError(f"backend {pid} is still there")
    finally:
        await other.dispose()


async def test_an_idle_connection_the_server_closed_is_replaced_on_checkout(db: Database) -> None:
    first = await _backend(db)
    await _terminate(db, first)
    await asyncio.sleep(PING_AFTER_IDLE_S + 0.1)

    second = await _backend(db)  # the ping found it closed: a new connection, no error

    assert second != first


async def test_a_connection_used_just_now_is_not_pinged(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _backend(db)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)
    first = await _backend(db)
    await _terminate(db, first)

    with pytest.raises(DatabaseUnavailable):
        await _backend(db)  # handed out unpinged, as a connection in flight would fail
    second = await _backend(db)

    assert second != first


async def test_a_load_beyond_the_pool_waits_for_its_connections(db: Database) -> None:
    """A fixed pool: twenty reads at once on a pool of one share one server connection
    (an overflow connection would be opened and closed for each read beyond it)."""

    async def backend_after_a_moment() -> int:
        async with db.read() as conn:
            row = await conn.execute(text("SELECT pg_backend_pid() FROM pg_sleep(0.01)"))
            return int(row.scalar_one())

    backends = await asyncio.gather(*(backend_after_a_moment() for _ in range(20)))

    assert len(set(backends)) == 1
