"""Real databases for storage tests: a SQLite file and the PostgreSQL server.

Every test that takes ``database`` runs once per backend. PostgreSQL tests get
a fresh database cloned from a migrated template (``CREATE DATABASE …
TEMPLATE``), so each starts empty and runs the real migrations' schema. When
the server cannot be reached the tests fail; they are never skipped.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from chorus.db.engine import Database
from chorus.db.migrate import upgrade
from chorus.db.store import PlaylistStore
from tests.conftest import POSTGRES_ADMIN_URL

TEMPLATE = f"chorus_test_template_{uuid.uuid4().hex[:8]}"


def _dsn(database: str) -> str:
    url = make_url(POSTGRES_ADMIN_URL).set(drivername="postgresql", database=database)
    return url.render_as_string(hide_password=False)


def _async_url(database: str) -> str:
    url = make_url(POSTGRES_ADMIN_URL).set(drivername="postgresql+asyncpg", database=database)
    return url.render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(_dsn(make_url(POSTGRES_ADMIN_URL).database or "postgres"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A migrated template database on the real server, dropped at the end."""
    asyncio.run(_admin(f'CREATE DATABASE "{TEMPLATE}"'))
    upgrade(_async_url(TEMPLATE))
    yield TEMPLATE
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty, migrated database on each backend."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}"
        upgrade(url)
        yield url
        return
    template = request.getfixturevalue("postgres_template")
    name = f"chorus_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    yield _async_url(name)
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    db = Database(database_url)
    yield db
    await db.dispose()


@pytest.fixture
def store(database: Database) -> PlaylistStore:
    return PlaylistStore(database)
