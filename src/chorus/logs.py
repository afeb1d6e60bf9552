"""Request ids and the server's log format.

Every HTTP request and WebSocket connection has a request id: the client's
``X-Request-Id`` when it is well-formed (1 to :data:`MAX_REQUEST_ID_LENGTH`
characters of ``A-Z a-z 0-9 . _ : -``), a fresh uuid4 hex otherwise.
:class:`chorus.middleware.RequestId` sets it for the request's task (and the
tasks it starts) in :data:`REQUEST_ID`; :class:`RequestIdFilter` copies it
onto every log record, so each line of a request (uvicorn's access line
included) shows it in :data:`LOG_FORMAT`. Lines outside a request show ``-``.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar
from typing import Any

MAX_REQUEST_ID_LENGTH = 128
"""Longest request id taken from a client (characters)."""

REQUEST_ID_HEADER = "X-Request-Id"
"""The header a request id comes in and goes back out in."""

REQUEST_ID: ContextVar[str | None] = ContextVar("chorus_request_id", default=None)
"""The id of the request the current task serves (``None``: no request)."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
"""Every server log line: time, level, logger, request id, message."""

_WELL_FORMED = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_REQUEST_ID_LENGTH}}}")


def new_request_id() -> str:
    return uuid.uuid4().hex


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


def log_config(level: str) -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` for a server: one stderr handler, :data:`LOG_FORMAT`.

    Chorus's loggers (through the root logger) and uvicorn's share it.

    Args:
        level: the root level, a :mod:`logging` name (``"info"``, ``"warning"``).
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
        "formatters": {"chorus": {"format": LOG_FORMAT}},
        "handlers": {"stderr": handler},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
        },
    }
