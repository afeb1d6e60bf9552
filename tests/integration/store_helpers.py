"""Helpers of the storage suite: an editor that sends commands, table tallies, the log folded.

They read the tables directly (``chorus.db.tables``), so a test can check what
a command left behind, not only what the store answered.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox, playlist, playlist_entry, playlist_member, playlist_mutation
from chorus.domain.changes import WIRE_VERSION, Change, decode_change
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    MoveEntries,
    Placement,
    RemoveEntries,
    RemoveMember,
    RevertPlaylist,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.decisions import Outcome
from chorus.domain.fold import PlaylistState
from chorus.domain.model import Entry, Playlist, Role
from chorus.domain.positions import allocate
from tests.unit.fakes import fold

ALICE = "alice"
BOB = "bob"


def new_op() -> str:
    return f"op-{uuid.uuid4().hex}"


@dataclass
class Editor:
    """Sends commands on one playlist as one actor, each with a fresh operation id.

    ``version`` follows the commits made through this editor; commands are
    made against it as their base version.
    """

    store: PlaylistStore
    playlist_id: str
    actor: str = ALICE
    version: int = 0
    ops: list[str] = field(default_factory=list)

    def command(self, kind: type[Any], **args: Any) -> Any:
        op = new_op()
        self.ops.append(op)
        return kind(
            playlist_id=self.playlist_id, operation_id=op, base_version=self.version, **args
        )

    async def run(self, kind: type[Any], **args: Any) -> Outcome:
        """Run one command; it must commit exactly the next version."""
        committed = await self.store.execute(self.command(kind, **args), self.actor)
        assert not committed.replayed
        assert committed.outcome.version == self.version + 1
        self.version = committed.outcome.version
        return committed.outcome

    async def add(
        self, *media: str, after: str | None = None, before: str | None = None
    ) -> Outcome:
        return await self.run(AddEntries, media_ids=media, placement=Placement(after, before))

    async def move(
        self, *entry_ids: str, after: str | None = None, before: str | None = None
    ) -> Outcome:
        return await self.run(MoveEntries, entry_ids=entry_ids, placement=Placement(after, before))

    async def remove(self, *entry_ids: str) -> Outcome:
        return await self.run(RemoveEntries, entry_ids=entry_ids)


async def new_playlist(
    store: PlaylistStore, actor: str = ALICE, title: str = "Mix", **details: Any
) -> Editor:
    created = await store.create(CreatePlaylist(new_op(), title, **details), actor)
    assert created.outcome.version == 0
    assert not created.replayed
    return Editor(store, created.outcome.playlist_id, actor)


async def live_rows(database: Database, playlist_id: str) -> list[Entry]:
    """The live entry rows, in list order, straight from SQL."""
    async with database.read() as conn:
        rows = await conn.execute(
            select(playlist_entry)
            .where(
                playlist_entry.c.playlist_id == playlist_id,
                playlist_entry.c.removed_at.is_(None),
            )
            .order_by(playlist_entry.c.position_key, playlist_entry.c.entry_id)
        )
        return [repository.entry_from_row(r) for r in rows]


async def media_order(database: Database, playlist_id: str) -> list[str]:
    return [e.media_id for e in await live_rows(database, playlist_id)]


async def header(database: Database, playlist_id: str) -> Playlist:
    async with database.read() as conn:
        found = await repository.get_playlist(conn, playlist_id)
    assert found is not None
    return found


@dataclass(frozen=True)
class Tally:
    """Row counts of every table (whole database), and one playlist's version."""

    version: int | None
    playlists: int
    members: int
    entries: int
    live_entries: int
    log: int
    outbox: int


async def tally(database: Database, playlist_id: str | None = None) -> Tally:
    async def count(conn: AsyncConnection, table: Any, *where: Any) -> int:
        return int(await conn.scalar(select(func.count()).select_from(table).where(*where)) or 0)

    async with database.read() as conn:
        version = (
            await conn.scalar(select(playlist.c.version).where(playlist.c.id == playlist_id))
            if playlist_id
            else None
        )
        return Tally(
            version=version,
            playlists=await count(conn, playlist),
            members=await count(conn, playlist_member),
            entries=await count(conn, playlist_entry),
            live_entries=await count(conn, playlist_entry, playlist_entry.c.removed_at.is_(None)),
            log=await count(conn, playlist_mutation),
            outbox=await count(conn, outbox),
        )


def logged(row: Any) -> tuple[int, list[Change], datetime]:
    """A ``playlist_mutation`` row as :func:`tests.unit.fakes.fold` takes it."""
    return row.version, [decode_change(w) for w in row.payload["changes"]], row.committed_at


async def fold_log(database: Database, playlist_id: str) -> PlaylistState:
    """Fold the mutation log from version 0, checking it against the outbox on the way.

    Asserts: versions 0…v each have exactly one log row and one outbox event,
    the event carries the log row's changes, and the fold equals the tables
    (header, members, live entries with ids, keys, media and order).
    """
    async with database.read() as conn:
        current = await repository.get_playlist(conn, playlist_id)
        log = (
            await conn.execute(
                select(playlist_mutation)
                .where(playlist_mutation.c.playlist_id == playlist_id)
                .order_by(playlist_mutation.c.version)
            )
        ).all()
        events = (
            await conn.execute(
                select(outbox)
                .where(outbox.c.playlist_id == playlist_id)
                .order_by(outbox.c.event_id)
            )
        ).all()
        members = {m.user_id: m.role for m in await repository.get_members(conn, playlist_id)}
    assert current is not None
    versions = list(range(current.version + 1))
    assert [r.version for r in log] == versions
    assert [e.version for e in events] == versions
    for row, event in zip(log, events, strict=True):
        assert row.payload["v"] == WIRE_VERSION
        assert event.payload["v"] == WIRE_VERSION
        assert event.payload["type"] == "PlaylistChanged"
        assert event.payload["playlist_id"] == playlist_id
        assert event.payload["version"] == row.version
        assert event.payload["operation_id"] == row.operation_id
        assert event.payload["actor_id"] == row.actor_id
        assert datetime.fromisoformat(event.payload["committed_at"]) == row.committed_at
        assert event.payload["changes"] == row.payload["changes"]
    state = fold(playlist_id, (logged(row) for row in log))
    live = await live_rows(database, playlist_id)
    assert state.live() == live
    assert state.playlist == current
    assert state.members == members
    assert current.entry_count == len(live)
    return state


