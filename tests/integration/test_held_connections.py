"""One-statement reads on the PostgreSQL primary hold their connection for the next one.

:meth:`~chorus.db.engine.Database.read_statement` keeps up to half the
pool checked out between reads (``_HeldConnections`` in ``chorus/db/engine.py``),
and keeps every promise of the pool: a connection idle past
:data:`~chorus.db.engine.PING_AFTER_IDLE_S` is pinged before its next use, one
whose read raised or began a transaction goes back, nothing waits on a
connection held idle, a lost server fails one read, and ``dispose`` returns
them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import engine as engine_module
from chorus.db import pages
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.db.store import PlaylistStore
from tests.integration.store_helpers import new_playlist, terminate_backend, terminate_every_backend


@pytest.fixture
async def db(postgres: str) -> AsyncIterator[Database]:
    database = Database(postgres, pool_size=8)  # four held at most
    yield database
    await database.dispose()


def pool(db: Database) -> Any:
    return db.read_engine.sync_engine.pool


async def driver_pid(conn: AsyncConnection) -> int:
    """The backend of ``conn``, asked on asyncpg itself (as the direct reads ask), so
    SQLAlchemy begins no transaction."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    return int(await driver.fetchval("SELECT pg_backend_pid()"))


async def statement_pid(db: Database) -> int:
    async with db.read_statement() as conn:
        return await driver_pid(conn)


async def read_for_a_moment(db: Database) -> None:
    """A statement read that keeps its connection 50 ms: several at once hold several."""
    async with db.read_statement() as conn:
        await asyncio.sleep(0.05)
        await driver_pid(conn)


async def test_the_next_statement_read_takes_the_held_connection(db: Database) -> None:
    first = await statement_pid(db)

    assert pool(db).checkedout() == 1  # held, not returned
    assert await statement_pid(db) == first
    assert pool(db).checkedout() == 1


async def test_no_more_than_half_the_pool_is_held(db: Database) -> None:
    await asyncio.gather(*(read_for_a_moment(db) for _ in range(6)))

    assert pool(db).checkedout() == 4


async def test_a_small_pool_holds_nothing(postgres: str) -> None:
    small = Database(postgres, pool_size=3)
    try:
        await statement_pid(small)
        assert pool(small).checkedout() == 0
    finally:
        await small.dispose()


async def test_a_read_that_raised_returns_its_connection(db: Database) -> None:
    async def failing_read() -> None:
        async with db.read_statement() as conn:
            await driver_pid(conn)
            raise LookupError("the caller's own failure")

    with pytest.raises(LookupError, match="own failure"):
        await failing_read()

    assert pool(db).checkedout() == 0


async def test_a_statement_through_sqlalchemy_returns_its_connection(db: Database) -> None:
    async with db.read_statement() as conn:
        assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1

    assert pool(db).checkedout() == 0  # SQLAlchemy began its transaction: the pool resets it
    assert await statement_pid(db) > 0


async def test_a_connection_held_past_the_ping_window_is_pinged_by_the_pool(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 0.2)
    first = await statement_pid(db)
    await terminate_backend(db, first)  # a server that closed it while it was held
    await asyncio.sleep(0.3)

    # Back to the pool as idle since it was held, so the pool's ping finds it closed:
    # a new connection, no error.
    second = await statement_pid(db)

    assert second != first


async def test_a_held_connection_gives_way_to_a_checkout_that_would_wait(postgres: str) -> None:
    db = Database(postgres, pool_size=4)  # two held at most
    try:
        await statement_pid(db)
        assert pool(db).checkedout() == 1
        release = asyncio.Event()

        async def hold_a_transaction() -> None:
            async with db.read() as conn:
                await conn.execute(text("SELECT 1"))
                entered.release()
                await release.wait()

        entered = asyncio.Semaphore(0)
        holders = [asyncio.create_task(hold_a_transaction()) for _ in range(3)]
        for _ in holders:
            await entered.acquire()
        assert pool(db).checkedout() == 4  # the three holders and the held one

        async def write() -> int:
            async with db.write() as conn:
                return int((await conn.execute(text("SELECT 1"))).scalar_one())

        # The pool has none free: the write must not wait for the held connection
        # (else it waits for a holder to end, 30 s at most, SQLAlchemy's pool timeout).
        writing = asyncio.create_task(write())
        done, _ = await asyncio.wait({writing}, timeout=5)
        release.set()
        await asyncio.gather(*holders, writing)
        assert writing in done
    finally:
        await db.dispose()


async def test_a_server_that_closed_every_connection_fails_one_read_then_serves(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PlaylistStore(db)
    editor = await new_playlist(store)
    await editor.add("chinook:1")

    await asyncio.gather(read_for_a_moment(db), read_for_a_moment(db))  # two held
    assert pool(db).checkedout() == 2
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)  # no ping to save them
    await terminate_every_backend(db)

    with pytest.raises(DatabaseUnavailable):
        await pages.playlist_and_first_page(db, editor.playlist_id, 10)
    found = await pages.playlist_and_first_page(db, editor.playlist_id, 10)

    assert found is not None
    assert [e.media_id for e in found[1].items] == ["chinook:1"]


async def test_dispose_returns_every_held_connection(postgres: str) -> None:
    db = Database(postgres, pool_size=8)
    await statement_pid(db)
    assert pool(db).checkedout() == 1

    await db.dispose()

    assert pool(db).checkedout() == 0
