"""The database topology's settings: replicas and a transaction pooler, and what they build."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from chorus import bootstrap
from chorus.settings import Settings

PRIMARY = "postgresql+asyncpg://postgres@127.0.0.1:5432/chorus"


def _settings(**env: str) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[arg-type]


def test_replica_urls_are_a_comma_separated_list_of_postgresql_urls() -> None:
    settings = _settings(
        database_url=PRIMARY,
        database_replica_urls=" postgresql+asyncpg://postgres@r1:5433/chorus,"
        "postgresql+asyncpg://postgres@r2/chorus ",
    )
    assert settings.database_replica_url_list == (
        "postgresql+asyncpg://postgres@r1:5433/chorus",
        "postgresql+asyncpg://postgres@r2/chorus",
    )
    assert _settings().database_replica_url_list == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"database_replica_urls": "sqlite+aiosqlite:///x.db"}, "URL 1: use postgresql+asyncpg"),
        ({"database_replica_urls": f"{PRIMARY},,{PRIMARY}"}, "an empty URL in the list"),
        ({"database_replica_urls": "not a url"}, "URL 1: not a database URL"),
        ({"database_replica_urls": ",".join([PRIMARY] * 17)}, "17 URLs; at most 16"),
        ({"database_pooler": "session"}, "'none' or 'transaction'"),
        ({"database_direct_url": PRIMARY}, "CHORUS_DATABASE_DIRECT_URL is for"),
    ],
)
def test_a_bad_topology_is_refused_with_the_reason(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        _settings(database_url=PRIMARY, **env)


def test_replicas_and_a_pooler_need_a_postgresql_primary() -> None:
    with pytest.raises(ValidationError, match="REPLICA_URLS needs a PostgreSQL"):
        _settings(database_replica_urls=PRIMARY)
    with pytest.raises(ValidationError, match="POOLER=transaction needs a PostgreSQL"):
        _settings(database_pooler="transaction")


async def test_the_root_builds_replicas_and_the_pooler_s_options() -> None:
    settings = _settings(
        database_url=PRIMARY.replace("5432", "6432"),
        database_pooler="transaction",
        database_direct_url=PRIMARY,
        database_replica_urls="postgresql+asyncpg://postgres@127.0.0.1:5433/chorus",
    )
    db = bootstrap.database(settings)  # nothing connects until used
    try:
        assert settings.direct_database_url == PRIMARY
        assert db.direct_url.port == 5432
        assert db.url.port == 6432
        assert db.replicas is not None
        assert [r.name for r in db.replicas.members] == ["127.0.0.1:5433"]
        # SQLAlchemy's own statement cache off (asyncpg's is off in connect_args).
        assert db.write_engine.url.query["prepared_statement_cache_size"] == "0"
    finally:
        await db.dispose()
