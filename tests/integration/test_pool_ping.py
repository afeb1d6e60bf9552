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
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import engine as engine_module
from chorus.db.engine import PING_AFTER_IDLE_S, Database, DatabaseUnavailable
from tests.integration.store_helpers import backend_pid, terminate_backend


@pytest.fixture
async def db(postgres: str) -> AsyncIterator[Database]:
    database = Database(postgres, pool_size=1)
    yield database
    await database.dispose()


async def test_an_idle_connection_the_server_closed_is_replaced_on_checkout(db: Database) -> None:
    first = await backend_pid(db)
    await terminate_backend(db, first)
    await asyncio.sleep(PING_AFTER_IDLE_S + 0.1)

    second = await backend_pid(db)  # the ping found it closed: a new connection, no error

    assert second != first


async def test_an_idle_connection_the_server_kept_is_used_again(
    db: Database, postgres: str
) -> None:
    # The ping must succeed on a healthy connection: one that failed replaced
    # every idle connection (and the pool with it) by a new one.
    first = await backend_pid(db)
    for _ in range(3):
        await asyncio.sleep(PING_AFTER_IDLE_S + 0.1)
        assert await backend_pid(db) == first
    other = Database(postgres, pool_size=4)
    try:
        pids = set()
        for _ in range(4):
            async with other.read() as a, other.read() as b:  # two in use at once
                pids |= {await backend_pid_on(a), await backend_pid_on(b)}
            await asyncio.sleep(PING_AFTER_IDLE_S + 0.1)
        assert len(pids) == 2  # the same two connections, each pinged, each kept
    finally:
        await other.dispose()


async def backend_pid_on(conn: AsyncConnection) -> int:
    return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_connection_used_just_now_is_not_pinged(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await backend_pid(db)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)
    first = await backend_pid(db)
    await terminate_backend(db, first)

    with pytest.raises(DatabaseUnavailable):
        await backend_pid(db)  # handed out unpinged, as a connection in flight would fail
    second = await backend_pid(db)

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
