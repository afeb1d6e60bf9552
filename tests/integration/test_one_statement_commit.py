"""A group of adds committed outside a transaction: one read, one guarded write.

``GroupCommit`` first tries a group of ``addEntries`` on PostgreSQL (no pooler) as
two statements outside a transaction (``group_commit._READ``, then
``writer._END_POSTGRES``, which writes only while the playlist's row is at the
version read). Each way it must give up, and commit in a transaction instead,
is tried here on the machine's PostgreSQL: a commit of another process between
the read and the write, a row lock held elsewhere, a checkpoint, a refusal. In
every case the result is the one a transaction that locked the row first would
have left. PostgreSQL only: SQLite commits in a transaction always.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event, func, select

from chorus.db import group_commit
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox, playlist, playlist_checkpoint, playlist_mutation
from chorus.domain import version_history
from chorus.domain.batch import Batch, Operation
from chorus.domain.commands import AddEntries, SetMemberRole
from chorus.domain.errors import DomainError, ErrorCode
from chorus.domain.model import Role
from tests.integration.store_helpers import (
    BOB,
    Editor,
    append_behind_a_held_lock,
    dsn,
    fold_log,
    header,
    live_rows,
    new_op,
    new_playlist,
    tally,
)


@pytest.fixture
async def db(postgres: str) -> AsyncIterator[Database]:
    database = Database(postgres)
    yield database
    await database.dispose()


def counted(path: str | None = None, reason: str | None = None) -> float:
    """``chorus_group_commits_total{path}`` or ``chorus_group_commit_fallbacks_total{reason}``."""
    if path is not None:
        found = REGISTRY.get_sample_value("chorus_group_commits_total", {"path": path})
    else:
        found = REGISTRY.get_sample_value(
            "chorus_group_commit_fallbacks_total", {"reason": reason or ""}
        )
    return found or 0.0


async def test_an_add_is_one_read_and_one_write_then_one_write_alone(db: Database) -> None:
    """The first group of adds reads, then writes; the next of the same playlist in the
    process decides on what the first left, and only writes."""
    store = PlaylistStore(db)
    ed = await new_playlist(store)
    before = await tally(db, ed.playlist_id)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        statements.append(sql)

    one = counted("one_statement")
    event.listen(db.write_engine.sync_engine, "before_cursor_execute", seen)
    try:
        first = await ed.add("m0")
        # The read, then the end; no BEGIN, no COMMIT, no other statement.
        assert [s[:30] for s in statements] == [
            "SELECT 0 AS kind, CAST(xmin AS",
            "WITH header AS (UPDATE playlis",
        ]
        assert "NOT EXISTS (SELECT FROM playlist_mutation" not in statements[1]
        statements.clear()
        second = await ed.add("m1", "m2")
        # The end alone, which checks the operation id it did not read.
        assert len(statements) == 1
        assert statements[0].startswith("WITH header AS (UPDATE playlist")
        assert "NOT EXISTS (SELECT FROM playlist_mutation" in statements[0]
    finally:
        event.remove(db.write_engine.sync_engine, "before_cursor_execute", seen)
    assert counted("one_statement") == one + 2
    after = await tally(db, ed.playlist_id)
    assert (after.version, after.log, after.outbox) == (2, before.log + 2, before.outbox + 2)
    assert after.live_entries == before.live_entries + 3
    rows = await live_rows(db, ed.playlist_id)
    assert [e.entry_id for e in rows] == [e.entry_id for e in (*first.entries, *second.entries)]
    await fold_log(db, ed.playlist_id)


async def test_the_ends_rows_hold_the_records_values_exactly(db: Database) -> None:
    """The end reads its rows from one JSON document (``jsonb_to_recordset``): every
    time keeps its microseconds, every entry and record its values, the outbox its order."""
    store = PlaylistStore(db)
    ed = await new_playlist(store)
    outcome = await ed.add("m0", "m1", "m2")
    second = await ed.add("m3")
    async with db.read() as conn:
        logs, events = [
            (
                await conn.execute(
                    select(table).where(table.c.playlist_id == ed.playlist_id).order_by(order)
                )
            ).all()
            for table, order in (
                (playlist_mutation, playlist_mutation.c.version),
                (outbox, outbox.c.event_id),
            )
        ]
        row = (await conn.execute(select(playlist).where(playlist.c.id == ed.playlist_id))).one()
    assert [log.version for log in logs] == [e.version for e in events] == [0, 1, 2]
    stamped = {e.added_at for e in outcome.entries}
    assert len(stamped) == 1
    assert stamped == {logs[1].committed_at} == {events[1].created_at}
    assert row.updated_at == logs[2].committed_at == second.entries[0].added_at
    assert next(iter(stamped)).microsecond == logs[1].committed_at.microsecond
    assert logs[1].result["entries"] == [
        {
            "entry_id": e.entry_id,
            "media_id": e.media_id,
            "position_key": e.position_key,
            "added_by": e.added_by,
            "added_at": e.added_at.isoformat(),
        }
        for e in outcome.entries
    ]
    assert events[1].payload["version"] == 1
    assert [r.entry_id for r in await live_rows(db, ed.playlist_id)] == [
        e.entry_id for e in (*outcome.entries, *second.entries)
    ]
    await fold_log(db, ed.playlist_id)


async def test_what_another_process_committed_since_is_read_before_deciding_again(
    postgres: str, db: Database
) -> None:
    """This process's last add left the playlist at version 1; another process's owner
    committed version 2: the next add, decided on version 1, writes nothing, and is
    decided again on a read, after the other entry."""
    store = PlaylistStore(db)
    ed = await new_playlist(store)
    await ed.add("m0")
    elsewhere = Database(postgres)
    try:
        other_add = AddEntries(ed.playlist_id, f"other-{uuid.uuid4().hex}", 1, ("other",))
        assert (await PlaylistStore(elsewhere).execute(other_add, ed.actor)).outcome.version == 2
    finally:
        await elsewhere.dispose()
    ed.version = 2
    moved, one = counted(reason="moved_on"), counted("one_statement")
    outcome = await ed.add("m1")
    assert outcome.version == 3
    assert counted("one_statement") == one + 1  # the second try, on the read
    assert counted(reason="moved_on") == moved
    assert [e.media_id for e in await live_rows(db, ed.playlist_id)] == ["m0", "other", "m1"]
    await fold_log(db, ed.playlist_id)


async def test_a_retry_replays_without_a_write(db: Database) -> None:
    """A retry decided on what the first commit left writes nothing (its operation id is
    committed), and is then answered from the record it reads."""
    store = PlaylistStore(db)
    ed = await new_playlist(store)
    command = ed.command(AddEntries, media_ids=("m0",))
    first = await store.execute(command, ed.actor)
    before = await tally(db, ed.playlist_id)
    one = counted("one_statement")
    again = await store.execute(command, ed.actor)
    assert again.replayed
    assert again.outcome == first.outcome
    assert counted("one_statement") == one + 1
    assert await tally(db, ed.playlist_id) == before


async def test_a_commit_between_the_read_and_the_write_sends_the_group_to_a_transaction(
    postgres: str, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's owner commits an add after this group read the playlist: the
    guarded write writes nothing, and the group is decided again, after that add."""
    ed = await new_playlist(PlaylistStore(db))
    await ed.add("m0")
    store = PlaylistStore(db)  # knows nothing of the playlist: it reads first
    elsewhere = Database(postgres)  # another process's pool and owner queues
    other = PlaylistStore(elsewhere)
    real = group_commit.fetch_direct
    raced: list[int] = []
    racing_now = False

    async def racing(conn: Any, statement: Any, params: Any) -> Any:
        nonlocal racing_now
        rows = await real(conn, statement, params)
        if not racing_now and statement is group_commit._READ[True]:
            racing_now = True  # the other add's own read goes by
            other_add = AddEntries(ed.playlist_id, f"other-{uuid.uuid4().hex}", 1, ("other",))
            raced.append((await other.execute(other_add, ed.actor)).outcome.version)
        return rows

    moved = counted(reason="moved_on")
    monkeypatch.setattr(group_commit, "fetch_direct", racing)
    try:
        committed = await store.execute(ed.command(AddEntries, media_ids=("m1",)), ed.actor)
    finally:
        await elsewhere.dispose()
    assert raced == [2]
    assert counted(reason="moved_on") == moved + 1
    assert committed.outcome.version == 3
    assert [e.media_id for e in await live_rows(db, ed.playlist_id)] == ["m0", "other", "m1"]
    await fold_log(db, ed.playlist_id)  # versions 0-3, each once, as the tables say


