"""Engines and transactions for the two profiles.

PostgreSQL (asyncpg): one pooled engine; writers serialise per playlist with
``SELECT … FOR UPDATE`` on the playlist row.

SQLite (aiosqlite): WAL, a busy timeout, and two engines. Writes go through a
pool of **one** connection whose transactions begin with ``BEGIN IMMEDIATE``,
so concurrent writers queue in the pool (asyncio-friendly) instead of failing
with "database is locked"; reads use their own connections and, under WAL,
never wait for the writer. The recipe for taking transaction control from
pysqlite is SQLAlchemy's ("Serializable isolation / Savepoints / Transactional
DDL", SQLAlchemy SQLite dialect docs).

Every transaction is one :class:`~sqlalchemy.ext.asyncio.AsyncConnection`
used by one task; nothing here is shared across concurrent coroutines.

A database that cannot be reached, or drops the connection mid-transaction,
raises :class:`DatabaseUnavailable` from :meth:`Database.read` and
:meth:`Database.write`, whatever the driver said. With asyncpg that is
(checked against SQLAlchemy 2.1 and a PostgreSQL stopped under a running pool):

* connecting to a stopped server: the driver's bare ``OSError``
  (``ConnectionRefusedError``), which SQLAlchemy does not wrap; a connect that
  hangs: ``TimeoutError`` after :data:`CONNECT_TIMEOUT_S`;
* a pooled connection the server closed: ``sqlalchemy.exc.InterfaceError``
  (asyncpg ``ConnectionDoesNotExistError`` / "the underlying connection is
  closed") with ``connection_invalidated`` set;
* a server shutting down or starting up: a ``DBAPIError`` whose SQLSTATE is
  class ``08`` (connection exception) or ``57P01``–``57P03``.

A pooled connection that sat idle for :data:`PING_AFTER_IDLE_S` or longer is
pinged when it is checked out (one round trip, :func:`_ping_when_idle`), so
once the server is back the next transaction reconnects: no restart of
Chorus is needed. One used less than that ago is not: under load every
connection is, and SQLAlchemy's own pre-ping was three round trips per
transaction (``BEGIN``, ``;``, ``ROLLBACK``). A server restarted within that
window fails the transactions on those connections as a restart fails those
in flight (``DatabaseUnavailable``, and the whole pool is dropped on the
first: by SQLAlchemy, or by :mod:`chorus.db.direct` for a statement run on
asyncpg itself), and the next ones reconnect.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from opentelemetry.trace import Span, SpanKind, get_current_span
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util import await_only

from chorus.metrics import DB_READS
from chorus.tracing import tracer

if TYPE_CHECKING:
    from chorus.db.replicas import Replicas

SQLITE_BUSY_TIMEOUT_MS = 30_000
WRITE_QUEUE_TIMEOUT_S = 60.0
"""How long a SQLite writer waits for its turn before the request fails."""
CONNECT_TIMEOUT_S = 5.0
"""How long opening a PostgreSQL connection may take (asyncpg's default is 60 s)."""
STATEMENT_TIMEOUT_S = 10.0
"""How long a PostgreSQL statement may go unanswered (asyncpg's ``command_timeout``;
its default is none).

A server that stopped answering without closing its connections (frozen, a
network partition, a host that hangs) held every request that reached it until
the client gave up, however long that took. After this long the statement
fails as a lost connection: ``DatabaseUnavailable`` (``SERVICE_UNAVAILABLE``),
the connection dropped, and the pool's other connections replaced at their next
checkout. Chorus's own statements are short and bounded (pages, batches of
compaction and of switches), so none should come near it; a lock waited for is a
commit of a few milliseconds. PostgreSQL's ``statement_timeout`` would not help:
a frozen server does not run its own timers."""

DATABASE_POOL_SIZE = 20
"""Pooled connections per engine (``CHORUS_DATABASE_POOL_SIZE``); a PostgreSQL pool is fixed.

No overflow: SQLAlchemy closes an overflow connection when it is returned
to a full pool, so a steady 16 requests in flight on a pool of 10 (+10
overflow) opened ~10 connections a second, each with its statements
prepared again: ~1 ms of CPU per cold read (bench/peers.py's cold row,
docs/caching.md). A fixed pool, as HikariCP advises, keeps the same ceiling
and no churn; a request beyond it waits for a connection (SQLAlchemy's 30 s,
then ``DatabaseUnavailable``)."""

PING_AFTER_IDLE_S = 0.5
"""A pooled PostgreSQL connection idle this long is pinged before it is used again.

HikariCP's ``aliveBypassWindowMs`` (500 ms): a connection used that recently
was alive then, and a ping would cost the transaction a round trip for
nothing."""

_UNAVAILABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03")
"""Connection exceptions; admin shutdown, crash shutdown, cannot connect now."""

_RETRY_LATER_SQLSTATES = ("53", "57014", "25006")
"""The server is there but cannot do the work now: insufficient resources (``53300`` too
many connections, ``53200`` out of memory, …), a statement cancelled (``57014``, by an
operator or a timeout), a transaction that must be read-only (``25006``: the primary was
made read-only, or a failover left a standby behind the URL). The transaction rolled
back, so retrying later is safe; the connection is not lost (the pool keeps it)."""

T = TypeVar("T")

_PRIMARY_READS = DB_READS.labels(database="primary")


class DatabaseUnavailable(ConnectionError):
    """The database cannot be reached, or lost the connection; retrying later may work.

    A transaction that raised this was rolled back, unless the connection
    was lost during its COMMIT, when it may have committed: a retry with the
    same operation id answers either way. A ``ConnectionError`` (an
    ``OSError``) so that code catching the driver's connection errors still
    catches it.
    """


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database is away rather than the statement was wrong."""
    if isinstance(error, OSError | exc.TimeoutError):  # OSError covers TimeoutError
        return True
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, exc.StatementError):
        # A DBAPIError's driver error, or the driver's own exception SQLAlchemy wrapped
        # in a StatementError (asyncpg's TimeoutError after STATEMENT_TIMEOUT_S).
        cause = error.orig
        return isinstance(cause, BaseException) and (
            is_lost_connection(cause) or is_retry_later(cause)
        )
    return is_retry_later(error)  # the driver's own, from a statement run on asyncpg


def is_retry_later(error: BaseException) -> bool:
    """Whether the driver's own ``error`` says the server cannot do the work now
    (:data:`_RETRY_LATER_SQLSTATES`), though the connection is not lost."""
    sqlstate = getattr(error, "sqlstate", None) or ""
    return isinstance(sqlstate, str) and sqlstate.startswith(_RETRY_LATER_SQLSTATES)


def is_lost_connection(error: BaseException) -> bool:
    """Whether the driver's own ``error`` (not SQLAlchemy's wrapper) says the server is away."""
    if isinstance(error, OSError):
        return True
    sqlstate = getattr(error, "sqlstate", None) or ""
    return isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES)


def reason(error: BaseException) -> str:
    """``error``'s text on one line, for a log or ``DatabaseUnavailable``; its class name
    when it has none (a ``TimeoutError``, of a statement or of a connect)."""
    return " ".join(str(error).split()) or type(error).__name__


@contextmanager
def _unavailable_as_error(lost: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Raise what says the database is away as :class:`DatabaseUnavailable`; call ``lost``
    first, whichever raised it."""
    try:
        yield
    except DatabaseUnavailable:
        lost()
        raise
    except Exception as error:
        if is_unavailable(error):
            lost()
            # The driver's own words: a DBAPIError's text would add the SQL.
            cause = error.orig if isinstance(error, exc.StatementError) else None
            raise DatabaseUnavailable(reason(cause or error)) from error
        raise


