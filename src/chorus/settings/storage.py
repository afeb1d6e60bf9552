"""Settings of storage: the database, the data directory and its secrets, writes, retention.

Part of :class:`chorus.settings.Settings` (``CHORUS_*``; docs/settings.md).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from chorus.auth import MIN_SECRET_LENGTH
from chorus.settings.database import masked_url

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./chorus-data/chorus.db"

MAX_KEEP_DAYS = 36_500.0
"""The longest retention ``chorus compact`` accepts (100 years, in days)."""

MAX_RETRY_WINDOW_HOURS = 87_600.0
"""The longest ``CHORUS_RETRY_WINDOW_HOURS`` (10 years): more overflows ``datetime``."""


class StorageSettings(BaseModel):
    """Where the data lives, the secrets kept beside it, how commands commit, what is kept."""

    model_config = ConfigDict(frozen=True)

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy async URL: sqlite+aiosqlite:///path or "
        "postgresql+asyncpg://user:password@host:port/db.",
    )
    data_dir: str = Field(
        "./chorus-data", description="Where the embedded profile keeps its files."
    )
    jwt_secret: str | None = Field(
        None, description="HS256 secret for bearer tokens; unset: generated in data_dir."
    )
    library_secret: str | None = Field(
        None,
        description="Key of the Liked Songs ids (HMAC of the user id); unset: generated in "
        "data_dir. Changing it gives every user a new, empty Liked Songs.",
    )
    group_commit: bool = Field(
        True,
        description="Commit a playlist's concurrent commands in groups, one transaction "
        "each, through its owner queue (docs/semantics.md); false: one transaction per command.",
    )
    owner_queue_size: int = Field(
        1024,
        ge=1,
        le=100_000,
        description="Commands that may wait for one playlist in one API process; one more "
        "is RATE_LIMITED with a retry hint.",
    )
    owner_queue_per_user: int = Field(
        256,
        ge=1,
        description="Of a playlist's waiting commands, how many may be one user's (at most "
        "owner_queue_size); one more is RATE_LIMITED.",
    )
    log_keep_days: float | None = Field(
        None,
        gt=0,
        le=MAX_KEEP_DAYS,
        description="chorus compact: keep log versions newer than this.",
    )
    retry_window_hours: float = Field(
        24.0,
        gt=0,
        le=MAX_RETRY_WINDOW_HOURS,
        description="Operation ids stay replayable at least this long (hours, at most 87,600).",
    )

    @field_validator("data_dir")
    @classmethod
    def _a_folder(cls, value: str) -> str:
        if not value.strip():
            # Not the working directory, silently: tokens made there would not open a
            # server started elsewhere.
            raise ValueError("must name a folder; unset it for ./chorus-data")
        return value

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str) -> str:
        try:
            backend = make_url(value).get_backend_name()
        except (ArgumentError, ValueError):  # a port that is not a number raises ValueError
            raise ValueError(f"not a database URL ({masked_url(value)})") from None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError("use sqlite+aiosqlite:// or postgresql+asyncpg://")
        url = make_url(value)
        driver = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}[backend]
        if url.drivername != driver:
            # Checked here, not when the first connection fails on a missing module
            # (postgresql:// means psycopg to SQLAlchemy; Chorus ships asyncpg).
            raise ValueError(f"use {driver}:// (the driver Chorus ships), got {url.drivername}://")
        if backend == "sqlite":
            _check_sqlite_file(url.database, url.query.get("mode"))
        return value

    @field_validator("jwt_secret", "library_secret")
    @classmethod
    def _long_secret(cls, value: str | None) -> str | None:
        if value is not None and len(value) < MIN_SECRET_LENGTH:
            raise ValueError(f"must be at least {MIN_SECRET_LENGTH} characters")
        if value is not None and (value.strip() != value or not value.isprintable()):
            # Blanks around a secret are a copy-paste slip (32 spaces are not a key).
            raise ValueError("must not start or end with blanks or hold control characters")
        return value


def _check_sqlite_file(database: str | None, mode: object = None) -> None:
    """Refuses a SQLite URL whose database is not a file Chorus may create or open.

    In memory, each process and connection would hold a database of its own
    (the writer's and the readers' would differ); a device, a FIFO or a link
    to one would get a ``-journal`` and a ``.serve-lock`` written beside it.
    """
    name = database or ""
    if name in ("", ":memory:") or name.startswith("file::memory:") or mode == "memory":
        raise ValueError("the embedded database must be a file (an in-memory one is not shared)")
    path = Path(name)
    if path.exists() and not path.resolve().is_file():
        raise ValueError(f"{name[:200]!r} is not a regular file")