async def random_history(
    ed: Editor, database: Database, rng: random.Random, steps: int
) -> dict[int, list[Entry]]:
    """Run ``steps`` random commands; returns the live entries at every version."""
    pid = ed.playlist_id
    snapshots = {ed.version: await live_rows(database, pid)}
    names = (f"m{i}" for i in itertools.count())
    for _ in range(steps):
        live = [e.entry_id for e in snapshots[ed.version]]
        known = list(itertools.chain.from_iterable(snapshots.values()))
        anchor = rng.choice(known).entry_id if known else None
        side = rng.choice(["after", "before"])
        where = {side: anchor} if anchor and rng.random() < 0.8 else {}
        kind = rng.choice(["add", "add", "move", "remove", "details", "member", "revert"])
        if kind == "move" and len(live) >= 2:
            targets = rng.sample([e for e in live if e != anchor], min(2, len(live) - 1))
            await ed.move(*targets, **where)
        elif kind == "remove" and live:
            await ed.remove(*rng.sample(live, min(len(live), rng.randint(1, 3))))
        elif kind == "details":
            await ed.run(UpdatePlaylist, title=f"Mix {ed.version}", description=f"v{ed.version}")
        elif kind == "member":
            role = rng.choice([Role.EDITOR, Role.VIEWER, None])
            if role is None:
                await ed.run(RemoveMember, user_id=BOB)
            else:
                await ed.run(SetMemberRole, user_id=BOB, role=role)
        elif kind == "revert" and ed.version > 0:
            await ed.run(RevertPlaylist, to_version=rng.randrange(ed.version))
        else:
            await ed.add(*(next(names) for _ in range(rng.randint(1, 3))), **where)
        snapshots[ed.version] = await live_rows(database, pid)
    return snapshots


async def backend_pid(db: Database) -> int:
    """The PostgreSQL backend of the connection ``db``'s pool hands out next."""
    async with db.write() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def terminate_backend(db: Database, pid: int) -> None:
    """Close backend ``pid`` from another connection (outside ``db``'s pool), and wait
    until it is gone."""
    await _terminate(db, "pid = :pid", {"pid": pid})


async def terminate_every_backend(db: Database) -> int:
    """Close every backend of ``db``'s database (as a server restart would), from a
    connection outside ``db``'s pool, and wait until they are gone; how many there were."""
    return await _terminate(db, "datname = current_database() AND pid <> pg_backend_pid()", {})


async def _terminate(db: Database, which: str, params: dict[str, Any]) -> int:
    """Terminate the backends of ``pg_stat_activity`` that ``which`` (a condition)
    selects, from a database of its own, and wait until they are gone; how many."""
    other = Database(db.url)
    try:
        async with other.write() as conn:
            terminate = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
            closed = await conn.execute(text(terminate + which), params)
            count = int(closed.scalar_one())
        for _ in range(100):  # the backends exit a moment after the call returns
            async with other.write() as conn:
                left = await conn.execute(
                    text(f"SELECT count(*) FROM pg_stat_activity WHERE {which}"), params
                )
                if left.scalar_one() == 0:
                    return count
            await asyncio.sleep(0.02)
        raise AssertionError(f"backends where {which} ({params}) are still there")
    finally:
        await other.dispose()


def dsn(url: str) -> str:
    """A SQLAlchemy URL (``postgresql+asyncpg://``) as asyncpg's ``connect`` takes it."""
    return url.replace("postgresql+asyncpg", "postgresql")


async def append_behind_a_held_lock(postgres: str, ed: Editor, media: str) -> Outcome:
    """``ed`` appends ``media`` while another transaction holds the playlist's row (asserted:
    the append waits) and appends an entry ``elsewhere`` after the last live one, at the
    next version, then commits; the append's outcome. ``ed.version`` follows both."""
    last = (await live_rows(ed.store.db, ed.playlist_id))[-1]
    other = await asyncpg.connect(dsn(postgres))
    try:
        held = other.transaction()
        await held.start()
        await other.execute("SELECT 1 FROM playlist WHERE id = $1 FOR UPDATE", ed.playlist_id)
        task = asyncio.create_task(ed.add(media))
        await asyncio.sleep(0.3)
        assert not task.done()  # waiting for the row
        (key,) = allocate(last.position_key, None, 1) or ()
        await other.execute(
            "INSERT INTO playlist_entry (playlist_id, entry_id, position_key, media_id, "
            "added_by, added_at) VALUES ($1, $2, $3, 'elsewhere', 'bob', $4)",
            ed.playlist_id,
            uuid.uuid4().hex,
            key,
            datetime.now(UTC),
        )
        await other.execute(
            "UPDATE playlist SET version = version + 1, entry_count = entry_count + 1 "
            "WHERE id = $1",
            ed.playlist_id,
        )
        await held.commit()
        ed.version += 1  # the other transaction's version
        return await asyncio.wait_for(task, timeout=10)
    finally:
        await other.close()
