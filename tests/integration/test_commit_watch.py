"""The embedded server's watch over commits of other processes (:mod:`chorus.db.watch`).

Two :class:`~chorus.db.engine.Database` objects on one SQLite file stand for
two processes (each has its own connections, as a ``chorus import`` beside a
server has); every wait is bounded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from chorus.db.engine import Database
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.db.watch import watch_commits
from chorus.domain.commands import CreatePlaylist
from chorus.resilience.tasks import cancel_and_wait

WAIT_S = 10.0


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
