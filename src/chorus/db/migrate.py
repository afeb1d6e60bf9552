"""Alembic migrations, run from the installed package (``chorus db upgrade``)."""

from __future__ import annotations

import asyncio

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import URL, make_url


def alembic_config(url: str | URL) -> Config:
    """An Alembic config for ``url`` using the migrations shipped in this package."""
    config = Config()
    config.set_main_option("script_location", "chorus.db:migrations")
    config.attributes["url"] = make_url(url)
    return config


def upgrade(url: str | URL, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` (blocking; creates a SQLite file)."""
    command.upgrade(alembic_config(url), revision)


async def upgrade_async(url: str | URL, revision: str = "head") -> None:
    """:func:`upgrade` from async code (Alembic runs its own event loop in a thread)."""
    await asyncio.to_thread(upgrade, url, revision)
