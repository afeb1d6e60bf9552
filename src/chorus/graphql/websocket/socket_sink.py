"""A socket the hub writes a group's rendering to without waking its stream.

:class:`SocketSink` is the :class:`~chorus.subscriptions.delivery_groups.DirectSink`
of one ``playlistEvents`` operation on a ``graphql-transport-ws`` socket
served by uvicorn's ``websockets-sansio`` protocol: the frame (the encoded
payload with this operation's id spliced in, :func:`next_frame`) is framed
and handed to the transport in one synchronous call, with no task switch
and no await. It refuses (``False``, and the subscriber's stream sends the
version the ordinary way, waiting for its own socket only) when the socket is
closing, when the transport has paused writing, or when more than
:data:`MAX_BUFFERED_BYTES` wait in its buffer: a slow socket delays no one.

:data:`~chorus.graphql.execution.delivery.CURRENT_SINK` carries the sink from the operation's task
(:class:`~chorus.graphql.websocket.handler.TransportWSHandler`) to the resolver.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from graphql import ExecutionResult as GraphQLExecutionResult
from starlette.websockets import WebSocket, WebSocketState
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

from chorus.graphql.execution.delivery import EncodedData, next_frame
from chorus.metrics import DELIVERY_SECONDS
from chorus.middleware import TRANSPORT_SEND

MAX_BUFFERED_BYTES = 64 * 1024
"""Bytes waiting in a socket's send buffer above which it is written no more directly."""


class SocketSink:
    """Writes one operation's ``next`` frames straight to its socket's transport.

    Args:
        operation_id: the client's id of the operation.
        socket: its Starlette socket (its state says whether it is open).
        protocol: uvicorn's protocol object under it.
        is_open: whether the operation still runs (not completed by the client).
    """

    __slots__ = ("_is_open", "_operation_id", "_protocol", "_socket")

    def __init__(
        self,
        operation_id: str,
        socket: WebSocket,
        protocol: WebSocketsSansIOProtocol,
        is_open: Callable[[], bool],
    ) -> None:
        self._operation_id = operation_id
        self._socket = socket
        self._protocol = protocol
        self._is_open = is_open

    @classmethod
    def of(
        cls, operation_id: str, socket: object, is_open: Callable[[], bool]
    ) -> SocketSink | None:
        """The sink of ``socket``, or ``None`` when it is not served by the sans-I/O protocol."""
        if not isinstance(socket, WebSocket):
            return None
        send = socket.scope.get(TRANSPORT_SEND)
        protocol = getattr(send, "__self__", None)
        if not isinstance(protocol, WebSocketsSansIOProtocol):
            return None
        return cls(operation_id, socket, protocol, is_open)

    def write(self, rendering: object) -> bool:
        """Send a shared rendering's ``next`` frame now; ``False``: leave it to the stream."""
        if not isinstance(rendering, GraphQLExecutionResult) or rendering.errors:
            return False
        data = rendering.data
        if not isinstance(data, EncodedData) or not data.encoded:
            return False
        protocol = self._protocol
        if (
            not self._is_open()
            or self._socket.application_state is not WebSocketState.CONNECTED
            or protocol.disconnected
            or protocol.close_sent
            or not protocol.writable.is_set()
            or protocol.transport.is_closing()
            or protocol.transport.get_write_buffer_size() > MAX_BUFFERED_BYTES
        ):
            return False
        try:
            protocol.conn.send_text(next_frame(self._operation_id, data.encoded).encode())
        except InvalidState:
            return False
        protocol.transport.write(b"".join(protocol.conn.data_to_send()))
        DELIVERY_SECONDS.observe(max(0.0, time.time() - data.committed_at))
        return True


__all__ = ["MAX_BUFFERED_BYTES", "SocketSink"]
