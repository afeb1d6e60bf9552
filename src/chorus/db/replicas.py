"""Read replicas: when a read of a playlist may be answered by a replica, and by which.

The rule (the design's, for a lagging replica): *a read of a playlist may be
answered by a replica only when the replica's copy of the playlist is at least
as new as the newest version the API knows for it; otherwise by the primary.*
So a replica that falls behind or goes away costs latency, never an answer
older than one the API gave or a client holds.

How :func:`read_fresh` keeps it: the read runs on a replica; every playlist
it read is compared with its **floor**, the newest version known of it —

* this process's commits (:meth:`Replicas.committed`, the store's
  ``on_commit``) and the versions it read on the primary (:class:`Floors`),
* the shared head registry, where there is one (Redis's head keys in the full
  profile, raised by every API process and the cache projector), consulted
  through :data:`KnownHeads`,
* the client's ``minVersion``.

The replica's answer is kept only when each version it read is at or above
its floor. A playlist no source knows, a registry that cannot answer now
(Redis away), a version below its floor, a playlist the replica does not have
yet, a replica that fails: the answer is thrown away and the read is made on
the primary, which also teaches the floors. A replica that failed is left
alone for ``CHORUS_DATABASE_REPLICA_BREAKER_S`` (its
:class:`~chorus.resilience.breaker.CircuitBreaker`), so a stopped replica
costs one failed connect per period, not one per read.

What the rule cannot see: a commit of another API process whose Redis head
raise is still in flight (it is raised in the background, as for snapshots).
A client that must read its own write through another process sends the
write's version as ``minVersion`` (docs/deploying.md).

Only reads that return the versions they read use this (:mod:`chorus.db.pages`:
a playlist's header and first page, a page of entries, headers by id). Writes,
the outbox relay, LISTEN, migrations, roles and every other read use the primary.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from chorus.metrics import DB_READS, REPLICA_LAG_BYTES, REPLICA_LAG_SECONDS, REPLICA_READS_DISCARDED
from chorus.resilience.breaker import CircuitBreaker

if TYPE_CHECKING:
    from chorus.db.engine import Database

T = TypeVar("T")

KnownHeads = Callable[[Collection[str]], Awaitable[Mapping[str, int] | None]]
"""The shared head registry: playlist id → newest committed version known, for the ids
asked (absent: unknown); ``None`` when it cannot answer now. Never raises."""

MAX_FLOORS = 200_000
"""Playlists whose floor this process remembers (least recently used forgotten first:
a forgotten one is unknown again, so read on the primary)."""

_REPLICA_READS = DB_READS.labels(database="replica")
_STALE = REPLICA_READS_DISCARDED.labels(reason="stale")
_FAILED = REPLICA_READS_DISCARDED.labels(reason="unavailable")

_LAG = text(
    "SELECT CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0"
    " ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END,"
    " pg_wal_lsn_diff(CAST(CAST(:primary AS text) AS pg_lsn), pg_last_wal_replay_lsn()),"
    " pg_is_in_recovery()"
)
"""A replica's lag: seconds since the last replayed commit (0 when it replayed all it
received) and WAL bytes behind the primary's position, read just before."""


class Floors:
    """The newest version this process knows of each playlist; never lowered."""

    def __init__(self, max_playlists: int = MAX_FLOORS) -> None:
        self._floors: OrderedDict[str, int] = OrderedDict()
        self._max = max_playlists

    def get(self, playlist_id: str) -> int | None:
        return self._floors.get(playlist_id)

    def raise_to(self, playlist_id: str, version: int) -> None:
        floors = self._floors
        if version > floors.get(playlist_id, -1):
            floors[playlist_id] = version
        floors.move_to_end(playlist_id)
        while len(floors) > self._max:
            floors.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica: its engine and the breaker that keeps reads off it while it fails
    (one failure opens it: the primary answers meanwhile)."""

    engine: AsyncEngine
    breaker: CircuitBreaker

    @property
    def name(self) -> str:
        """``host:port``, as ``/readyz`` and the metrics' ``replica`` label name it."""
        return f"{self.engine.url.host}:{self.engine.url.port or 5432}"


@dataclass(frozen=True, slots=True)
class Lag:
    """A replica's lag, measured at one moment."""

    seconds: float
    """Since the last replayed commit; 0 when it replayed everything it received."""
    bytes: int
    """WAL between the primary's current position and the replica's replay position."""