async def test_a_row_locked_elsewhere_is_waited_for_and_decided_again(
    postgres: str, db: Database
) -> None:
    """A transaction holds the row and appends an entry: the guarded write waits for it,
    finds the version moved on, and the group appends after that entry."""
    ed = await new_playlist(PlaylistStore(db))
    await ed.add("m0")
    ed.store = PlaylistStore(db)  # knows nothing of the playlist: it reads first
    moved = counted(reason="moved_on")
    outcome = await append_behind_a_held_lock(postgres, ed, "m1")
    assert outcome.version == 3
    assert counted(reason="moved_on") == moved + 1
    rows = await live_rows(db, ed.playlist_id)
    assert [e.media_id for e in rows] == ["m0", "elsewhere", "m1"]
    assert (await header(db, ed.playlist_id)).entry_count == 3


async def test_a_group_that_keeps_a_checkpoint_commits_in_a_transaction(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(version_history, "CHECKPOINT_EVERY", 3)
    store = PlaylistStore(db)
    ed = await new_playlist(store)
    await ed.add("m0")
    await ed.add("m1")
    checkpoint = counted(reason="checkpoint")
    await ed.add("m2")  # version 3: a checkpoint's
    assert counted(reason="checkpoint") == checkpoint + 1
    async with db.read() as conn:
        kept = await conn.scalar(
            select(func.count())
            .select_from(playlist_checkpoint)
            .where(playlist_checkpoint.c.playlist_id == ed.playlist_id)
        )
    assert kept == 1
    await ed.add("m3")  # the next is one statement again
    assert counted(reason="checkpoint") == checkpoint + 1


async def test_a_refusal_is_decided_again_in_a_transaction(db: Database) -> None:
    """A refused add commits nothing, so no write checks what it read: it is decided again
    in a transaction, and answered from there."""
    store = PlaylistStore(db)
    ed = await new_playlist(store)  # private: Bob does not see it
    before = await tally(db, ed.playlist_id)
    refused = counted(reason="refused")
    with pytest.raises(DomainError) as raised:
        await store.execute(ed.command(AddEntries, media_ids=("m0",)), BOB)
    assert raised.value.code is ErrorCode.NOT_FOUND
    assert counted(reason="refused") == refused + 1
    assert await tally(db, ed.playlist_id) == before


async def test_an_atomic_batchs_later_operation_id_is_not_committed_again(db: Database) -> None:
    """An atomic batch keeps its later operation ids apart from the log
    (``playlist_batch_operation``); an add under one of them, decided on carried state
    without reading records, must not commit: it is refused as the read path refuses it."""
    store = PlaylistStore(db)
    ed = await new_playlist(store)
    first = AddEntries(ed.playlist_id, new_op(), 0, ("b0",))
    later = AddEntries(ed.playlist_id, new_op(), 0, ("b1",))
    batch = Batch(ed.playlist_id, 0, (Operation(first), Operation(later)), atomic=True)
    assert (await store.apply_batch(batch, ed.actor)).version == 1
    ed.version = 1
    await ed.add("m0")  # committed as one statement: the next add decides on what it left
    before = await tally(db, ed.playlist_id)
    again = AddEntries(ed.playlist_id, later.operation_id, 2, ("other",))
    with pytest.raises(DomainError) as raised:
        await store.execute(again, ed.actor)
    assert raised.value.code is ErrorCode.OPERATION_ID_REUSED
    assert await tally(db, ed.playlist_id) == before


# --- a change made without a new version (SQL by hand) is never overwritten -------------


async def sql(postgres: str, statement: str, *args: Any) -> None:
    other = await asyncpg.connect(dsn(postgres))
    try:
        await other.execute(statement, *args)
    finally:
        await other.close()


async def test_a_takedown_in_sql_is_not_undone_by_an_add_decided_on_what_was_carried(
    postgres: str, db: Database
) -> None:
    """An operator takes a playlist down in SQL (no new version) after this process's
    last add: the next add, decided on what that add left, must not write the old
    header back; decided again, it finds no playlist."""
    store = PlaylistStore(db)
    ed = await new_playlist(store, collaborative=True)
    await ed.add("m0")
    await sql(
        postgres,
        "UPDATE playlist SET deleted_at = now(), collaborative = false, title = 'gone' "
        "WHERE id = $1",
        ed.playlist_id,
    )
    before = await tally(db, ed.playlist_id)
    with pytest.raises(DomainError) as raised:
        await store.execute(ed.command(AddEntries, media_ids=("m1",)), ed.actor)
    assert raised.value.code is ErrorCode.NOT_FOUND
    assert await tally(db, ed.playlist_id) == before
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(playlist.c.deleted_at, playlist.c.collaborative, playlist.c.title).where(
                    playlist.c.id == ed.playlist_id
                )
            )
        ).one()
    assert row.deleted_at is not None
    assert (row.collaborative, row.title) == (False, "gone")


