"""Settings of the database's topology: read replicas and a transaction pooler in front.

Part of :class:`chorus.settings.Settings` (``CHORUS_*``; docs/settings.md,
docs/deploying.md "Read replicas and PgBouncer"). The checks that need
``CHORUS_DATABASE_URL`` too (replicas and a pooler are PostgreSQL's) are
:class:`~chorus.settings.Settings`' own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from chorus.db.engine import DATABASE_POOL_SIZE

MAX_REPLICAS = 16
"""The most replica URLs ``CHORUS_DATABASE_REPLICA_URLS`` takes (more is a pasting slip)."""


COMMA_HINT = "a comma inside a URL (in a password) must be percent-encoded as %2C"
"""Why a list of URLs may split where the user did not mean it to."""


def masked_url(value: str) -> str:
    """``value`` with its password shown as ``***``, for messages, banners and logs.

    Returns:
        SQLAlchemy's rendering with ``hide_password``
        (``postgresql+asyncpg://postgres:***@host:5432/db``, ``redis://:***@host/0``),
        or ``***`` whole when ``value`` does not parse (a fragment could be a password).
    """
    try:
        return make_url(value).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # a port that is not a number raises ValueError
        return "***"


def _postgres_url(value: str, what: str, hint: str = "") -> str:
    """``value`` if it is a ``postgresql+asyncpg://`` URL; else a message naming ``what``,
    with the URL's password masked (:func:`masked_url`) and ``hint`` after it."""
    try:
        url = make_url(value)
    except (ArgumentError, ValueError):
        raise ValueError(f"{what}: not a database URL ({masked_url(value)}){hint}") from None
    if url.drivername != "postgresql+asyncpg":
        raise ValueError(
            f"{what}: use postgresql+asyncpg://user@host:port/db, got {masked_url(value)}"
        )
    return value


class DatabaseSettings(BaseModel):
    """Where reads may go besides the primary, and what sits between Chorus and PostgreSQL."""

    model_config = ConfigDict(frozen=True)

    database_replica_urls: str | None = Field(
        None,
        description="Comma-separated postgresql+asyncpg:// URLs of streaming replicas of "
        "CHORUS_DATABASE_URL; reads of a playlist go there only when the replica's copy is "
        "at least as new as the newest version the API knows (docs/deploying.md).",
    )
    database_replica_breaker_s: float = Field(
        5.0,
        gt=0,
        le=86_400,
        description="Seconds a replica that failed to answer is left alone before one trial read.",
    )
    database_pool_size: int = Field(
        DATABASE_POOL_SIZE,
        ge=2,
        le=1_000,
        description="Connections a process keeps to the PostgreSQL primary (and to each "
        "replica), a fixed pool: a request beyond them waits for one (up to 30 s). At "
        "least 2: the embedded profile's outbox relay holds one while its publisher writes "
        "feed rows on another.",
    )
    database_pooler: Literal["none", "transaction"] = Field(
        "none",
        description="transaction: CHORUS_DATABASE_URL (and the replicas) go through a pooler "
        "in transaction mode (PgBouncer): no statement cache, unique prepared statement names.",
    )
    database_direct_url: str | None = Field(
        None,
        description="The primary without the pooler, for what must not be pooled: LISTEN and "
        "migrations; unset: CHORUS_DATABASE_URL.",
    )

    @field_validator("database_replica_urls")
    @classmethod
    def _replica_urls(cls, value: str | None) -> str | None:
        if value is None:
            return None
        urls = [item.strip() for item in value.split(",")]
        if not all(urls):
            raise ValueError("an empty URL in the list (two commas, or one at an end)")
        if len(urls) > MAX_REPLICAS:
            raise ValueError(f"{len(urls)} URLs; at most {MAX_REPLICAS}")
        hint = f"; {COMMA_HINT}" if len(urls) > 1 else ""
        for number, url in enumerate(urls, 1):
            _postgres_url(url, f"URL {number} of {len(urls)}", hint)
        return value

    @field_validator("database_direct_url")
    @classmethod
    def _direct_url(cls, value: str | None) -> str | None:
        return None if value is None else _postgres_url(value, "the direct URL")

    @property
    def database_replica_url_list(self) -> tuple[str, ...]:
        """The replica URLs in the order given; empty: no replica."""
        value = self.database_replica_urls
        return tuple(item.strip() for item in value.split(",")) if value else ()

    @property
    def behind_transaction_pooler(self) -> bool:
        return self.database_pooler == "transaction"
