"""A WebSocket lives no longer than the token it was opened with."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
import websockets

from chorus.auth import mint_token
from tests.servers import TEST_SECRET, ChorusServer


async def test_the_socket_closes_when_its_token_expires(server: ChorusServer) -> None:
    token = mint_token(TEST_SECRET, "alice", ttl=timedelta(seconds=2))
    url = server.url.replace("http://", "ws://")
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        )
        assert json.loads(await ws.recv()) == {"type": "connection_ack"}
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4403, "token expired")
