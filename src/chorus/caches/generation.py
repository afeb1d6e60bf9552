"""Generations of Redis's data set: when the heads and snapshots in Redis may be trusted.

Redis can forget writes it acknowledged: a restart from an older RDB or AOF,
a failover to a replica that lagged, ``FLUSHALL``, eviction under
``maxmemory``. A head that went backwards would make a cached answer current
again after the version it read was superseded — a playlist made PRIVATE
served to strangers (docs/caching.md "When Redis forgets"). So:

* The key :data:`~chorus.caches.keys.GENERATION_KEY` names the data set:
  ``<run_id>:<random>``, where ``run_id`` is the Redis server's (``INFO
  server``; new at every start, another on a replica). On every new
  connection, before any command on it (:meth:`Generation.on_connect`), and
  whenever the key is found missing, the script
  :data:`~chorus.caches.scripts.ENSURE` checks it: missing, or written by
  another server than the one answering — the data set is not the one the
  generation began on — then every head and snapshot is deleted and a new
  generation begins, in one atomic step.
* An answer cached in-process is stamped with the generation it was computed
  in and served only while the hot ``MGET`` reads that same generation.
* Every write that learns a head from an observation (a read's versions, a
  snapshot read from SQL) carries the :class:`Ticket` taken *before* the
  observation and is refused when the generation changed since, or when it
  would create a missing head and Redis evicted any key since
  (``INFO stats`` ``evicted_keys``): a missing head is unknown, and only a
  read that began after it went missing may learn it again.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from redis.asyncio.connection import AbstractConnection

from chorus.caches import scripts
from chorus.caches.keys import GENERATION_KEY, PLAYLIST_PATTERN


@dataclass(frozen=True, slots=True)
class Ticket:
    """A mark taken before an answer (or a snapshot) is read, handed back when it is kept.

    Attributes:
        clock: the in-process registry's clock (:class:`~chorus.caches.heads.LocalHeads`).
        generation: the Redis generation believed current then (``""``: none known,
            or the embedded profile).
        evicted: Redis's ``evicted_keys`` believed then (-1: not known).
    """

    clock: int = 0
    generation: str = ""
    evicted: int = -1


def fresh_token() -> str:
    """The random half of a new generation (64 bits, hex)."""
    return secrets.token_hex(8)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Generation:
    """This process's belief of Redis's generation, learned from Redis only.

    A belief can lag behind Redis (never lead it): a ticket of a lagging
    belief only makes Redis refuse a write that would have been safe.

    Attributes:
        current: the generation last read from Redis (``None``: not yet).
        evicted: ``evicted_keys`` last read from Redis (-1: not yet).
    """

    def __init__(self) -> None:
        self.current: str | None = None
        self.evicted = -1

    def ticket(self, clock: int = 0) -> Ticket:
        return Ticket(clock, self.current or "", self.evicted)

    def learn(self, reply: Any) -> str:
        """Take the ``[generation, evicted_keys]`` that :data:`scripts.ENSURE` returned."""
        generation, evicted = reply
        self.current = _text(generation)
        self.evicted = int(evicted)
        return self.current

    def saw(self, generation: str) -> None:
        """The hot ``MGET`` read this generation (a valid one: only ENSURE writes it)."""
        if generation != self.current:
            self.current = generation
            self.evicted = -1

    async def on_connect(self, connection: AbstractConnection) -> None:
        """redis-py's ``redis_connect_func``: the handshake, then :data:`scripts.ENSURE`.

        Runs before any command on a new connection, so no command ever
        reads a data set a restart or a failover brought back unchecked.
        """
        await connection.on_connect()
        await connection.send_command(
            "EVAL", scripts.ENSURE, 1, GENERATION_KEY, fresh_token(), PLAYLIST_PATTERN
        )
        self.learn(await connection.read_response())


__all__ = ["Generation", "Ticket", "fresh_token"]
