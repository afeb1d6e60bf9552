"""The schema under the store: position keys in SQL order, and migrations = tables.

Runs on SQLite and PostgreSQL alike (the ``store``/``database`` fixtures).
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import delete, func, insert, select, text

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.migrate import upgrade
from chorus.db.store import PlaylistStore
from chorus.db.tables import metadata, playlist_entry
from chorus.domain import positions
from tests.integration.store_helpers import ALICE, fold_log, live_rows, new_playlist

# --- position keys --------------------------------------------------------------------


async def test_keys_stay_short_under_repeated_inserts_after_one_anchor(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    anchor, last = (await ed.add("first", "last")).entries
    inserted = []
    for i in range(2000):
        (entry,) = (await ed.add(f"m{i}", after=anchor.entry_id)).entries
        inserted.append(entry.entry_id)
    live = await live_rows(database, ed.playlist_id)
    expected = [anchor.entry_id, *reversed(inserted), last.entry_id]
    assert [e.entry_id for e in live] == expected
    keys = [e.position_key for e in live]
    assert max(map(len, keys)) <= positions.MAX_LENGTH
    assert all(positions.is_valid(k) for k in keys)
    assert len(set(keys)) == len(keys)
    # SQL's order is the model's: (position_key, entry_id) as byte strings.
    assert sorted(live, key=lambda e: (e.position_key.encode(), e.entry_id.encode())) == live
    async with database.read() as conn:
        longest = await conn.scalar(
            select(func.max(func.length(playlist_entry.c.position_key))).where(
                playlist_entry.c.playlist_id == ed.playlist_id
            )
        )
    assert longest <= positions.MAX_LENGTH
    state = await fold_log(database, ed.playlist_id)
    assert [e.entry_id for e in state.live()] == expected


async def test_position_keys_order_bytewise(store: PlaylistStore, database: Database) -> None:
    ed = await new_playlist(store)
    (template,) = (await ed.add("m")).entries
    keys = ["a", "Z", "b", "B", "9", "z", "A", "0z", "Zz", "aA"]
    async with database.write() as conn:
        await conn.execute(delete(playlist_entry))
        await conn.execute(
            insert(playlist_entry),
            [
                {
                    "playlist_id": ed.playlist_id,
                    "entry_id": f"e-{key}",
                    "position_key": key,
                    "media_id": key,
                    "added_by": ALICE,
                    "added_at": template.added_at,
                }
                for key in keys
            ],
        )
    bytewise = sorted(keys, key=str.encode)
    assert bytewise[:6] == ["0z", "9", "A", "B", "Z", "Zz"]
    async with database.read() as conn:
        page = await repository.entries_page(conn, ed.playlist_id, limit=100)
        assert [e.position_key for e in page] == bytewise
        after_z = await repository.entries_page(conn, ed.playlist_id, after=("Z", "e-Z"), limit=100)
        assert [e.position_key for e in after_z] == ["Zz", "a", "aA", "b", "z"]
        before_a = await repository.entries_page(
            conn, ed.playlist_id, before=("a", "e-a"), limit=2, from_end=True
        )
        assert [e.position_key for e in before_a] == ["Z", "Zz"]
        assert (
            await repository.count_between(
                conn, ed.playlist_id, after=("Z", "e-Z"), before=("b", "e-b")
            )
            == 3
        )
        if database.is_postgres:
            collation = await conn.scalar(
                text(
                    "SELECT collation_name FROM information_schema.columns "
                    "WHERE table_name = 'playlist_entry' AND column_name = 'position_key'"
                )
            )
            assert collation == "C"


# --- migrations ---------------------------------------------------------------------


async def test_migrations_match_the_tables(database: Database) -> None:
    async with database.read_engine.connect() as conn:
        diff = await conn.run_sync(
            lambda c: compare_metadata(
                MigrationContext.configure(c, opts={"compare_type": True}), metadata
            )
        )
        if database.is_postgres:
            index = await conn.scalar(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_playlist_entry_order'")
            )
        else:
            index = await conn.scalar(
                text("SELECT sql FROM sqlite_master WHERE name = 'ix_playlist_entry_order'")
            )
    assert diff == []
    # compare_metadata does not look at partial indexes' conditions.
    assert "removed_at IS NULL" in index


def test_a_new_sqlite_database_is_migrated_into_wal_mode(tmp_path: Path) -> None:
    """The journal mode is switched once, by the migration, never by the pool.

    Switching to WAL needs an exclusive lock. When the first connections of
    the pool switched it themselves, two of them could each hold a shared
    lock and want the exclusive one; SQLite then answers one with "database
    is locked" at once, without waiting (seen once in CI).
    """
    path = tmp_path / "new.db"
    upgrade(f"sqlite+aiosqlite:///{path}")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
