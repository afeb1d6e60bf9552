"""A PostgreSQL that is there but cannot do the work now is ``DatabaseUnavailable``.

A statement cancelled (an operator's ``pg_cancel_backend``, a timeout), a
database that takes no writes (made read-only, or a standby behind the URL
after a failover) and a server out of connections are answered
``SERVICE_UNAVAILABLE`` (retry later; an edit's retry with the same
operation id commits once), not ``INTERNAL_SERVER_ERROR``; the connection
stays in the pool. ``/readyz``'s database check is down while the primary
takes no writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import exc, text
from sqlalchemy.engine import make_url

from chorus.db.direct import fetch_in_transaction
from chorus.db.engine import Database, DatabaseUnavailable, is_unavailable
from chorus.db.store import PlaylistStore
from chorus.health import ReadOnlyPrimary, database_check
from tests.integration.store_helpers import new_playlist

SLEEP = text("SELECT pg_sleep(1)")


@pytest.fixture
async def db(postgres: str) -> AsyncIterator[Database]:
    database = Database(postgres, pool_size=2)
    yield database
    await database.dispose()


async def _cancelled(db: Database, direct: bool) -> None:
    """A write whose statement runs past a 20 ms timeout: on asyncpg itself (the group
    commit's way) or through SQLAlchemy."""
    async with db.write() as conn:
        await conn.execute(text("SET LOCAL statement_timeout = '20ms'"))
        if direct:
            await fetch_in_transaction(conn, SLEEP, {})
        else:
            await conn.execute(SLEEP)


@pytest.mark.parametrize("direct", [True, False], ids=["asyncpg", "sqlalchemy"])
async def test_a_cancelled_statement_is_unavailable(db: Database, direct: bool) -> None:
    with pytest.raises(DatabaseUnavailable, match="cancel"):
        await _cancelled(db, direct)

    async with db.write() as conn:  # the connection was kept, and works
        assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1


async def _read_only(postgres: str, on: bool) -> None:
    url = make_url(postgres)
    # From the maintenance database: a session on the read-only one could not undo it.
    other = url.set(drivername="postgresql", database="postgres")
    conn = await asyncpg.connect(other.render_as_string(False))
    try:
        setting = "SET default_transaction_read_only = on" if on else "RESET ALL"
        await conn.execute(f'ALTER DATABASE "{url.database}" {setting}')
    finally:
        await conn.close()


async def test_a_read_only_database_refuses_edits_as_unavailable_and_is_not_ready(
    postgres: str,
) -> None:
    await _read_only(postgres, True)
    db = Database(postgres, pool_size=2)  # its connections start read-only
    try:
        with pytest.raises(DatabaseUnavailable, match="read-only"):
            await new_playlist(PlaylistStore(db))
        with pytest.raises(ReadOnlyPrimary):
            await database_check(db).probe()
    finally:
        await db.dispose()
        await _read_only(postgres, False)

    writable = Database(postgres, pool_size=2)
    try:
        await database_check(writable).probe()  # ready again
        editor = await new_playlist(PlaylistStore(writable))
        assert (await editor.add("chinook:1")).version == 1
    finally:
        await writable.dispose()


def test_out_of_connections_is_unavailable_raw_or_wrapped() -> None:
    raw = asyncpg.TooManyConnectionsError("sorry, too many clients already")
    wrapped = exc.DBAPIError("connect", None, raw)

    assert is_unavailable(raw)
    assert is_unavailable(wrapped)
    assert not is_unavailable(asyncpg.UniqueViolationError("duplicate key"))
