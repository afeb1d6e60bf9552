"""The embedded server's watch over commits of other processes (:mod:`chorus.db.watch`).

Two :class:`~chorus.db.engine.Database` objects on one SQLite file stand for
two processes (each has its own connections, as a ``chorus import`` beside a
server has); every wait is bounded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from chorus.db.engine import Database
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.db.watch import LISTEN_APPLICATION_NAME, listen_commits, watch_commits
from chorus.domain.commands import CreatePlaylist
from chorus.resilience.tasks import cancel_and_wait
from tests.deadlines import patience

WAIT_S = patience(10.0)


async def test_a_commit_of_another_process_is_noticed(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}"
    await upgrade_async(url)
    server, cli = Database(url), Database(url)
    calls: asyncio.Queue[None] = asyncio.Queue()
    watch = asyncio.create_task(watch_commits(server, lambda: calls.put_nowait(None), poll_s=0.02))
    try:
        await asyncio.wait_for(calls.get(), WAIT_S)  # the first look, for what came before
        for n in range(3):
            await PlaylistStore(cli).create(CreatePlaylist(operation_id=f"op-{n}", title="x"), "al")
            await asyncio.wait_for(calls.get(), WAIT_S)
        assert not watch.done()
    finally:
        await cancel_and_wait(watch)
        await server.dispose()
        await cli.dispose()


async def test_postgresql_has_no_data_version(tmp_path: Path) -> None:
    db = Database("postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
    try:
        with pytest.raises(ValueError, match="SQLite"):
            await watch_commits(db, lambda: None)
    finally:
        await db.dispose()


# --- PostgreSQL: LISTEN/NOTIFY from the outbox trigger ---------------------------------


async def test_postgresql_commits_of_another_process_are_heard(postgres: str) -> None:
    server, cli = Database(postgres), Database(postgres)
    calls: asyncio.Queue[None] = asyncio.Queue()
    listener = asyncio.create_task(listen_commits(server, lambda: calls.put_nowait(None)))
    try:
        await asyncio.wait_for(calls.get(), WAIT_S)  # listening: for what came before
        for n in range(3):
            await PlaylistStore(cli).create(CreatePlaylist(operation_id=f"op-{n}", title="x"), "al")
            await asyncio.wait_for(calls.get(), WAIT_S)
        # A transaction that inserts no outbox row (or rolls back) notifies nobody.
        async with cli.write() as conn:
            await conn.exec_driver_sql("SELECT 1")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(calls.get(), 0.5)
        # Its connection killed from outside: it listens again, and hears the next one.
        await _terminate_listeners(cli)
        await asyncio.wait_for(calls.get(), WAIT_S)  # listening again
        await PlaylistStore(cli).create(CreatePlaylist(operation_id="op-3", title="x"), "al")
        await asyncio.wait_for(calls.get(), WAIT_S)
        assert not listener.done()
    finally:
        await cancel_and_wait(listener)
        await server.dispose()
        await cli.dispose()


async def _terminate_listeners(db: Database) -> None:
    async with db.write() as conn:
        killed = await conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = :name"
            ),
            {"name": LISTEN_APPLICATION_NAME},
        )
        assert killed.all() == [(True,)]


async def test_sqlite_has_no_notifications(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}")
    try:
        with pytest.raises(ValueError, match="PostgreSQL"):
            await listen_commits(db, lambda: None)
    finally:
        await db.dispose()