def _sqlite_pragmas(begin: str) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from pysqlite so we issue it ourselves.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # Migrations leave a file in WAL mode (see migrations/env.py); only a
        # database that skipped them is switched here.
        cursor.execute("PRAGMA journal_mode")
        if cursor.fetchone()[0] not in ("wal", "memory"):
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    def on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return on_connect, on_begin


def json_loads(text: str | bytes) -> Any:
    """A JSON column's value (the mutation log's payloads, the outbox's events): orjson's
    reading, several times faster than ``json.loads`` on a large payload (a catch-up
    decodes every version since the client's); ``json.loads``' where orjson refuses
    what the standard reads (an integer past 64 bits, an escaped lone surrogate), and
    where it reads a number otherwise: an integer below -2**63 or above 2**64 - 1 is a
    float to orjson, so text holding 19 digits in a row is read by ``json.loads``
    (Hypothesis examples of ``tests/unit/test_json_standard.py``).

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``).
    """
    long_number = _LONG_NUMBER_BYTES if isinstance(text, bytes) else _LONG_NUMBER
    if long_number.search(text) is not None:  # type: ignore[arg-type]
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


_LONG_NUMBER = re.compile(r"[0-9]{19}")
_LONG_NUMBER_BYTES = re.compile(rb"[0-9]{19}")
"""19 digits in a row: every integer orjson reads as a float among them (and, in a
string's text, more that it would read right: those cost only the slower reader)."""