async def test_a_title_set_in_sql_stays_and_a_member_removed_in_sql_may_not_add(
    postgres: str, db: Database
) -> None:
    store = PlaylistStore(db)
    ed = await new_playlist(store, collaborative=True)
    await ed.run(SetMemberRole, user_id=BOB, role=Role.EDITOR)
    bob = Editor(store, ed.playlist_id, BOB, ed.version)
    await bob.add("m0")  # carried: Bob an editor
    await sql(postgres, "UPDATE playlist SET title = 'by hand' WHERE id = $1", ed.playlist_id)
    outcome = await bob.add("m1")  # decided again on the read: the title stays
    assert (await header(db, ed.playlist_id)).title == "by hand"
    await sql(
        postgres,
        "DELETE FROM playlist_member WHERE playlist_id = $1 AND user_id = $2",
        ed.playlist_id,
        BOB,
    )
    before = await tally(db, ed.playlist_id)
    with pytest.raises(DomainError) as raised:
        await store.execute(AddEntries(ed.playlist_id, new_op(), outcome.version, ("m2",)), BOB)
    assert raised.value.code is ErrorCode.NOT_FOUND  # a private playlist he is not in
    assert await tally(db, ed.playlist_id) == before


async def test_a_takedown_committing_while_the_write_waits_is_not_undone(
    postgres: str, db: Database
) -> None:
    """A transaction changes the row without a new version while the add's write waits for
    its lock: the write finds the row changed and writes nothing."""
    ed = await new_playlist(PlaylistStore(db), collaborative=True)
    await ed.add("m0")
    store = PlaylistStore(db)  # knows nothing of the playlist: it reads first
    other = await asyncpg.connect(dsn(postgres))
    try:
        held = other.transaction()
        await held.start()
        await other.execute(
            "UPDATE playlist SET deleted_at = now(), title = 'taken down' WHERE id = $1",
            ed.playlist_id,
        )
        task = asyncio.create_task(
            store.execute(ed.command(AddEntries, media_ids=("m1",)), ed.actor)
        )
        await asyncio.sleep(0.3)
        assert not task.done()  # the write waits for the row
        await held.commit()
        with pytest.raises(DomainError) as raised:
            await asyncio.wait_for(task, timeout=10)
    finally:
        await other.close()
    assert raised.value.code is ErrorCode.NOT_FOUND
    async with db.read() as conn:
        title = await conn.scalar(select(playlist.c.title).where(playlist.c.id == ed.playlist_id))
    assert title == "taken down"
    assert (await tally(db, ed.playlist_id)).version == 1
