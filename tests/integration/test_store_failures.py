"""Commands that fail store nothing: crashes half-way, cancelled callers, refusals.

Runs on SQLite and PostgreSQL alike (the ``store``/``database`` fixtures).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import engine as engine_module
from chorus.db import group_commit, repository, writer
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox, playlist_entry, playlist_mutation
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    MoveEntries,
    Placement,
    RemoveEntries,
    RevertPlaylist,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.errors import (
    DomainError,
    ErrorCode,
    InvalidInput,
    LimitExceeded,
)
from chorus.domain.limits import Limits
from chorus.domain.model import Role
from tests.integration.store_helpers import (
    ALICE,
    BOB,
    Tally,
    fold_log,
    header,
    live_rows,
    media_order,
    new_op,
    new_playlist,
    tally,
)

# --- a failure half-way leaves nothing --------------------------------------------


async def test_crash_after_entry_insert_leaves_nothing(
    store: PlaylistStore, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    ed = await new_playlist(store)
    await ed.add("m0")
    real_keep = writer._keep_checkpoint
    inserted: list[str] = []

    async def keep_then_crash(conn: AsyncConnection, records: Any) -> None:
        # The end is written (on PostgreSQL the entry rows are in its statement):
        # the rows are there, inside the transaction, when the crash comes.
        await real_keep(conn, records)
        playlist_id = records[-1].playlist.id
        count = await conn.scalar(
            select(func.count()).where(playlist_entry.c.playlist_id == playlist_id)
        )
        inserted.append(str(count))
        raise RuntimeError("crash after the entry insert")

    before = await tally(database, ed.playlist_id)
    command = ed.command(AddEntries, media_ids=("m1", "m2"))
    # In a transaction: an add tried as one statement (PostgreSQL) has no "after" inside
    # its commit (test_one_statement_commit.py).
    monkeypatch.setattr(group_commit, "_adds", lambda _queued: False)
    monkeypatch.setattr(writer, "_keep_checkpoint", keep_then_crash)
    with pytest.raises(RuntimeError, match="crash"):
        await store.execute(command, ALICE)
    assert inserted == ["3"]
    assert await tally(database, ed.playlist_id) == before

    monkeypatch.setattr(writer, "_keep_checkpoint", real_keep)
    retried = await store.execute(command, ALICE)
    assert not retried.replayed
    assert retried.outcome.version == 2
    assert (await store.execute(command, ALICE)).replayed
    after = await tally(database, ed.playlist_id)
    assert (after.version, after.log, after.outbox) == (2, before.log + 1, before.outbox + 1)
    assert await media_order(database, ed.playlist_id) == ["m0", "m1", "m2"]
    await fold_log(database, ed.playlist_id)


def crash_on_insert_into(monkeypatch: pytest.MonkeyPatch, table: Any) -> None:
    """Make the writer's ``insert(table)`` raise: every write before it has run.

    On PostgreSQL a commit's header, log rows and outbox events are one
    statement (``writer._END_POSTGRES``); it crashes as its parameters are made.
    """
    real_insert = writer.insert

    def insert_or_crash(target: Any, *args: Any, **kwargs: Any) -> Any:
        if target is table:
            raise RuntimeError(f"crash before the {table.name} insert")
        return real_insert(target, *args, **kwargs)

    def crash(*_: Any) -> Any:
        raise RuntimeError(f"crash before the {table.name} insert")

    monkeypatch.setattr(writer, "insert", insert_or_crash)
    monkeypatch.setattr(writer, "_end_params", crash)


async def test_crash_before_outbox_insert_leaves_nothing(
    store: PlaylistStore, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    ed = await new_playlist(store)
    e0, e1, _ = (e.entry_id for e in (await ed.add("m0", "m1", "m2")).entries)
    await ed.remove(e1)
    rows_before = await live_rows(database, ed.playlist_id)
    before = await tally(database, ed.playlist_id)
    move = ed.command(MoveEntries, entry_ids=(e0,))
    add = ed.command(AddEntries, media_ids=("m3",), placement=Placement(after=e1))
    create = CreatePlaylist("create-crash", "Other")

    crash_on_insert_into(monkeypatch, outbox)
    for command in (move, add, ed.command(RevertPlaylist, to_version=0)):
        with pytest.raises(RuntimeError, match="outbox"):
            await store.execute(command, ALICE)
    with pytest.raises(RuntimeError, match="outbox"):
        await store.create(create, ALICE)
    assert await tally(database, ed.playlist_id) == before
    assert await live_rows(database, ed.playlist_id) == rows_before

    monkeypatch.undo()
    crash_on_insert_into(monkeypatch, playlist_mutation)
    with pytest.raises(RuntimeError, match="playlist_mutation"):
        await store.execute(move, ALICE)
    assert await tally(database, ed.playlist_id) == before

    monkeypatch.undo()
    assert (await store.execute(move, ALICE)).outcome.version == 3
    assert (await store.execute(add, ALICE)).outcome.version == 4
    assert not (await store.create(create, ALICE)).replayed
    assert (await store.execute(move, ALICE)).replayed
    assert await media_order(database, ed.playlist_id) == ["m3", "m2", "m0"]
    after = await tally(database, ed.playlist_id)
    assert (after.version, after.playlists) == (4, 2)
    await fold_log(database, ed.playlist_id)


async def slow_statement(conn: AsyncConnection) -> None:
    """A statement that keeps the database busy for a few hundred milliseconds."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_sleep(0.5)"))
    else:
        await conn.execute(
            text(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                "WHERE x < 1000000) SELECT count(*) FROM c"
            )
        )


