"""The cold page read on asyncpg itself answers what SQLAlchemy's execution answers.

:func:`chorus.db.direct.fetch_direct` runs the header-and-first-page statement
on the pooled connection's asyncpg connection (PostgreSQL without a pooler).
Both ways read the same rows into the same values: a playlist with live and
removed entries, an empty one, a deleted one, a missing one. A connection the
server closed fails that read as ``DatabaseUnavailable`` and is dropped from
the pool, so the next read reconnects; a server that closed them all (a
restart) fails one read or write on asyncpg itself, and the pool replaces the
rest, as SQLAlchemy does when its own statement loses a connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from chorus.db import engine as engine_module
from chorus.db import pages
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.db.store import PlaylistStore
from chorus.domain.commands import DeletePlaylist
from tests.integration.store_helpers import (
    backend_pid,
    new_op,
    new_playlist,
    terminate_backend,
    terminate_every_backend,
)


@pytest.fixture
async def db(postgres: str) -> AsyncIterator[Database]:
    database = Database(postgres, pool_size=1)
    yield database
    await database.dispose()


async def _both_ways(db: Database, playlist_id: str, size: int) -> tuple[object, object]:
    direct = await pages.playlist_and_first_page(db, playlist_id, size)
    db.pooler = True  # the SQLAlchemy way (a pooler's read transaction, same snapshot rules)
    try:
        through_sqlalchemy = await pages.playlist_and_first_page(db, playlist_id, size)
    finally:
        db.pooler = False
    return direct, through_sqlalchemy


async def test_the_direct_read_is_the_sqlalchemy_read(db: Database) -> None:
    assert db.direct_reads
    store = PlaylistStore(db)
    full = await new_playlist(store)
    added = [e.entry_id for e in (await full.add(*(f"chinook:{n}" for n in range(1, 8)))).entries]
    await full.remove(added[1], added[4])
    empty = await new_playlist(store, title="Empty")
    gone = await new_playlist(store, title="Gone")
    await gone.add("chinook:9")
    await store.execute(DeletePlaylist(gone.playlist_id, new_op(), gone.version), gone.actor)

    for playlist_id, size in [
        (full.playlist_id, 3),
        (full.playlist_id, 5),  # exactly the live entries: no next page
        (full.playlist_id, 50),
        (empty.playlist_id, 10),
        (gone.playlist_id, 10),
        ("no-such-playlist", 10),
    ]:
        direct, expected = await _both_ways(db, playlist_id, size)
        assert direct == expected, playlist_id

    found = await pages.playlist_and_first_page(db, full.playlist_id, 3)
    assert found is not None
    header, page = found
    assert header.version == full.version
    assert header.created_at.tzinfo is not None
    assert [e.entry_id for e in page.items] == [added[i] for i in (0, 2, 3)]
    assert page.has_next


async def test_a_connection_the_server_closed_fails_once_then_reconnects(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PlaylistStore(db)
    editor = await new_playlist(store)
    await editor.add("chinook:1")
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)  # no ping to save it
    await terminate_backend(db, await backend_pid(db))

    with pytest.raises(DatabaseUnavailable):
        await pages.playlist_and_first_page(db, editor.playlist_id, 10)
    found = await pages.playlist_and_first_page(db, editor.playlist_id, 10)

    assert found is not None
    assert len(found[1].items) == 1


@pytest.mark.parametrize("way", ["read", "write"])
async def test_a_server_that_closed_every_connection_fails_one_transaction_then_serves(
    postgres: str, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    db = Database(postgres, pool_size=3)
    try:
        store = PlaylistStore(db)
        editor = await new_playlist(store)
        await editor.add("chinook:1")

        async def hold() -> None:
            async with db.read() as conn:
                await conn.execute(text("SELECT pg_sleep(0.05)"))

        await asyncio.gather(*(hold() for _ in range(3)))  # three open connections, pooled
        monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)  # no ping to save them
        assert await terminate_every_backend(db) == 3

        failing = (
            pages.playlist_and_first_page(db, editor.playlist_id, 10)  # fetch_direct
            if way == "read"
            else editor.add("chinook:2")  # the group commit's first statement, in its transaction
        )
        with pytest.raises(DatabaseUnavailable):
            await failing
        if way == "write":
            await editor.add("chinook:3")
        found = await pages.playlist_and_first_page(db, editor.playlist_id, 10)
    finally:
        await db.dispose()

    assert found is not None
    assert [e.media_id for e in found[1].items] == (
        ["chinook:1"] if way == "read" else ["chinook:1", "chinook:3"]
    )
