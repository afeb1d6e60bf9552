"""Engines and transactions for the two profiles.

PostgreSQL (asyncpg): one pooled engine; writers serialise per playlist with
``SELECT … FOR UPDATE`` on the playlist row.

SQLite (aiosqlite): WAL, a busy timeout, and two engines. Writes go through a
pool of **one** connection whose transactions begin with ``BEGIN IMMEDIATE``,
so concurrent writers queue in the pool (asyncio-friendly) instead of failing
with "database is locked"; reads use their own connections and, under WAL,
never wait for the writer. The recipe for taking transaction control from
pysqlite is SQLAlchemy's ("Serializable isolation / Savepoints / Transactional
DDL", SQLAlchemy SQLite dialect docs).

Every transaction is one :class:`~sqlalchemy.ext.asyncio.AsyncConnection`
used by one task; nothing here is shared across concurrent coroutines.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

SQLITE_BUSY_TIMEOUT_MS = 30_000
WRITE_QUEUE_TIMEOUT_S = 60.0
"""How long a SQLite writer waits for its turn before the request fails."""


def _sqlite_pragmas(begin: str) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from pysqlite so we issue it ourselves.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    def on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return on_connect, on_begin


class Database:
    """The engines of one database URL and its transactions.

    Args:
        url: a SQLAlchemy async URL, ``sqlite+aiosqlite:///path`` or
            ``postgresql+asyncpg://user@host/db``. A SQLite file's directory
            is created when missing.
        pool_size: connections for reads (and PostgreSQL writes).
    """

    def __init__(self, url: str | URL, *, pool_size: int = 10) -> None:
        self.url = make_url(url)
        self.dialect = self.url.get_backend_name()
        if self.dialect == "sqlite":
            database = self.url.database or ""
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.write_engine = self._sqlite_engine("BEGIN IMMEDIATE", pool_size=1)
            self.read_engine = self._sqlite_engine("BEGIN", pool_size=pool_size)
        elif self.dialect == "postgresql":
            self.write_engine = self.read_engine = create_async_engine(
                self.url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True
            )
        else:
            raise ValueError(f"unsupported database {self.dialect!r}: use sqlite or postgresql")

    def _sqlite_engine(self, begin: str, *, pool_size: int) -> AsyncEngine:
        engine = create_async_engine(
            self.url, pool_size=pool_size, max_overflow=0, pool_timeout=WRITE_QUEUE_TIMEOUT_S
        )
        on_connect, on_begin = _sqlite_pragmas(begin)
        event.listen(engine.sync_engine, "connect", on_connect)
        event.listen(engine.sync_engine, "begin", on_begin)
        return engine

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction: commits when the block ends, rolls back on an exception."""
        async with self.write_engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction (one consistent snapshot on both dialects)."""
        async with self.read_engine.connect() as conn:
            if self.is_postgres:
                await conn.execution_options(
                    isolation_level="REPEATABLE READ", postgresql_readonly=True
                )
            async with conn.begin():
                yield conn

    async def dispose(self) -> None:
        await self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            await self.read_engine.dispose()
