"""What the bare peers (``bench/bare_page.py``, ``bench/bare_writes.py``,
``bench/bare_scale.py``) share: reading a request's body, serving an ASGI app as
``chorus serve`` does, waiting for a started port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import uvicorn


async def read_body(receive: Any) -> bytes:
    """The whole body of an ASGI HTTP request, however many messages it came in."""
    body = b""
    while True:
        message: dict[str, Any] = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


def run(
    app: Any, port: int, *, lifespan: Literal["on", "off"], chorus_transport: bool = False
) -> None:
    """``app`` on uvicorn at 127.0.0.1:``port`` with httptools and no access log, as
    ``chorus serve`` runs; ``lifespan`` is uvicorn's (``"on"`` or ``"off"``).

    ``chorus_transport``: on Chorus's own protocol (``chorus.transport``, the default
    settings' limits, a response's head written with its body) instead of uvicorn's."""
    http: Any = "httptools"
    if chorus_transport:
        from chorus.cli.process import transport_options
        from chorus.settings import Settings

        http = transport_options(Settings())["http"]
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        http=http,
        lifespan=lifespan,
        log_level="warning",
        access_log=False,
    )


def wait_for_port(port: int, failed: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    """Return once 127.0.0.1:``port`` accepts a connection; raise :class:`RuntimeError`
    saying ``what`` did not start when ``failed()`` holds or after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if failed() or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


@contextlib.contextmanager
def spawned(command: Sequence[str], port: int) -> Iterator[int]:
    """``command`` (a bare peer serving 127.0.0.1:``port``) in its own process; yields its
    process id once the port accepts connections, and terminates it at the end."""
    process = subprocess.Popen(list(command))
    try:
        wait_for_port(port, lambda: process.poll() is not None, "the bare peer")
        yield process.pid
    finally:
        process.terminate()
        process.wait(timeout=15)