async def test_cancelled_command_blocks_no_one(
    store: PlaylistStore, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller cancelled mid-transaction (client gone, timeout) must not wedge the writers.

    The cancelled command may have committed or not, but wholly; its retry
    answers at once. Fails on SQLite: the cancelled transaction's connection
    is torn down while its statement runs and is left unclosed, holding the
    write lock until the cyclic garbage collector happens to reclaim it; the
    next writer waits out the busy timeout and gets "database is locked". The
    collector is kept off here so the outcome does not depend on its timing.
    """
    # Fail in a second rather than after the production 30 s busy timeout.
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 1_000)
    ed = await new_playlist(store)
    await ed.add("m0")
    before = await tally(database, ed.playlist_id)
    inside = asyncio.Event()

    def slowed(real: Any) -> Any:
        async def slow(conn: AsyncConnection, *args: Any, **kw: Any) -> Any:
            # After the header's lock, mid-transaction, on both dialects' commit paths.
            locked = await real(conn, *args, **kw)
            inside.set()
            await slow_statement(conn)
            return locked

        return slow

    command = ed.command(AddEntries, media_ids=("m1",))
    gc.disable()
    try:
        with monkeypatch.context() as patch:
            # SQLite's commit locks with get_playlist, PostgreSQL's with its first read;
            # PostgreSQL's add, outside a transaction, reads with fetch_direct or, deciding
            # on what the add before it left, writes its end at once: the slow statement
            # then comes after a commit that is whole.
            patch.setattr(repository, "get_playlist", slowed(repository.get_playlist))
            patch.setattr(group_commit, "_lock_and_read", slowed(group_commit._lock_and_read))
            patch.setattr(group_commit, "fetch_direct", slowed(group_commit.fetch_direct))
            patch.setattr(writer, "fetch_in_transaction", slowed(writer.fetch_in_transaction))
            task = asyncio.create_task(store.execute(command, ALICE))
            await inside.wait()
            await asyncio.sleep(0.1)  # the slow statement is running now
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        retried = await asyncio.wait_for(store.execute(command, ALICE), timeout=10)
    finally:
        gc.enable()
    assert retried.outcome.version == 2
    after = await tally(database, ed.playlist_id)
    assert (after.version, after.log, after.outbox) == (2, before.log + 1, before.outbox + 1)
    assert await media_order(database, ed.playlist_id) == ["m0", "m1"]
    await fold_log(database, ed.playlist_id)


# --- limits and other refusals store nothing ---------------------------------------


def refusal(
    name: str, code: ErrorCode, make: Callable[[str, list[str]], Any], actor: str = ALICE
) -> Any:
    """A command refused with ``code``; ``make(playlist_id, entry_ids)`` builds it."""
    return pytest.param(code, make, actor, id=name.replace(" ", "-"))


LIMIT, INVALID, NOT_FOUND = (
    ErrorCode.LIMIT_EXCEEDED,
    ErrorCode.INVALID_INPUT,
    ErrorCode.NOT_FOUND,
)
MANY = tuple(f"e{i}" for i in range(101))
# Made against version 2 of a playlist of four entries (limit: five), Bob a viewer.
REFUSALS = [
    refusal("too many media", LIMIT, lambda p, ids: AddEntries(p, new_op(), 2, MANY)),
    refusal("too many entries", LIMIT, lambda p, ids: AddEntries(p, new_op(), 2, ("a", "b"))),
    refusal("too many to move", LIMIT, lambda p, ids: MoveEntries(p, new_op(), 2, MANY)),
    refusal("too many to remove", LIMIT, lambda p, ids: RemoveEntries(p, new_op(), 2, MANY)),
    refusal("long title", LIMIT, lambda p, ids: UpdatePlaylist(p, new_op(), 2, title="x" * 201)),
    refusal(
        "long description",
        LIMIT,
        lambda p, ids: UpdatePlaylist(p, new_op(), 2, description="x" * 1001),
    ),
    refusal("blank title", INVALID, lambda p, ids: UpdatePlaylist(p, new_op(), 2, title="  ")),
    refusal("long operation id", INVALID, lambda p, ids: AddEntries(p, "x" * 65, 2, ("m",))),
    refusal("base version ahead", INVALID, lambda p, ids: AddEntries(p, new_op(), 3, ("m",))),
    refusal(
        "repeated entry id", INVALID, lambda p, ids: RemoveEntries(p, new_op(), 2, (ids[0],) * 2)
    ),
    refusal(
        "stale strict",
        ErrorCode.VERSION_CONFLICT,
        lambda p, ids: AddEntries(p, new_op(), 1, ("m",), strict=True),
    ),
    refusal(
        "unknown anchor",
        ErrorCode.ANCHOR_NOT_FOUND,
        lambda p, ids: AddEntries(p, new_op(), 2, ("m",), Placement(before="e-none")),
    ),
    refusal(
        "unknown target", NOT_FOUND, lambda p, ids: MoveEntries(p, new_op(), 2, (ids[0], "e-x"))
    ),
    refusal("unknown playlist", NOT_FOUND, lambda p, ids: AddEntries("p-x", new_op(), 0, ("m",))),
    refusal(
        "viewer edits",
        ErrorCode.FORBIDDEN,
        lambda p, ids: RemoveEntries(p, new_op(), 2, (ids[0],)),
        actor=BOB,
    ),
    refusal(
        "stranger", NOT_FOUND, lambda p, ids: AddEntries(p, new_op(), 2, ("m",)), actor="carol"
    ),
]


@pytest.mark.parametrize(("code", "make", "actor"), REFUSALS)
async def test_refused_commands_store_nothing(
    database: Database, code: ErrorCode, make: Callable[[str, list[str]], Any], actor: str
) -> None:
    store = PlaylistStore(database, limits=Limits(max_entries=5))
    ed = await new_playlist(store)
    ids = [e.entry_id for e in (await ed.add("m1", "m2", "m3", "m4")).entries]
    await ed.run(SetMemberRole, user_id=BOB, role=Role.VIEWER)
    before = await tally(database, ed.playlist_id)
    rows = await live_rows(database, ed.playlist_id)
    with pytest.raises(DomainError) as error:
        await store.execute(make(ed.playlist_id, ids), actor)
    assert error.value.code is code
    assert await tally(database, ed.playlist_id) == before
    assert await live_rows(database, ed.playlist_id) == rows
    # The limit itself is fine.
    await ed.add("m5")


async def test_refused_creates_store_nothing(store: PlaylistStore, database: Database) -> None:
    for command, error in [
        (CreatePlaylist(new_op(), "x" * 201), LimitExceeded),
        (CreatePlaylist(new_op(), "Mix", "x" * 1001), LimitExceeded),
        (CreatePlaylist(new_op(), ""), InvalidInput),
        (CreatePlaylist("", "Mix"), InvalidInput),
        (CreatePlaylist("x" * 65, "Mix"), InvalidInput),
    ]:
        with pytest.raises(error):
            await store.create(command, ALICE)
    assert await tally(database) == Tally(None, 0, 0, 0, 0, 0, 0)
    # A title of exactly 200 characters (after trimming) is fine.
    ok = await store.create(CreatePlaylist(new_op(), f"  {'x' * 200}  "), ALICE)
    assert (await header(database, ok.outcome.playlist_id)).title == "x" * 200