class Replicas:
    """The replicas of one primary, their floors and their breakers.

    Args:
        members: one :class:`Replica` each (built by the composition root).
        max_floors: playlists whose floor is remembered (:data:`MAX_FLOORS`).
    """

    def __init__(self, members: Sequence[Replica], *, max_floors: int = MAX_FLOORS) -> None:
        if not members:
            raise ValueError("no replica")
        self.members = tuple(members)
        self.floors = Floors(max_floors)
        self._known: KnownHeads | None = None
        self._turn = 0

    def consult(self, known: KnownHeads) -> None:
        """Take floors from a shared head registry too (the full profile's Redis heads)."""
        self._known = known

    def committed(self, playlist_id: str, version: int) -> None:
        """This process committed ``version`` (the store's ``on_commit``)."""
        self.floors.raise_to(playlist_id, version)

    async def floors_of(
        self, playlist_ids: Collection[str], min_version: int | None = None
    ) -> dict[str, int] | None:
        """The floor of each playlist, or ``None`` when one is unknown (read the primary).

        Args:
            min_version: the client's ``minVersion`` (or ``baseVersion``), for every id.
        """
        shared: Mapping[str, int] = {}
        if self._known is not None:
            answer = await self._known(playlist_ids)
            if answer is None:
                return None
            shared = answer
        floors = {}
        for pid in playlist_ids:
            own = self.floors.get(pid)
            known = max(-1 if own is None else own, shared.get(pid, -1))
            if known < 0:
                return None
            floors[pid] = max(known, min_version or -1)
        return floors

    def pick(self) -> Replica | None:
        """The next replica whose breaker lets a read through, round robin; ``None``: none."""
        count = len(self.members)
        for step in range(count):
            replica = self.members[(self._turn + step) % count]
            if replica.breaker.allow():
                self._turn = (self._turn + step + 1) % count
                return replica
        return None

    async def lag(self, primary: Database) -> dict[str, Lag | BaseException]:
        """Each replica's lag by name (an exception where it did not answer); sets the gauges.

        Raises:
            DatabaseUnavailable: the primary did not answer.
        """
        async with primary.read_on(primary.read_engine) as conn:
            position = await conn.scalar(text("SELECT pg_current_wal_lsn()::text"))
        measured = await asyncio.gather(
            *(self._lag_of(primary, r, str(position)) for r in self.members),
            return_exceptions=True,
        )
        lags: dict[str, Lag | BaseException] = {}
        for replica, lag in zip(self.members, measured, strict=True):
            if isinstance(lag, asyncio.CancelledError):
                raise lag
            lags[replica.name] = lag
            seconds, behind = (lag.seconds, lag.bytes) if isinstance(lag, Lag) else (-1.0, -1)
            REPLICA_LAG_SECONDS.labels(replica=replica.name).set(seconds)
            REPLICA_LAG_BYTES.labels(replica=replica.name).set(behind)
        return lags

    async def _lag_of(self, primary: Database, replica: Replica, position: str) -> Lag:
        async with primary.read_on(replica.engine) as conn:
            row = (await conn.execute(_LAG, {"primary": position})).one()
        if not row[2]:
            raise RuntimeError("not a replica: pg_is_in_recovery() is false")
        return Lag(float(row[0]), max(int(row[1] or 0), 0))

    async def dispose(self) -> None:
        for replica in self.members:
            await replica.engine.dispose()


_FAILED_READ = object()


async def read_fresh(
    db: Database,
    playlist_ids: Collection[str],
    read: Callable[[AsyncConnection], Awaitable[T]],
    versions: Callable[[T], Mapping[str, int]],
    *,
    min_version: int | None = None,
    one_statement: bool = False,
) -> T:
    """``read`` on a replica when its answer is fresh enough, else on the primary.

    Args:
        playlist_ids: every playlist ``read`` reads.
        read: the read, given a connection in a read transaction (or, with
            ``one_statement``, one for a single statement).
        versions: the version of each playlist the answer read (absent: the
            database did not have it).
        min_version: the client's ``minVersion``, for every playlist.

    Returns:
        ``read``'s answer, from a replica only when each version it read is
        at least its floor (module docstring).

    Raises:
        DatabaseUnavailable: the primary cannot be reached or lost the connection.
    """
    replicas = db.replicas
    if replicas is not None and playlist_ids:
        floors = await replicas.floors_of(playlist_ids, min_version)
        replica = replicas.pick() if floors is not None else None
        if floors is not None and replica is not None:
            answer = await _on_replica(db, replica, read, one_statement)
            if answer is not _FAILED_READ:
                got = versions(answer)  # type: ignore[arg-type]
                if all(got.get(pid, -1) >= floor for pid, floor in floors.items()):
                    _REPLICA_READS.inc()
                    return answer  # type: ignore[return-value]
                _STALE.inc()
    async with db.read_statement() if one_statement else db.read() as conn:
        answer = await read(conn)
    if replicas is not None:
        for pid, version in versions(answer).items():
            replicas.floors.raise_to(pid, version)
    return answer


async def _on_replica(
    db: Database,
    replica: Replica,
    read: Callable[[AsyncConnection], Awaitable[T]],
    one_statement: bool,
) -> T | object:
    """``read`` on ``replica``; :data:`_FAILED_READ` (and its breaker opened) if it failed.

    Any failure, not only a lost connection: a hot standby also cancels a
    query that conflicts with replay, which the primary would have answered.
    """
    try:
        async with db.read_on(replica.engine, one_statement=one_statement) as conn:
            answer = await read(conn)
    except Exception:
        replica.breaker.record_failure()
        _FAILED.inc()
        return _FAILED_READ
    replica.breaker.record_success()
    return answer


__all__ = ["MAX_FLOORS", "Floors", "KnownHeads", "Lag", "Replica", "Replicas", "read_fresh"]
