"""One embedded-profile ``chorus serve`` per PostgreSQL database: the advisory lock.

On the machine's PostgreSQL. Each test takes the lock through the CLI's own
function and looks at ``pg_locks`` from another connection; the e2e test in
``tests/e2e/test_hostile_ops.py`` starts real servers.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from chorus.cli.process import lock_embedded_postgres
from chorus.db import serve_lock
from chorus.db.serve_lock import SERVE_LOCK_KEY, ServeLock, hold_serve_lock
from chorus.settings import Settings
from tests.deadlines import patience

WAIT_S = patience(20.0)


def _settings(url: str, **more: str) -> Settings:
    return Settings(database_url=url, **more)  # type: ignore[arg-type]


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _holders(url: str) -> list[tuple[int, str]]:
    """The backends holding the lock: (pid, application_name)."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT l.pid, a.application_name FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.objid = ($1::bigint & 4294967295) AND l.classid = ($1::bigint >> 32)",
            SERVE_LOCK_KEY,
        )
        return [(row["pid"], row["application_name"]) for row in rows]
    finally:
        await conn.close()


async def _terminate(url: str, pid: int) -> None:
    """Terminate backend ``pid`` from a connection of its own."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()


def _wait_for_holders(url: str, want: int, *, not_pid: int | None = None) -> list[tuple[int, str]]:
    deadline = time.monotonic() + WAIT_S
    while True:
        holders = asyncio.run(_holders(url))
        if len(holders) == want and all(pid != not_pid for pid, _ in holders):
            return holders
        assert time.monotonic() < deadline, holders
        time.sleep(0.1)


def test_a_second_server_is_refused_naming_the_first(
    postgres: str, capsys: pytest.CaptureFixture[str]
) -> None:
    held = lock_embedded_postgres(_settings(postgres))
    assert held is not None
    try:
        [(_pid, name)] = _wait_for_holders(postgres, 1)
        assert name.startswith(f"chorus serve {os.getpid()} on ")
        with pytest.raises(SystemExit) as refused:
            lock_embedded_postgres(_settings(postgres))
        assert refused.value.code == 2
        line = capsys.readouterr().err
        assert line.count("\n") == 1
        assert f"another chorus serve (chorus serve {os.getpid()} on " in line
        assert "full profile" in line
    finally:
        held.close()
    _wait_for_holders(postgres, 0)  # released: the next one starts
    again = lock_embedded_postgres(_settings(postgres))
    assert again is not None
    again.close()


def _lose_and_take_again(postgres: str) -> None:
    """Terminate the backend holding the lock; wait until another connection holds it."""
    [(pid, _)] = _wait_for_holders(postgres, 1)
    asyncio.run(_terminate(postgres, pid))
    _wait_for_holders(postgres, 1, not_pid=pid)


def test_a_lost_connection_takes_the_lock_again(postgres: str) -> None:
    held = lock_embedded_postgres(_settings(postgres))
    assert held is not None
    try:
        _lose_and_take_again(postgres)
    finally:
        held.close()


def test_an_attempt_that_fails_oddly_is_retried_and_the_lock_taken_again(
    postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt cut short by a terminated backend may fail as asyncpg's
    ``InternalClientError``, not a connection error: the lock's thread must go on
    trying, not end and leave the database unguarded (a second server then started)."""
    real_take = serve_lock._take
    failures = [asyncpg.InternalClientError("cannot switch to state 12"), RuntimeError("odd")]
    calls = 0

    async def failing_twice_after_the_first(dsn: str) -> object:
        nonlocal calls
        calls += 1
        if calls > 1 and failures:
            raise failures.pop(0)
        return await real_take(dsn)

    monkeypatch.setattr(serve_lock, "_take", failing_twice_after_the_first)
    held = lock_embedded_postgres(_settings(postgres))
    assert held is not None
    try:
        _lose_and_take_again(postgres)  # taken again after both failures
        assert failures == []
    finally:
        held.close()


def test_the_full_profile_and_sqlite_take_no_postgres_lock(postgres: str, tmp_path: object) -> None:
    full = _settings(
        postgres,
        kafka_bootstrap_servers="127.0.0.1:9",
        redis_url="redis://127.0.0.1:9/0",
    )
    assert full.full_profile
    assert lock_embedded_postgres(full) is None
    assert lock_embedded_postgres(_settings(f"sqlite+aiosqlite:///{tmp_path}/c.db")) is None
    assert asyncio.run(_holders(postgres)) == []


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+asyncpg://postgres@127.0.0.1:9/nothing",  # nothing listens
        "postgresql+asyncpg://postgres@127.0.0.1:5432/chorus_no_such_database",  # refused
    ],
)
def test_an_unusable_database_is_one_line_and_leaves_no_socket(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        lock_embedded_postgres(_settings(url))
    assert refused.value.code == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1
    assert "cannot take the one-serve lock" in line
    # A socket left open would be reported here (warnings are errors) or in a later test.
    time.sleep(0.2)  # the lock's thread closes its loop
    gc.collect()


def test_a_lock_another_process_took_meanwhile_stops_this_one(postgres: str) -> None:
    # The lock's connection lost, and another process takes the lock before it is
    # taken again: this server is told (by default it stops as on SIGTERM).
    told: list[str] = []
    held = hold_serve_lock(make_url(postgres), taken_over=told.append)
    assert isinstance(held, ServeLock)
    try:
        [(pid, _)] = _wait_for_holders(postgres, 1)

        async def take_over() -> asyncpg.Connection:
            conn = await asyncpg.connect(
                _dsn(postgres), server_settings={"application_name": "the other serve"}
            )
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
            await conn.execute("SELECT pg_advisory_lock($1)", SERVE_LOCK_KEY)  # waits for it
            return conn

        async def run() -> None:
            other = await take_over()
            try:
                deadline = time.monotonic() + WAIT_S
                while not told:
                    assert time.monotonic() < deadline, "not told"
                    await asyncio.sleep(0.1)
            finally:
                await other.close()

        asyncio.run(run())
        assert told == ["the other serve from 127.0.0.1"]
    finally:
        held.close()
