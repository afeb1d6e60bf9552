"""The bus's own pub/sub connection to Redis: how it is made and opened.

:class:`~chorus.subscriptions.redis_bus.RedisBus` drives one
``redis.asyncio`` connection directly (not ``PubSub``, which reconnects on
its own); each reconnect makes a fresh one here, with no retries inside
redis-py, so every loss comes back to the bus's reader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from redis.asyncio.connection import AbstractConnection, Connection, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


class _Connectable(Protocol):
    """``AbstractConnection.connect`` as called here: untyped in redis-py 8.2,
    typed in a later version maybe; the protocol holds on both, where a
    ``type: ignore`` would fail mypy on one of them."""

    async def connect(self) -> None: ...


def connection_factory(url: str, *, timeout_s: float) -> Callable[[], AbstractConnection]:
    """A maker of unopened pub/sub connections to ``url``.

    Args:
        url: ``redis://[user:password@]host:port/db`` (also ``rediss://``, ``unix://``).
        timeout_s: seconds allowed to connect and to read or write on the socket.
    """
    options: dict[str, Any] = dict(parse_url(url))
    connection_class: type[AbstractConnection] = options.pop("connection_class", Connection)
    # RESP2, so pub/sub replies are plain arrays; no retries inside
    # redis-py: every loss must come back to the reader.
    options.update(
        protocol=2,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_keepalive=True,
        retry=Retry(NoBackoff(), 0),
        client_name="chorus-bus",
    )
    return lambda: connection_class(**options)


async def open_connection(conn: AbstractConnection) -> None:
    """Connect ``conn``.

    Raises:
        RedisError, OSError: the connection failed.
    """
    connectable: _Connectable = conn
    await connectable.connect()