def _ping_when_idle(engine: AsyncEngine) -> None:
    """Ping a pooled connection on checkout when it was idle :data:`PING_AFTER_IDLE_S` or more.

    SQLAlchemy's recipe for pessimistic disconnect handling (a ``checkout``
    listener raising ``DisconnectionError``; here the pool-wide kind its own
    pre-ping raises), with ``SELECT 1`` as asyncpg sends a query without
    arguments: the simple-query protocol, one round trip, nothing prepared, no
    transaction. (Not the empty query ``;``: asyncpg's ``execute`` fails on its
    empty status, which replaced every connection that sat idle, and the pool
    with it.) A new connection is not pinged.
    """

    def on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["chorus.idle_since"] = time.monotonic()

    def on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("chorus.idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        try:
            await_only(dbapi_connection.driver_connection.execute("SELECT 1"))
        except Exception as error:
            raise exc.InvalidatePoolError(f"ping failed: {error!r}") from error

    event.listen(engine.sync_engine, "checkin", on_checkin)
    event.listen(engine.sync_engine, "checkout", on_checkout)


def _unanswered_is_lost(engine: AsyncEngine) -> None:
    """A statement that timed out (:data:`STATEMENT_TIMEOUT_S`) is a lost connection to
    SQLAlchemy too, so it drops that connection and marks the pool's others stale.

    asyncpg's ``TimeoutError`` is not a DBAPI error, so SQLAlchemy would return the
    connection to the pool with the statement still in progress on it ("another
    operation is in progress" for the next transaction there).
    """

    def on_error(context: Any) -> None:
        if isinstance(context.original_exception, TimeoutError):
            context.is_disconnect = True

    event.listen(engine.sync_engine, "handle_error", on_error)


def postgres_engine(url: str | URL, *, pool_size: int, pooler: bool = False) -> AsyncEngine:
    """A pooled asyncpg engine of ``pool_size`` connections at most (no overflow:
    :data:`DATABASE_POOL_SIZE`), its idle connections pinged on checkout, each
    statement answered within :data:`STATEMENT_TIMEOUT_S` or failed as a lost connection.

    Args:
        pooler: the URL is a pooler in transaction mode (PgBouncer before
            1.21 keeps no prepared statement across transactions): asyncpg's
            statement cache and SQLAlchemy's are off and every prepared
            statement gets a unique name, as SQLAlchemy's asyncpg dialect
            documents ("Prepared Statement Name with PGBouncer").
    """
    connect_args: dict[str, Any] = {
        "timeout": CONNECT_TIMEOUT_S,
        "command_timeout": STATEMENT_TIMEOUT_S,
    }
    if pooler:
        url = make_url(url).update_query_dict({"prepared_statement_cache_size": "0"})
        connect_args["statement_cache_size"] = 0
        connect_args["prepared_statement_name_func"] = _unique_statement_name
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=0,
        connect_args=connect_args,
        json_deserializer=json_loads,
    )
    _ping_when_idle(engine)
    _unanswered_is_lost(engine)
    return engine


