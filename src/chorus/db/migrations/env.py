"""Alembic environment: async engines for both dialects, URL from the caller."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import create_async_engine

from chorus.db.tables import metadata

config = context.config

MIGRATION_LOCK = 0x43484F52_4D494752
"""Advisory lock key ("CHORMIGR") held by the migrating transaction on PostgreSQL."""


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("no database URL: use chorus.db.migrate.upgrade(url)")
    return str(make_url(url).render_as_string(hide_password=False))


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(make_url(_url()))
    try:
        if engine.dialect.name == "sqlite":
            # Switch the journal once, here, before any pool connects: pool
            # connections switching it together can deadlock on the exclusive
            # lock, which SQLite answers with "database is locked" at once.
            autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
            async with autocommit.connect() as conn:
                await conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        async with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Processes started together must not migrate at once: the
                # others wait here, then find nothing left to do.
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK}
                )
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    _target = make_url(_url())
    if _target.get_backend_name() == "sqlite" and _target.database not in (None, "", ":memory:"):
        Path(_target.database).expanduser().parent.mkdir(exist_ok=True)  # not its parents
    asyncio.run(_run_async())
