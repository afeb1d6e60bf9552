""":class:`chorus.transport.HeadWithBody`: a response's head goes out with its first body
bytes, and nothing on the wire changes but the number of writes.

uvicorn's own :class:`RequestResponseCycle` writes to a transport that records each
write; the bytes are compared with what uvicorn writes to the same transport unwrapped.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from typing import Any, cast

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from chorus.transport import HeadWithBody


class Recording:
    """A transport that keeps what is written to it, one entry per write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(transport: Recording, *, method: str = "GET", expect_continue: bool = False) -> Any:
    log = logging.getLogger("test.transport")
    cycle = RequestResponseCycle(
        scope={  # type: ignore[typeddict-item]  # what send and receive read
            "type": "http",
            "method": method,
            "http_version": "1.1",
            "path": "/",
            "query_string": b"",
        },
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=log,
        access_logger=log,
        access_log=False,
        default_headers=[(b"server", b"test")],
        message_event=asyncio.Event(),
        expect_100_continue=expect_continue,
        keep_alive=True,
        on_response=lambda: None,
    )
    return cycle


def _held(transport: Recording, **kw: Any) -> Any:
    """A cycle writing to ``transport`` through :class:`HeadWithBody`, as Chorus serves."""
    cycle = _cycle(transport, **kw)
    cycle.transport = HeadWithBody(cast(Any, transport), cycle)
    return cycle


async def _both(messages: list[dict[str, Any]], **kw: Any) -> tuple[list[bytes], list[bytes]]:
    """What uvicorn writes for ``messages`` plainly, and through :class:`HeadWithBody`."""
    plain, held = Recording(), Recording()
    first = _cycle(plain, **kw)
    second = _held(held, **kw)
    for message in messages:
        await first.send(message)
        await second.send(message)
    return plain.writes, held.writes


START: dict[str, Any] = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-length", b"5")],
}


async def test_a_response_with_a_length_goes_out_in_one_write() -> None:
    plain, held = await _both([START, {"type": "http.response.body", "body": b"hello"}])
    assert len(plain) == 2
    assert held == [b"".join(plain)]


async def test_a_body_in_pieces_has_its_head_in_the_first_write_only() -> None:
    pieces: list[dict[str, Any]] = [
        {"type": "http.response.body", "body": b"he", "more_body": True},
        {"type": "http.response.body", "body": b"ll", "more_body": True},
        {"type": "http.response.body", "body": b"o"},
    ]
    plain, held = await _both([START, *pieces])
    assert held == [plain[0] + plain[1], *plain[2:]]


async def test_a_streamed_response_sends_its_head_at_once() -> None:
    """Chunked (no length): a client waits for the head before the first event comes."""
    start = {"type": "http.response.start", "status": 200, "headers": []}
    plain, held = await _both([start])
    assert held == plain
    assert len(held) == 1
    assert b"transfer-encoding: chunked" in held[0]


@pytest.mark.parametrize("status", [204, 304])
async def test_an_answer_without_a_body_goes_out_whole(status: int) -> None:
    start = {"type": "http.response.start", "status": status, "headers": []}
    plain, held = await _both([start, {"type": "http.response.body", "body": b""}])
    assert b"".join(held) == b"".join(plain)
    assert held[0].startswith(b"HTTP/1.1 %d" % status)


async def test_a_head_request_is_answered_with_its_head() -> None:
    """uvicorn writes no body for HEAD: a held head would never go out."""
    plain, held = await _both([START, {"type": "http.response.body", "body": b""}], method="HEAD")
    assert held == plain
    assert len(held) == 1
    assert held[0].endswith(b"\r\n\r\n")


async def test_a_100_continue_goes_out_before_the_response() -> None:
    transport = Recording()
    cycle = _held(transport, method="POST", expect_continue=True)
    cycle.message_event.set()  # the body is "there": receive() asks for it with a 100 first
    cycle.body = b"x"
    await cycle.receive()
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    await cycle.send(START)
    assert len(transport.writes) == 1  # the head waits for its body
    await cycle.send({"type": "http.response.body", "body": b"hello"})
    assert transport.writes[1].startswith(b"HTTP/1.1 200")
    assert transport.writes[1].endswith(b"hello")


async def test_a_close_between_head_and_body_writes_the_head_first() -> None:
    transport = Recording()
    cycle = _held(transport)
    await cycle.send(START)
    assert transport.writes == []
    cycle.transport.close()  # as uvicorn does when the app returns without a body
    assert transport.closed
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200")
    assert transport.writes[0].endswith(b"\r\n\r\n")


async def test_what_is_written_once_the_client_is_gone_is_dropped() -> None:
    """uvloop raises on a write to a closing transport: a traceback per aborted download."""
    transport = Recording()
    cycle = _held(transport)
    await cycle.send({"type": "http.response.start", "status": 200, "headers": []})  # chunked
    transport.closed = True  # the client reset: closed before uvicorn hears of it
    await cycle.send({"type": "http.response.body", "body": b"more", "more_body": True})
    assert len(transport.writes) == 1  # the head only


async def test_an_answered_cycle_is_freed_without_the_garbage_collector() -> None:
    """A cycle and its transport holding each other waited for the cyclic GC: its passes
    over thousands of them paused the event loop 20-40 ms (wrk's p99 rose sixfold)."""
    transport = Recording()
    cycle = _held(transport)
    await cycle.send(START)
    await cycle.send({"type": "http.response.body", "body": b"hello"})
    gone = weakref.ref(cycle)
    gc.disable()
    try:
        del cycle
        assert gone() is None, "the cycle outlived its last reference"
    finally:
        gc.enable()
