"""Real databases for storage tests: a SQLite file and the PostgreSQL server.

Every test that takes ``database`` runs once per backend. PostgreSQL tests get
a fresh database cloned from a migrated template (``CREATE DATABASE …
TEMPLATE``), so each starts empty and runs the real migrations' schema. When
the server cannot be reached the tests fail; they are never skipped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from chorus.db.engine import Database
from chorus.db.migrate import upgrade
from chorus.db.store import PlaylistStore
from tests.servers import create_database, drop_database, postgres_url


@contextlib.contextmanager
def _migrated(backend: str, sqlite_file: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of an empty, migrated database on ``backend``: a SQLite file, or
    a PostgreSQL clone of the migrated template, dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{sqlite_file}"
        upgrade(url)
        yield url
        return
    name = create_database(template=request.getfixturevalue("postgres_template"))
    try:
        yield postgres_url(name)
    finally:
        drop_database(name)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty, migrated database on each backend."""
    with _migrated(request.param, tmp_path / "chorus.db", request) as url:
        yield url


@pytest.fixture
def twin_url(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A second empty, migrated database on the backend of ``database_url``."""
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    with _migrated(backend, tmp_path / "twin.db", request) as url:
        yield url


@pytest.fixture
def postgres(postgres_template: str) -> Iterator[str]:
    """A database on the machine's PostgreSQL, migrated to head (so with the outbox
    trigger); its URL."""
    name = create_database(template=postgres_template)
    yield postgres_url(name)
    drop_database(name)


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    db = Database(database_url)
    yield db
    await db.dispose()


@pytest.fixture
def store(database: Database) -> PlaylistStore:
    return PlaylistStore(database)
