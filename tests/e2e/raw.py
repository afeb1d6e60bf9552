"""Raw exchanges with a running server, below any client library.

An HTTP/1.1 response head read off a socket, and the first answer a
``graphql-transport-ws`` socket gives to one frame.
"""

from __future__ import annotations

import asyncio

import websockets

from tests.deadlines import patience
from tests.servers import ChorusServer


def split_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """``data``, an HTTP/1.1 response's bytes: its status, headers (names in lower
    case) and what follows the head."""
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


async def first_answer(server: ChorusServer, frame: str) -> tuple[int, str]:
    """Open a socket and send ``frame``: the close code and reason, or 0 and the first message."""
    url = server.url.replace("http://", "ws://")
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(frame)
        try:
            message = await asyncio.wait_for(ws.recv(), patience(10))
        except websockets.ConnectionClosed as closed:
            received = closed.rcvd
        else:
            return 0, str(message)
    assert received is not None, "closed without a close frame (1006)"
    return received.code, received.reason
