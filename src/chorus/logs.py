"""Request ids, access records and the server's log formats.

Every HTTP request and WebSocket connection has a request id: the client's
``X-Request-Id`` when it is well-formed (1 to :data:`MAX_REQUEST_ID_LENGTH`
characters of ``A-Z a-z 0-9 . _ : -``), a fresh uuid4 hex otherwise.
:class:`chorus.middleware.RequestId` sets it for the request's task (and the
tasks it starts) in :data:`REQUEST_ID`; :class:`RequestIdFilter` copies it
onto every log record, so each line of a request (uvicorn's access line
included) shows it in :data:`LOG_FORMAT`. Lines outside a request show ``-``.

With ``CHORUS_LOG_FORMAT=json`` every line is one JSON object
(:class:`JsonFormatter`) and uvicorn's access line gives way to Chorus's own
(:class:`chorus.middleware.AccessLog`): one per HTTP request, with the
request id, the user and GraphQL operation name the view noted in
:data:`ACCESS` (:func:`note_access`), the duration and the status.
"""

from __future__ import annotations

import json
import logging
import os
import re
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

MAX_REQUEST_ID_LENGTH = 128
"""Longest request id taken from a client (characters)."""

REQUEST_ID_HEADER = "X-Request-Id"
"""The header a request id comes in and goes back out in."""

REQUEST_ID: ContextVar[str | None] = ContextVar("chorus_request_id", default=None)
"""The id of the request the current task serves (``None``: no request)."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
"""Every server log line: time, level, logger, request id, message."""

_WELL_FORMED = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_REQUEST_ID_LENGTH}}}")


ACCESS_LOGGER = "chorus.access"
"""The logger of the JSON access lines."""


@dataclass(slots=True)
class Access:
    """What the access line of the current request says beyond the HTTP exchange.

    Attributes:
        user: the authenticated user id; ``None``: no valid token.
        operation: the GraphQL operation name the client sent; ``None``: none.
    """

    user: str | None = None
    operation: str | None = None


ACCESS: ContextVar[Access | None] = ContextVar("chorus_access", default=None)
"""The access record of the current HTTP request (``None``: access lines are off)."""


def note_access(user: str | None, operation: str | None) -> None:
    """Record the request's user and operation name for its access line (no-op when off)."""
    access = ACCESS.get()
    if access is not None:
        access.user = user
        access.operation = operation


_RANDOM_IDS = 256
"""Request ids' random bytes read from the system at once (one ``getrandom`` call, not 256)."""

_random = bytearray()


def _forget_random() -> None:
    # A forked child must not hand out its parent's next ids again.
    _random.clear()


os.register_at_fork(after_in_child=_forget_random)


def new_request_id() -> str:
    """A random version-4 UUID's 32 hex digits (``uuid.uuid4().hex``, without the object).

    The random bytes are the system's (``os.urandom``), read for
    :data:`_RANDOM_IDS` ids at once: a system call per request cost about as
    much as the rest of a response-cache hit's id handling.
    """
    if not _random:
        _random.extend(os.urandom(16 * _RANDOM_IDS))
    raw = _random[-16:]
    del _random[-16:]
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


def request_id_from(header: str | None) -> str:
    """The client's request id when well-formed, a new one otherwise."""
    if header is not None and _WELL_FORMED.fullmatch(header):
        return header
    return new_request_id()


def current_request_id() -> str | None:
    return REQUEST_ID.get()


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record (``-`` outside a request).

    A record that already carries one (``extra={"request_id": …}``, as the
    transport's refusals log before any request exists) keeps it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line.

    Keys: ``time`` (ISO 8601, UTC, ms), ``level``, ``logger``, ``request_id``
    (``null`` outside a request), ``message``; ``trace_id`` and ``span_id``
    (hex) while a recorded span is current; ``exception`` (the traceback)
    when there is one; and the fields a record carries in ``extra={"access": {…}}``
    (the access line: ``method``, ``path``, ``status``, ``duration_ms``,
    ``user``, ``operation``).
    """

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "request_id": None if request_id in (None, "-") else request_id,
            "message": record.getMessage(),
        }
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["trace_id"] = format(span.trace_id, "032x")
            line["span_id"] = format(span.span_id, "016x")
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            line.update(access)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        # ASCII: a message may quote a client's lone surrogate, which UTF-8 cannot encode.
        return json.dumps(line, default=str)


def log_config(level: str, log_format: str = "text") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` for a server: one stderr handler, :data:`LOG_FORMAT`.

    Chorus's loggers (through the root logger) and uvicorn's share it.

    Args:
        level: the root level, a :mod:`logging` name (``"info"``, ``"warning"``).
        log_format: ``"text"`` (:data:`LOG_FORMAT`) or ``"json"``
            (:class:`JsonFormatter`; uvicorn's access line is dropped, Chorus
            writes its own).
    """
    handler = {
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "formatter": "chorus",
        "filters": ["request_id"],
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {
            "chorus": {"()": JsonFormatter} if log_format == "json" else {"format": LOG_FORMAT}
        },
        "handlers": {"stderr": handler},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            # In JSON, chorus.access has the access line, with the user and operation.
            # Above INFO the line is never written: with nothing to propagate to,
            # uvicorn does not build it (its client address and path) per response.
            "uvicorn.access": {
                "handlers": [],
                "propagate": log_format != "json" and level.upper() in ("DEBUG", "INFO"),
            },
        },
    }
