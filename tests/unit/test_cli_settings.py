"""Bad settings and arguments: exit status 2 and one line naming the problem, never a traceback."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from chorus.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    code = exited.value.code
    assert isinstance(code, int)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CHORUS_REDIS_URL": "redis://127.0.0.1:6379/0"}, "go together"),
        ({"CHORUS_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092"}, "go together"),
        (
            {"CHORUS_KAFKA_BOOTSTRAP_SERVERS": "localhost", "CHORUS_REDIS_URL": "redis://x"},
            "CHORUS_KAFKA_BOOTSTRAP_SERVERS",
        ),
        (
            {"CHORUS_KAFKA_BOOTSTRAP_SERVERS": "h:99999", "CHORUS_REDIS_URL": "redis://x"},
            "CHORUS_KAFKA_BOOTSTRAP_SERVERS",
        ),
        (
            {"CHORUS_KAFKA_BOOTSTRAP_SERVERS": "h:9092", "CHORUS_REDIS_URL": "http://x"},
            "CHORUS_REDIS_URL",
        ),
        ({"CHORUS_KAFKA_TOPIC": "bad topic!"}, "CHORUS_KAFKA_TOPIC"),
        ({"CHORUS_KAFKA_TOPIC": "x" * 300}, "CHORUS_KAFKA_TOPIC"),
        ({"CHORUS_KAFKA_TOPIC_PARTITIONS": "0"}, "CHORUS_KAFKA_TOPIC_PARTITIONS"),
        ({"CHORUS_KAFKA_IDEMPOTENT_PRODUCER": "perhaps"}, "CHORUS_KAFKA_IDEMPOTENT_PRODUCER"),
        ({"CHORUS_SNAPSHOT_PAGE_SIZE": "-1"}, "CHORUS_SNAPSHOT_PAGE_SIZE"),
        ({"CHORUS_REDIS_BREAKER_RESET_S": "0"}, "CHORUS_REDIS_BREAKER_RESET_S"),
        ({"CHORUS_CORS_ORIGINS": "localhost:5173"}, "CHORUS_CORS_ORIGINS"),
        ({"CHORUS_CORS_ORIGINS": "http://a.example/path"}, "CHORUS_CORS_ORIGINS"),
        ({"CHORUS_HEAD_TIMEOUT_S": "0"}, "CHORUS_HEAD_TIMEOUT_S"),
        ({"CHORUS_HEAD_TIMEOUT_S": "1e-300"}, "CHORUS_HEAD_TIMEOUT_S"),
        ({"CHORUS_WS_PING_TIMEOUT_S": "0.01"}, "CHORUS_WS_PING_TIMEOUT_S"),
        ({"CHORUS_WS_PING_S": "0.0000001"}, "CHORUS_WS_PING_S"),
        ({"CHORUS_WS_PER_MESSAGE_DEFLATE": "perhaps"}, "CHORUS_WS_PER_MESSAGE_DEFLATE"),
        ({"CHORUS_SHUTDOWN_TIMEOUT_S": "1e-9"}, "CHORUS_SHUTDOWN_TIMEOUT_S"),
        ({"CHORUS_MAX_HEADER_BYTES": "10"}, "CHORUS_MAX_HEADER_BYTES"),
        ({"CHORUS_MAX_HEADERS": "0"}, "CHORUS_MAX_HEADERS"),
        ({"CHORUS_MAX_CONNECTIONS": "0"}, "CHORUS_MAX_CONNECTIONS"),
        ({"CHORUS_KEEP_ALIVE_TIMEOUT_S": "-1"}, "CHORUS_KEEP_ALIVE_TIMEOUT_S"),
        ({"CHORUS_KEEP_ALIVE_TIMEOUT_S": "inf"}, "CHORUS_KEEP_ALIVE_TIMEOUT_S"),
        ({"CHORUS_KEEP_ALIVE_TIMEOUT_S": "nan"}, "CHORUS_KEEP_ALIVE_TIMEOUT_S"),
        ({"CHORUS_HEAD_TIMEOUT_S": "Infinity"}, "CHORUS_HEAD_TIMEOUT_S"),
        ({"CHORUS_REDIS_BREAKER_RESET_S": "nan"}, "CHORUS_REDIS_BREAKER_RESET_S"),
        ({"CHORUS_RETRY_WINDOW_HOURS": "inf"}, "CHORUS_RETRY_WINDOW_HOURS"),
        ({"CHORUS_RETRY_WINDOW_HOURS": "1e308"}, "CHORUS_RETRY_WINDOW_HOURS"),
        ({"CHORUS_RETRY_WINDOW_HOURS": "87601"}, "CHORUS_RETRY_WINDOW_HOURS"),
        ({"CHORUS_FEED_RETENTION_DAYS": "2147483647"}, "CHORUS_FEED_RETENTION_DAYS"),
        ({"CHORUS_HEAD_TIMEOUT_S": "1e308"}, "CHORUS_HEAD_TIMEOUT_S"),
        ({"CHORUS_HOST": ""}, "CHORUS_HOST"),
        ({"CHORUS_HOST": " "}, "CHORUS_HOST"),
        ({"CHORUS_HOST": "local host"}, "CHORUS_HOST"),
        ({"CHORUS_LOG_KEEP_DAYS": "nan"}, "CHORUS_LOG_KEEP_DAYS"),
        ({"CHORUS_BODY_TIMEOUT_S": "0"}, "CHORUS_BODY_TIMEOUT_S"),
        ({"CHORUS_BODY_TIMEOUT_S": "-1"}, "CHORUS_BODY_TIMEOUT_S"),
        ({"CHORUS_BODY_TIMEOUT_S": "inf"}, "CHORUS_BODY_TIMEOUT_S"),
        ({"CHORUS_BODY_TIMEOUT_S": "soon"}, "CHORUS_BODY_TIMEOUT_S"),
        ({"CHORUS_CORS_MAX_AGE_S": "-1"}, "CHORUS_CORS_MAX_AGE_S"),
        ({"CHORUS_METRICS_OPERATION_NAMES": "Good, 1Bad"}, "CHORUS_METRICS_OPERATION_NAMES"),
        ({"CHORUS_METRICS_OPERATION_NAMES": "x" * 101}, "CHORUS_METRICS_OPERATION_NAMES"),
        ({"CHORUS_METRICS_TOKEN": "short"}, "CHORUS_METRICS_TOKEN"),
        ({"CHORUS_METRICS_TOKEN": "a token with spaces in"}, "CHORUS_METRICS_TOKEN"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "relay", "fanout", "project-cache", "feed"])
def test_bad_full_profile_settings_exit_2_naming_the_variable(
    refused_settings: Callable[..., str], env: dict[str, str], named: str, command: str
) -> None:
    err = refused_settings(env, command)
    assert err.startswith("chorus: bad settings:")
    assert named in err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_value_is_echoed_unless_it_may_be_a_credential(
    refused_settings: Callable[..., str],
) -> None:
    err = refused_settings({"CHORUS_LEAN_ROUTE": "maybe"}, "serve")
    assert "CHORUS_LEAN_ROUTE='maybe': Input should be a valid boolean" in err
    err = refused_settings({"CHORUS_METRICS_TOKEN": "a token with spaces in"}, "serve")
    assert "CHORUS_METRICS_TOKEN: " in err
    assert "a token with spaces in" not in err
    err = refused_settings({"CHORUS_REDIS_CLUSTER": "true"}, "serve")
    assert "Value error" not in err


@pytest.mark.parametrize("command", ["relay", "fanout", "project-cache", "feed"])
def test_workers_refuse_the_embedded_profile(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code, err = _run(capsys, command)
    assert code == 2
    assert "needs the full profile" in err
    assert "CHORUS_KAFKA_BOOTSTRAP_SERVERS" in err


def test_serve_with_workers_refuses_the_embedded_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _run(capsys, "serve", "--with-workers")
    assert code == 2
    assert "--with-workers needs the full profile" in err


def test_serve_workers_refuse_the_embedded_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "serve", "--workers", "2")
    assert code == 2
    assert "--workers 2 needs the full profile" in err


GATEWAY_REFUSED = (
    "a gateway (CHORUS_SERVE_ROLE=gateway, --role gateway) needs the full profile: set "
    "CHORUS_KAFKA_BOOTSTRAP_SERVERS, CHORUS_REDIS_URL and a PostgreSQL CHORUS_DATABASE_URL"
)


def test_serve_as_a_gateway_refuses_the_embedded_profile(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, err = _run(capsys, "serve", "--role", "gateway")
    assert code == 2
    assert GATEWAY_REFUSED in err
    assert len(err.strip().splitlines()) == 1
    monkeypatch.setenv("CHORUS_SERVE_ROLE", "gateway")
    code, err = _run(capsys, "serve")
    assert code == 2
    assert "needs the full profile" in err


def test_serve_as_a_gateway_refuses_kafka_and_redis_beside_sqlite(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on port 9: the refusal must come before any connection.
    monkeypatch.setenv("CHORUS_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    monkeypatch.setenv("CHORUS_REDIS_URL", "redis://127.0.0.1:9/0")
    code, err = _run(capsys, "serve", "--role", "gateway")
    assert code == 2
    assert GATEWAY_REFUSED in err
    assert len(err.strip().splitlines()) == 1


def test_the_app_refuses_a_gateway_on_sqlite() -> None:
    from chorus.app import create_app
    from chorus.settings import Settings

    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        serve_role="gateway",
        kafka_bootstrap_servers="127.0.0.1:9",
        redis_url="redis://127.0.0.1:9/0",
    )
    with pytest.raises(ValueError, match="a PostgreSQL CHORUS_DATABASE_URL"):
        create_app(settings)


def test_serve_role_is_one_of_three(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHORUS_SERVE_ROLE", "subscriptions")
    code, err = _run(capsys, "serve")
    assert code == 2
    assert "CHORUS_SERVE_ROLE" in err
    code, err = _run(capsys, "serve", "--role", "ws")
    assert code == 2
    assert "invalid choice" in err


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("sqlite+aiosqlite://", "must be a file"),
        ("sqlite+aiosqlite:///:memory:", "must be a file"),
        ("sqlite+aiosqlite:///file::memory:?uri=true", "must be a file"),
        ("sqlite+aiosqlite:///file:mem?mode=memory&uri=true", "must be a file"),
        ("sqlite+aiosqlite:////dev/null", "not a regular file"),
    ],
)
def test_an_embedded_database_that_is_not_a_file_is_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str, reason: str
) -> None:
    monkeypatch.setenv("CHORUS_DATABASE_URL", url)
    code, err = _run(capsys, "serve")
    assert code == 2
    assert err.startswith("chorus: bad settings: CHORUS_DATABASE_URL")
    assert reason in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_serve_workers_is_a_count(capsys: pytest.CaptureFixture[str], workers: str) -> None:
    code, err = _run(capsys, "serve", "--workers", workers)
    assert code == 2
    assert "--workers" in err


@pytest.mark.parametrize("command", [("relay",), ("serve",), ("catalog", "serve")])
@pytest.mark.parametrize("port", ["70000", "99999", "http", "-5", "8000.0", "1_000", ""])
def test_a_port_must_be_a_port(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...], port: str
) -> None:
    code, err = _run(capsys, *command, "--port", port)
    assert code == 2
    assert "--port" in err
    assert "Traceback" not in err


def test_a_worker_port_in_use_exits_2_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHORUS_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")  # nothing listens
    monkeypatch.setenv("CHORUS_REDIS_URL", "redis://127.0.0.1:9/0")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, err = _run(capsys, "fanout", "--port", str(port))
    assert code == 2
    assert err.startswith(f"chorus: cannot listen on 127.0.0.1:{port}:")
    assert len(err.strip().splitlines()) == 1


def test_a_lone_cross_setting_problem_is_not_given_an_empty_variable_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHORUS_REDIS_URL", "redis://127.0.0.1:6379/0")
    code, err = _run(capsys, "serve")
    assert code == 2
    assert "CHORUS_:" not in err
    assert "CHORUS_KAFKA_BOOTSTRAP_SERVERS" in err


def test_every_float_setting_refuses_inf_and_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from chorus.settings import Settings

    floats = [name for name, f in Settings.model_fields.items() if float in _types(f.annotation)]
    assert "body_timeout_s" in floats
    for name in floats:
        for value in ("inf", "-inf", "nan"):
            monkeypatch.setenv(f"CHORUS_{name.upper()}", value)
            with pytest.raises(ValidationError, match="finite"):
                Settings()
        monkeypatch.delenv(f"CHORUS_{name.upper()}")


def _types(annotation: object) -> tuple[object, ...]:
    import typing

    return typing.get_args(annotation) or (annotation,)


def test_every_integer_setting_refuses_a_number_past_32_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import ValidationError

    from chorus.settings import MAX_SETTING_INTEGER, Settings

    ints = [name for name, f in Settings.model_fields.items() if int in _types(f.annotation)]
    assert "max_body_bytes" in ints
    for name in ints:
        monkeypatch.setenv(f"CHORUS_{name.upper()}", "99999999999999999999999")
        with pytest.raises(ValidationError, match=f"(?i){name}"):
            Settings()
        monkeypatch.delenv(f"CHORUS_{name.upper()}")
    assert MAX_SETTING_INTEGER == 2**31 - 1


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"CHORUS_PAGE_SIZE_DEFAULT": "200"}, "CHORUS_PAGE_SIZE_DEFAULT (200) is above"),
        ({"CHORUS_JWT_SECRET": " " * 40}, "blanks"),
        ({"CHORUS_JWT_SECRET": "x" * 40 + "\n"}, "blanks"),
        ({"CHORUS_LIBRARY_SECRET": "a\x01" * 20}, "control characters"),
        ({"CHORUS_CATALOG_URL": "ftp://x"}, "CHORUS_CATALOG_URL"),
        ({"CHORUS_CATALOG_URL": "localhost:8001"}, "CHORUS_CATALOG_URL"),
        ({"CHORUS_CATALOG_URL": "http://"}, "CHORUS_CATALOG_URL"),
        ({"CHORUS_MAX_BATCH_ENTRIES": "50"}, "CHORUS_MAX_BATCH_ENTRIES (50) is below"),
        ({"CHORUS_MAX_BATCH_OPERATIONS": "0"}, "CHORUS_MAX_BATCH_OPERATIONS"),
        ({"CHORUS_MAX_BATCH_OPERATIONS": "5000"}, "CHORUS_MAX_BATCH_OPERATIONS"),
        ({"CHORUS_RESPONSE_CACHE": "perhaps"}, "CHORUS_RESPONSE_CACHE"),
        ({"CHORUS_RESPONSE_CACHE_MAX_BYTES": "100"}, "CHORUS_RESPONSE_CACHE_MAX_BYTES"),
        ({"CHORUS_MEDIA_FRESHNESS_S": "0"}, "CHORUS_MEDIA_FRESHNESS_S"),
        ({"CHORUS_PERSISTED_DOCUMENTS_ONLY": "true"}, "CHORUS_PERSISTED_DOCUMENTS"),
    ],
)
def test_bad_or_contradicting_serve_settings_are_refused_saying_why(
    refused_settings: Callable[..., str], env: dict[str, str], said: str
) -> None:
    assert said in refused_settings(env, "serve")


def test_every_float_setting_has_a_bound_below_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """1e308 is finite, and overflowed ``timedelta(hours=…)`` in ``chorus compact``."""
    from pydantic import ValidationError

    from chorus.settings import Settings

    floats = [name for name, f in Settings.model_fields.items() if float in _types(f.annotation)]
    assert "retry_window_hours" in floats
    for name in floats:
        monkeypatch.setenv(f"CHORUS_{name.upper()}", "1e308")
        with pytest.raises(ValidationError, match="less than or equal"):
            Settings()
        monkeypatch.delenv(f"CHORUS_{name.upper()}")


def test_every_day_hour_and_second_setting_at_its_bound_fits_a_datetime() -> None:
    """The largest duration each setting takes goes back from now without overflowing."""
    from datetime import UTC, datetime, timedelta

    from chorus.settings import MAX_SETTING_INTEGER, Settings

    units = {"_days": "days", "_hours": "hours", "_s": "seconds", "_ms": "milliseconds"}
    checked = []
    for name, field in Settings.model_fields.items():
        unit = next((u for suffix, u in units.items() if name.endswith(suffix)), None)
        if unit is None:
            continue
        bounds = [m.le for m in field.metadata if getattr(m, "le", None) is not None]
        largest = bounds[0] if bounds else MAX_SETTING_INTEGER
        datetime.now(UTC) - timedelta(**{unit: largest})
        checked.append(name)
    assert {"retry_window_hours", "feed_retention_days", "catalog_timeout_ms"} <= set(checked)


@pytest.mark.parametrize("command", [("serve",), ("catalog", "serve")])
@pytest.mark.parametrize("host", ["", " ", "a b"])
def test_a_host_must_not_be_blank(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...], host: str
) -> None:
    code, err = _run(capsys, *command, "--host", host)
    assert code == 2
    assert "--host: must be an address to bind" in err


@pytest.mark.parametrize(
    "argv",
    [
        ("compact", "--keep-versions", "99999999999"),
        ("compact", "--keep-versions", str(2**31)),
        ("import", "mpd", "x.json", "--owner", "alice", "--limit", "99999999999"),
        ("serve", "--workers", "99999999999"),
    ],
)
def test_integer_arguments_stop_at_32_bits(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    code, err = _run(capsys, *argv)
    assert code == 2
    assert "must be a whole number from 1 to 2147483647" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ("import", "chinook", "--owner", "alice"),
        ("compact", "--keep-versions", "5"),
        ("db", "upgrade"),
    ],
)
def test_a_file_that_is_not_a_database_stops_every_command_with_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: tuple[str, ...],
) -> None:
    corrupt = tmp_path / "chorus.db"
    corrupt.write_bytes(b"this is not an SQLite file, only text that looks like one " * 100)
    monkeypatch.setenv("CHORUS_DATABASE_URL", f"sqlite+aiosqlite:///{corrupt}")
    code, err = _run(capsys, *argv)
    assert code == 2
    assert err.strip() == "chorus: cannot migrate the database: file is not a database"
    assert corrupt.read_bytes().startswith(b"this is not an SQLite file")


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """``chorus import chinook | head -0``: the import is done; no BrokenPipeError spew."""
    database = tmp_path / "c.db"
    env = {**os.environ, "CHORUS_DATABASE_URL": f"sqlite+aiosqlite:///{database}"}
    command = [sys.executable, "-m", "chorus.cli", "import", "chinook", "--owner", "alice"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as cli:
        assert cli.stdout is not None
        assert cli.stderr is not None
        cli.stdout.close()  # the reader is gone before the first line is printed
        err = cli.stderr.read().decode()
        code = cli.wait(timeout=120)
    assert "Traceback" not in err, err
    assert "Exception ignored" not in err, err
    assert code == 128 + signal.SIGPIPE
    with sqlite3.connect(database) as imported:
        (playlists,) = imported.execute("SELECT count(*) FROM playlist").fetchone()
    assert playlists == 18


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CHORUS_PORT", "18720.0"),
        ("CHORUS_PORT", "1_000"),
        ("CHORUS_DATABASE_POOL_SIZE", "20.0"),
        ("CHORUS_MAX_QUERY_COST", "0x10"),
    ],
)
def test_a_whole_number_setting_is_written_as_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    # pydantic reads "18720.0" and "1_000" as integers; Chorus guesses nothing.
    monkeypatch.setenv(name, value)
    code, err = _run(capsys, "token", "alice")
    assert code == 2
    assert err == f"chorus: bad settings: {name}={value!r}: must be a whole number\n"


def test_an_empty_data_dir_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Not the working directory: tokens minted there would not open the server's secret.
    monkeypatch.setenv("CHORUS_DATA_DIR", " ")
    code, err = _run(capsys, "token", "alice")
    assert code == 2
    assert "CHORUS_DATA_DIR" in err
    assert "must name a folder" in err
