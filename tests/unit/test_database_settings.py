"""The database topology's settings: replicas and a transaction pooler, and what they build."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

from chorus import bootstrap
from chorus.cli import main, subcommands
from chorus.settings import Settings, masked_url

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
        (
            {"database_replica_urls": "sqlite+aiosqlite:///x.db"},
            "URL 1 of 1: use postgresql+asyncpg",
        ),
        ({"database_replica_urls": f"{PRIMARY},,{PRIMARY}"}, "an empty URL in the list"),
        ({"database_replica_urls": "not a url"}, "URL 1 of 1: not a database URL (***)"),
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


async def test_the_pool_size_sizes_every_postgresql_pool_with_no_overflow() -> None:
    settings = _settings(
        database_url=PRIMARY,
        database_pool_size="7",
        database_replica_urls="postgresql+asyncpg://postgres@127.0.0.1:5433/chorus",
    )
    db = bootstrap.database(settings)  # nothing connects until used
    try:
        assert db.replicas is not None
        for engine in (db.write_engine, db.replicas.members[0].engine):
            pool = engine.sync_engine.pool
            assert pool.size() == 7  # type: ignore[attr-defined]
            assert pool._max_overflow == 0  # type: ignore[attr-defined]
    finally:
        await db.dispose()


@pytest.mark.parametrize("value", ["0", "1", "1001", "ten", "-3"])
def test_a_pool_size_out_of_range_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="database_pool_size"):
        _settings(database_url=PRIMARY, database_pool_size=value)


SECRET = "S3cretPW"


def _messages(error: ValidationError) -> str:
    """What ``chorus`` prints of a refusal: each error's message (never its input)."""
    return "; ".join(e["msg"] for e in error.errors())


@pytest.mark.parametrize(
    ("replicas", "said"),
    [
        # The driver is wrong: the URL is shown, its password is not.
        (
            f"postgresql://postgres:{SECRET}@r1/chorus",
            "URL 1 of 1: use postgresql+asyncpg://user@host:port/db, "
            "got postgresql://postgres:***@r1/chorus",
        ),
        (
            f"{PRIMARY},postgresql://postgres:{SECRET}@r2/chorus",
            "URL 2 of 2: use postgresql+asyncpg",
        ),
        # A comma in the password splits the URL: "postgres:S3c" has no port.
        (
            "postgresql+asyncpg://postgres:S3c,retPW@r1/chorus",
            "URL 1 of 2: not a database URL (***); a comma inside a URL (in a password) "
            "must be percent-encoded as %2C",
        ),
    ],
)
def test_a_bad_replica_url_is_named_by_its_place_without_its_password(
    replicas: str, said: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        _settings(database_url=PRIMARY, database_replica_urls=replicas)
    message = _messages(refused.value)
    assert said in message
    assert "S3c" not in message  # nor any part of the password
    assert "int()" not in message


@pytest.mark.parametrize("field", ["database_url", "database_direct_url"])
def test_an_unparsable_database_url_is_refused_without_its_password(field: str) -> None:
    env = {"database_pooler": "transaction"} if field == "database_direct_url" else {}
    with pytest.raises(ValidationError) as refused:
        _settings(
            **({"database_url": PRIMARY} | env | {field: f"postgresql+asyncpg://u:{SECRET}@h:x/d"})
        )
    message = _messages(refused.value)
    assert "not a database URL (***)" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (f"postgresql://postgres:{SECRET}@h/chorus", "use postgresql+asyncpg:// (the driver"),
        (f"postgres://postgres:{SECRET}@h/chorus", "or postgresql+asyncpg://"),
        (f"postgresql+psycopg://postgres:{SECRET}@h/chorus", "got postgresql+psycopg://"),
        (
            "sqlite:///./chorus.db",
            "use sqlite+aiosqlite:// (the driver Chorus ships), got sqlite://",
        ),
    ],
)
def test_a_database_url_without_the_shipped_driver_is_refused_at_once(url: str, said: str) -> None:
    # Not later, as the first connection fails on a module that is not installed.
    with pytest.raises(ValidationError) as refused:
        _settings(database_url=url)
    message = _messages(refused.value)
    assert said in message
    assert SECRET not in message


def test_masked_url_hides_the_password_or_the_whole_url() -> None:
    assert masked_url(f"postgresql+asyncpg://postgres:{SECRET}@127.0.0.1:5432/chorus") == (
        "postgresql+asyncpg://postgres:***@127.0.0.1:5432/chorus"
    )
    assert masked_url(f"redis://:{SECRET}@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert masked_url(PRIMARY) == PRIMARY
    assert masked_url("postgresql+asyncpg://postgres:S3c") == "***"


def test_the_start_banner_shows_the_database_without_its_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def no_server(_app: object, listener: socket.socket, **_options: object) -> int:
        listener.close()
        return 0

    monkeypatch.setenv("CHORUS_DATABASE_URL", PRIMARY.replace("postgres@", f"postgres:{SECRET}@"))
    monkeypatch.setenv("CHORUS_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(subcommands, "migrate", lambda *_a, **_k: None)  # no server is asked
    monkeypatch.setattr(subcommands, "lock_embedded_postgres", lambda *_a: None)  # nor here
    monkeypatch.setattr(subcommands, "stop_cleanly_on_signals", lambda: None)
    monkeypatch.setattr(subcommands, "run_server", no_server)
    monkeypatch.setenv("CHORUS_PORT", "0")  # any free port
    assert main(["serve", "--host", "127.0.0.1"]) == 0
    out = capsys.readouterr().out
    assert "database: postgresql+asyncpg://postgres:***@127.0.0.1:5432/chorus" in out
    assert SECRET not in out
