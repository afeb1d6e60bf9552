"""The group commit's lock and first read in one statement, and the two ways it reads again.

``group_commit._lock_and_read`` locks the header with ``SKIP LOCKED`` and reads the
group's records, roles and last entry in the same statement, at the snapshot taken
before the lock. It must read again after the lock when the row was held by
another transaction (the lock skipped it) or when the locked row's version is not
the snapshot's (a commit landed in between): else the group would decide on rows
older than the header it locked. PostgreSQL only (SQLite locks the whole file).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from chorus.db import group_commit
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from tests.integration.store_helpers import (
    append_behind_a_held_lock,
    header,
    live_rows,
    new_playlist,
)


@pytest.fixture(autouse=True)
def in_a_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adds go straight to the transaction path, whose first statement these tests are
    of (a group of adds is first tried as one statement: test_one_statement_commit.py)."""
    monkeypatch.setattr(group_commit, "_adds", lambda _queued: False)


@pytest.fixture
async def db(postgres: str) -> AsyncIterator[Database]:
    database = Database(postgres)
    yield database
    await database.dispose()


async def test_a_lock_held_elsewhere_is_waited_for_and_the_group_reads_after_it(
    postgres: str, db: Database
) -> None:
    """Another transaction holds the row and appends an entry: the group waits for it and
    appends after that entry, at the version after it."""
    ed = await new_playlist(PlaylistStore(db))
    await ed.add("m0")
    outcome = await append_behind_a_held_lock(postgres, ed, "m1")
    assert outcome.version == 3
    rows = await live_rows(db, ed.playlist_id)
    assert [e.media_id for e in rows] == ["m0", "elsewhere", "m1"]
    assert rows[1].position_key < rows[2].position_key
    assert (await header(db, ed.playlist_id)).version == 3


async def test_a_version_moved_since_the_snapshot_is_read_again(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement's snapshot saw an older version than the row it locked (as when a
    commit lands between the two): the rest is read again after the lock."""
    store = PlaylistStore(db)
    ed = await new_playlist(store)
    await ed.add("m0")
    real = group_commit.fetch_in_transaction
    ran: list[Any] = []

    async def racing(conn: Any, statement: Any, params: Any) -> Any:
        rows = await real(conn, statement, params)
        ran.append(statement)
        if statement is group_commit._LOCK_AND_READ[True]:
            # As if the snapshot were taken one commit earlier than the lock.
            return [(r[0], "0", *r[2:]) if r[0] == group_commit._SEEN else r for r in rows]
        return rows

    monkeypatch.setattr(group_commit, "fetch_in_transaction", racing)
    await ed.add("m1")
    assert ran[:2] == [group_commit._LOCK_AND_READ[True], group_commit._AFTER_LOCK[True]]
    assert [e.media_id for e in await live_rows(db, ed.playlist_id)] == ["m0", "m1"]

    counted: list[Any] = []

    async def counting(conn: Any, statement: Any, params: Any) -> Any:
        counted.append(statement)
        return await real(conn, statement, params)

    monkeypatch.setattr(group_commit, "fetch_in_transaction", counting)
    await ed.add("m2")
    # Nothing in the way: the lock and the reads are one statement.
    assert not set(map(id, group_commit._AFTER_LOCK.values())) & set(map(id, counted))
    assert counted[0] is group_commit._LOCK_AND_READ[True]
