"""The JSON log format and the observability settings, without a server."""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid

import pytest
from pydantic import ValidationError

from chorus.logs import (
    REQUEST_ID,
    JsonFormatter,
    RequestIdFilter,
    log_config,
    new_request_id,
    request_id_from,
)
from chorus.settings import Settings


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("chorus.test", logging.WARNING, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    RequestIdFilter().filter(record)
    return record


def test_a_json_line_has_the_fields_and_escapes_what_utf8_cannot_carry() -> None:
    token = REQUEST_ID.set("req-1")
    try:
        line = JsonFormatter().format(_record("bad name \ud800 é"))
    finally:
        REQUEST_ID.reset(token)
    assert line.isascii()
    parsed = json.loads(line)
    assert parsed["message"] == "bad name \ud800 é"
    assert parsed["level"] == "WARNING"
    assert parsed["logger"] == "chorus.test"
    assert parsed["request_id"] == "req-1"
    assert parsed["time"].endswith("+00:00")
    assert "trace_id" not in parsed  # no span: tracing is off


def test_a_json_line_outside_a_request_has_a_null_request_id_and_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed")
        record.exc_info = sys.exc_info()
    parsed = json.loads(JsonFormatter().format(record))
    assert parsed["request_id"] is None
    assert "ValueError: boom" in parsed["exception"]


def test_json_logs_drop_uvicorns_access_line_and_text_keeps_it() -> None:
    assert log_config("info", "json")["loggers"]["uvicorn.access"]["propagate"] is False
    assert log_config("info")["loggers"]["uvicorn.access"]["propagate"] is True
    assert log_config("debug")["loggers"]["uvicorn.access"]["propagate"] is True


def test_above_info_uvicorn_has_no_access_line_to_build() -> None:
    """uvicorn formats the line's client and path whenever the logger has a handler
    (``hasHandlers``), before the level drops it: above INFO it has none."""
    for level in ("warning", "error"):
        access = log_config(level)["loggers"]["uvicorn.access"]
        assert access == {"handlers": [], "propagate": False}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("log_format", "yaml"),
        ("otlp_endpoint", "collector:4318"),
        ("otlp_endpoint", "grpc://collector:4317"),
        ("otlp_endpoint", "http://"),
    ],
)
def test_bad_observability_settings_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


def test_the_otlp_endpoint_is_a_base_url_traces_go_under() -> None:
    assert Settings().otlp_traces_url is None
    settings = Settings(otlp_endpoint=" https://otel.example:4318/ ", log_format="JSON")
    assert settings.otlp_traces_url == "https://otel.example:4318/v1/traces"
    assert settings.log_format == "json"


def test_a_new_request_id_is_a_random_uuid4_in_hex() -> None:
    made = [new_request_id() for _ in range(200)]
    assert len(set(made)) == len(made)
    for request_id in made:
        parsed = uuid.UUID(hex=request_id)
        assert parsed.hex == request_id
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert request_id_from("client-id.1") == "client-id.1"
    assert uuid.UUID(hex=request_id_from("not ok")).version == 4


def test_a_forked_child_makes_other_request_ids_than_its_parent() -> None:
    # The ids' random bytes are read ahead: a child (serve --workers) must not reuse them.
    new_request_id()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(write, "".join(new_request_id() for _ in range(8)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        raw = pipe.read().decode()
    os.waitpid(child, 0)
    theirs = {raw[i : i + 32] for i in range(0, len(raw), 32)}
    ours = {new_request_id() for _ in range(8)}
    assert len(theirs) == 8
    assert not theirs & ours