def _unique_statement_name() -> str:
    return f"__chorus_{uuid.uuid4().hex}__"


class Database:
    """The engines of one database URL and its transactions.

    Args:
        url: a SQLAlchemy async URL, ``sqlite+aiosqlite:///path`` or
            ``postgresql+asyncpg://user@host/db``. A SQLite file's directory
            is created when missing, not its parents (a mistyped path fails).
        pool_size: connections for reads (and PostgreSQL writes).
        replicas: PostgreSQL streaming replicas of ``url``; reads of
            playlists may go there under the rule of :mod:`chorus.db.replicas`.
            Disposed with this database.
        pooler: ``url`` (and the replicas) are reached through a pooler in
            transaction mode (:func:`postgres_engine`).
        direct_url: the primary without the pooler (LISTEN); default ``url``.
    """

    def __init__(
        self,
        url: str | URL,
        *,
        pool_size: int = DATABASE_POOL_SIZE,
        replicas: Replicas | None = None,
        pooler: bool = False,
        direct_url: str | URL | None = None,
    ) -> None:
        self.url = make_url(url)
        self.direct_url = make_url(direct_url) if direct_url is not None else self.url
        self.dialect = self.url.get_backend_name()
        self.pooler = pooler
        self.replicas = replicas
        if self.dialect == "sqlite":
            database = self.url.database or ""
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(exist_ok=True)
            self.write_engine = self._sqlite_engine("BEGIN IMMEDIATE", pool_size=1)
            self.read_engine = self._sqlite_engine("BEGIN", pool_size=pool_size)
        elif self.dialect == "postgresql":
            self.write_engine = self.read_engine = postgres_engine(
                self.url, pool_size=pool_size, pooler=pooler
            )
        else:
            raise ValueError(f"unsupported database {self.dialect!r}: use sqlite or postgresql")
        if replicas is not None and self.dialect != "postgresql":
            raise ValueError("read replicas need a PostgreSQL primary")
        direct = self.dialect == "postgresql" and not pooler
        self._held = _HeldConnections(pool_size // 2 if direct and pool_size >= 4 else 0)

    def _sqlite_engine(self, begin: str, *, pool_size: int) -> AsyncEngine:
        engine = create_async_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=WRITE_QUEUE_TIMEOUT_S,
            json_deserializer=json_loads,
        )
        on_connect, on_begin = _sqlite_pragmas(begin)
        event.listen(engine.sync_engine, "connect", on_connect)
        event.listen(engine.sync_engine, "begin", on_begin)
        return engine

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def direct_reads(self) -> bool:
        """A one-statement read may run on asyncpg itself (:mod:`chorus.db.direct`):
        PostgreSQL without a transaction pooler."""
        return self.is_postgres and not self.pooler

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction: commits when the block ends, rolls back on an exception.

        Raises:
            DatabaseUnavailable: the database cannot be reached or lost the connection.
        """
        with self._span("write"), _unavailable_as_error(self._held.lost):
            await self._held.make_room(self.write_engine.pool)
            async with self.write_engine.begin() as conn:
                yield conn

    @asynccontextmanager
    async def write_statements(self) -> AsyncIterator[AsyncConnection]:
        """A connection to the primary outside any transaction: each statement commits on its own.

        For a write that is one statement and reads of one statement each (a group
        commit's, :mod:`chorus.db.group_commit`), where ``BEGIN`` and ``COMMIT`` would be
        two more round trips. The connection is one of those :meth:`read_statement`
        holds between uses (:class:`_HeldConnections`; the primary's engine is the
        writes' too). Only where :attr:`direct_reads` holds: behind a
        transaction pooler, a statement's prepare and its execution may reach two
        server connections when no transaction holds them together.

        Raises:
            DatabaseUnavailable: the database cannot be reached or lost the connection.
            RuntimeError: :attr:`direct_reads` does not hold.
        """
        if not self.direct_reads:
            raise RuntimeError("statements outside a transaction need PostgreSQL, no pooler")
        if self._held.limit:
            async with self._statements("write") as conn:
                yield conn
            return
        with self._span("write"), _unavailable_as_error(self._held.lost):
            async with self.write_engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction on the primary (one consistent snapshot on both dialects).

        Raises:
            DatabaseUnavailable: the database cannot be reached or lost the connection.
        """
        _PRIMARY_READS.inc()
        async with self.read_on(self.read_engine) as conn:
            yield conn

    @asynccontextmanager
    async def read_statement(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads of one statement each (PostgreSQL: outside a transaction).

        A single statement sees one snapshot on its own; on PostgreSQL the
        ``BEGIN`` and ``COMMIT`` around it would be two more round trips. On
        SQLite, and behind a transaction pooler (which may send a statement's
        prepare and its execution to two server connections when no
        transaction holds them together), this is :meth:`read`.

        Raises:
            DatabaseUnavailable: the database cannot be reached or lost the connection.
        """
        _PRIMARY_READS.inc()
        if not self._held.limit or self.pooler:
            async with self.read_on(self.read_engine, one_statement=True) as conn:
                yield conn
            return
        async with self._statements("read") as conn:
            yield conn

    @asynccontextmanager
    async def _statements(self, kind: str) -> AsyncIterator[AsyncConnection]:
        """A connection to the primary in ``AUTOCOMMIT``: one held between such uses
        (:class:`_HeldConnections`) if one is, else one from the pool, held after if it
        can be. ``kind``: the span's, ``read`` or ``write``."""
        held = self._held
        with self._span(kind), _unavailable_as_error(held.lost):
            taken = await held.take()
            if taken is None:
                await held.make_room(self.read_engine.pool)
                taken = await self.read_engine.connect()
                try:
                    await taken.execution_options(isolation_level="AUTOCOMMIT")
                except BaseException:
                    await _closed(taken)
                    raise
            kept = False
            try:
                yield taken
                kept = held.hold(taken, self.read_engine.pool)
            finally:
                if not kept:
                    await _closed(taken)

    @asynccontextmanager
    async def read_on(
        self, engine: AsyncEngine, *, one_statement: bool = False
    ) -> AsyncIterator[AsyncConnection]:
        """:meth:`read` (or :meth:`read_statement`) on ``engine``: the primary's or a replica's.

        Raises:
            DatabaseUnavailable: the database cannot be reached or lost the connection.
        """
        with self._span("read"), _unavailable_as_error(self._held.lost):
            if engine is self.read_engine:
                await self._held.make_room(engine.pool)
            async with engine.connect() as conn:
                if not self.is_postgres:
                    async with conn.begin():
                        yield conn
                elif one_statement and not self.pooler:
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                    yield conn
                else:
                    await conn.execution_options(
                        isolation_level="REPEATABLE READ", postgresql_readonly=True
                    )
                    async with conn.begin():
                        yield conn

    def _span(self, kind: str) -> AbstractContextManager[Span | None]:
        """A client span per transaction (``db.read`` / ``db.write``) inside a recorded span.

        Spans per transaction, not per statement: one page read is a few
        statements, and their spans would cost more than they tell. None
        outside a trace: the relay's and the commit watch's polls would be a
        new trace every half second.
        """
        if not get_current_span().is_recording():
            return nullcontext()
        return tracer.start_as_current_span(
            f"db.{kind}", kind=SpanKind.CLIENT, attributes={"db.system": self.dialect}
        )

    async def dispose(self) -> None:
        await self._held.release()
        await self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            await self.read_engine.dispose()
        if self.replicas is not None:
            await self.replicas.dispose()


class _HeldConnections:
    """Connections for one-statement reads on the PostgreSQL primary
    (:meth:`Database.read_statement`) and one-statement commits
    (:meth:`Database.write_statements`), held checked out between uses, the most
    recently used first, instead of returned to the pool after each.

    Checking a connection out of SQLAlchemy's pool and in again (a greenlet hop, a
    ``Connection``, the pool's events, ``AUTOCOMMIT`` set and reset, a task for the
    close) was ~7% of a cold read's CPU (bench/peers.py's cold row, py-spy), as much
    as running its statement on asyncpg. What the pool promises still holds:

    * at most ``limit`` are held (half the pool: none of a pool under 4); a
      connection is held only while the pool could hand out another without waiting,
      and everything held goes back before a checkout from a pool that could not
      (:meth:`make_room`), so a transaction never waits for a connection held idle here;
    * one held :data:`PING_AFTER_IDLE_S` or more goes back to the pool as idle since
      its last use, so the pool pings it before its next use, as any other;
    * one whose read raised, or on which SQLAlchemy began a transaction, goes back (the
      pool resets it); after any ``DatabaseUnavailable`` every held one goes back at
      the next read, where the pool replaces those a lost server closed;
    * :meth:`Database.dispose` returns them before the pool is closed.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._idle: list[tuple[AsyncConnection, float, int]] = []
        """(connection, held since, :attr:`_losses` then), the most recent last."""
        self._losses = 0

    def lost(self) -> None:
        """The database was found unavailable: what is held now goes back to the pool."""
        self._losses += 1

    async def take(self) -> AsyncConnection | None:
        """The most recently held connection, if it may be used without a ping."""
        idle = self._idle
        if not idle:
            return None
        conn, since, losses = idle[-1]
        if losses == self._losses and time.monotonic() - since < PING_AFTER_IDLE_S:
            idle.pop()
            return conn
        await self.release()  # every other one was held earlier still
        return None

    def hold(self, conn: AsyncConnection, pool: Any) -> bool:
        """Hold ``conn`` after its read, if it may be (see the class docstring)."""
        if len(self._idle) >= self.limit or conn.invalidated or conn.in_transaction():
            return False
        if _free_in(pool) == 0:
            return False
        self._idle.append((conn, time.monotonic(), self._losses))
        return True

    async def make_room(self, pool: Any) -> None:
        """Everything held back to ``pool`` when it has no free connection: a checkout
        would wait, maybe for a connection held here."""
        if self._idle and _free_in(pool) == 0:
            await self.release()

    async def release(self) -> None:
        """Every held connection back to the pool, idle since it was held."""
        idle = self._idle
        while idle:
            conn, since, _ = idle.pop(0)
            info = None if conn.invalidated else conn.info
            await _closed(conn)
            if info is not None:
                # What _ping_when_idle's checkin listener has just set to now.
                info["chorus.idle_since"] = since


def _free_in(pool: Any) -> int:
    """The connections ``pool`` hands out without waiting: idle or not opened yet (a fixed
    ``QueuePool``'s, as :func:`postgres_engine` makes; 0 for another kind)."""
    if not hasattr(pool, "checkedout") or not hasattr(pool, "size"):
        return 0
    return int(pool.size()) - int(pool.checkedout())


async def _closed(conn: AsyncConnection) -> None:
    """Close ``conn`` as ``async with`` does: to the end, even if the caller is cancelled."""
    await conn.__aexit__(None, None, None)


async def finish_even_if_cancelled(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` (a transaction) to its commit or rollback even if the caller is cancelled.

    A transaction torn down mid-statement can leave the SQLite writer's lock
    held until garbage collection, stalling every other writer; shielded, the
    transaction always ends cleanly, and the client's retry with the same
    operation id replays whatever it committed.
    """
    return await asyncio.shield(work)
