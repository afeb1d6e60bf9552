"""A client that closes its socket while an answer is being sent logs no traceback."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
from starlette.websockets import WebSocketDisconnect
from strawberry.http.exceptions import WebSocketDisconnected

from chorus.graphql.websocket.handler import TransportWSHandler


@pytest.mark.parametrize("error", [WebSocketDisconnected(), WebSocketDisconnect(1006)])
def test_a_disconnect_while_sending_is_not_an_error(
    caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    handler = cast(Any, object.__new__(TransportWSHandler))
    with caplog.at_level(logging.DEBUG):
        asyncio.run(handler.handle_task_exception(error))
    ours = [r for r in caplog.records if r.name != "asyncio"]  # asyncio: "Using selector"
    assert [(r.name, r.levelno) for r in ours] == [
        ("chorus.graphql.websocket.handler", logging.DEBUG)
    ]


def test_any_other_error_is_still_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = cast(Any, object.__new__(TransportWSHandler))
    handler.task_logger = logging.getLogger("strawberry.ws.task")
    try:
        raise RuntimeError("a bug")
    except RuntimeError as error:
        asyncio.run(handler.handle_task_exception(error))
    [record] = [r for r in caplog.records if r.name != "asyncio"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
