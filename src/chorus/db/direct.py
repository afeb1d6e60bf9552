"""Fixed statements run on asyncpg itself, in front of SQLAlchemy's execution layer.

The cold page read (a playlist's header and first page, one statement of
~50 rows) cost ~1.2 ms of CPU through SQLAlchemy's ``AsyncConnection.execute``
(the greenlet hop, the cursor adapter, a result processor per column of
each row) and ~0.5 ms on asyncpg directly, measured on this statement
(docs/caching.md, "The cold path"). :func:`fetch_direct` runs a statement
built once with SQLAlchemy, compiled once per dialect, on the pooled
connection's asyncpg connection. The pool, the checkout ping, the span,
the replica rule and SQLAlchemy's ``before_cursor_execute`` event stay:
only the execution goes around.

:func:`fetch_direct` is for connections opened by :meth:`~chorus.db.engine.Database.read_on`
with ``one_statement`` on PostgreSQL without a transaction pooler
(:attr:`~chorus.db.engine.Database.direct_reads`): no transaction is open,
so nothing SQLAlchemy tracks (its lazily begun transaction, its statement
cache) is bypassed. Behind PgBouncer in transaction mode the statement's
prepare and execution could reach two server connections; there the caller
runs the statement through SQLAlchemy, as before.

:func:`fetch_in_transaction` is for the statements of a write transaction on
PostgreSQL (:meth:`~chorus.db.engine.Database.write`), the group commit's
(:mod:`chorus.db.group_commit`): each went through the same layers, ~0.1-0.2 ms
of the process's CPU apiece, three per commit. It first makes sure the ``BEGIN``
SQLAlchemy defers to the first statement was sent (asyncpg's adapter begins the
transaction it then commits or rolls back), so the statement is inside the
transaction whichever runs first. Inside a transaction a pooler keeps the
server connection, so it is allowed behind one too (asyncpg then prepares
unnamed statements, as SQLAlchemy does there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ClauseElement

from chorus.db.engine import DatabaseUnavailable, is_lost_connection, is_retry_later, reason

_COMPILED: dict[int, tuple[ClauseElement, str, tuple[str, ...]]] = {}
"""By ``id(statement)``: the statement (kept alive, so the id stays its), its SQL and the
names of its parameters in ``$n`` order."""


async def fetch_direct(
    conn: AsyncConnection, statement: ClauseElement, params: Mapping[str, Any]
) -> Sequence[Sequence[Any]]:
    """``statement``'s rows, fetched by asyncpg from ``conn``'s connection.

    Args:
        conn: a connection of ``Database.read_on(..., one_statement=True)`` where
            ``Database.direct_reads`` holds (outside any transaction).
        statement: a statement built once (module level): its SQL is compiled the
            first time and kept. Its parameters must have no bind processor of
            SQLAlchemy's (plain strings and integers): they go to asyncpg as given.
        params: every bound parameter by name.

    Returns:
        asyncpg's records, read by position in the statement's column order.

    Raises:
        DatabaseUnavailable: the connection was lost (the pool drops it, and every
            connection it opened before it).
    """
    sql_text, args = _prepared(conn, statement, params)
    fairy = await conn.get_raw_connection()
    driver: Any = fairy.driver_connection
    try:
        rows: Sequence[Sequence[Any]] = await driver.fetch(sql_text, *args)
    except Exception as error:
        await _lost(conn, fairy, error)
        raise
    return rows


async def fetch_in_transaction(
    conn: AsyncConnection, statement: ClauseElement, params: Mapping[str, Any]
) -> Sequence[Sequence[Any]]:
    """``statement``'s rows, fetched by asyncpg inside ``conn``'s transaction.

    Args:
        conn: a connection of :meth:`~chorus.db.engine.Database.write` on PostgreSQL;
            its transaction is begun first if no statement has begun it yet.
        statement: as :func:`fetch_direct`'s.
        params: every bound parameter by name.

    Returns:
        asyncpg's records (by position, or by column name).

    Raises:
        sqlalchemy.exc.IntegrityError: a constraint refused the statement (as
            SQLAlchemy raises it, so callers catch one kind).
        DatabaseUnavailable: the connection was lost (the pool drops it, and every
            connection it opened before it).
    """
    sql_text, args = _prepared(conn, statement, params)
    fairy = await conn.get_raw_connection()
    driver: Any = fairy.driver_connection
    try:
        adapted: Any = fairy.dbapi_connection
        if adapted._transaction is None:
            # SQLAlchemy's asyncpg adapter sends BEGIN with the first statement it runs,
            # and COMMIT / ROLLBACK on the transaction it keeps here.
            await adapted._start_transaction()
        rows: Sequence[Sequence[Any]] = await driver.fetch(sql_text, *args)
    except asyncpg.IntegrityConstraintViolationError as error:
        raise IntegrityError(sql_text, args, error) from error
    except Exception as error:
        await _lost(conn, fairy, error)
        raise
    return rows


def _prepared(
    conn: AsyncConnection, statement: ClauseElement, params: Mapping[str, Any]
) -> tuple[str, list[Any]]:
    """``statement``'s SQL (compiled the first time) and its arguments in ``$n`` order;
    SQLAlchemy's listeners are told of it."""
    compiled = _COMPILED.get(id(statement))
    if compiled is None:
        sql = statement.compile(dialect=conn.dialect)
        names = getattr(sql, "positiontup", None) or ()  # $n order (a SQLCompiler's)
        compiled = (statement, str(sql), tuple(names))
        _COMPILED[id(statement)] = compiled
    _, sql_text, names = compiled
    args = [params[n] for n in names]
    sync = conn.sync_connection
    if sync is not None and (sync._has_events or sync.engine._has_events):
        # What listens to SQLAlchemy's statements (instrumentation, the tests' SQL log)
        # is told of this one too; a listener's rewrite of it is not applied.
        sync.dispatch.before_cursor_execute(sync, None, sql_text, args, None, False)
    return sql_text, args


async def _lost(conn: AsyncConnection, fairy: Any, error: Exception) -> None:
    """Raise :class:`DatabaseUnavailable` if ``error`` lost the connection, or says the
    server cannot do the work now (:func:`~chorus.db.engine.is_retry_later`: the
    connection is kept); return otherwise, for the caller to re-raise ``error``.

    A lost connection is dropped with every other the pool opened before it, as
    SQLAlchemy drops them when its own statement loses one: a server that went
    away closed them all, and one used less than ``PING_AFTER_IDLE_S`` ago would
    not be pinged before its next transaction, which would fail after the server
    is back (``tests/full/test_postgres_restart.py``).
    """
    if not is_lost_connection(error) and not fairy.driver_connection.is_closed():
        if is_retry_later(error):  # the server is there but cannot do it now
            raise DatabaseUnavailable(reason(error)) from error
        return
    # What Connection._handle_dbapi_exception does on a disconnect: mark the pool's
    # connections up to this one's start stale (each is replaced at its next
    # checkout), then invalidate this one (closed on SQLAlchemy's greenlet).
    conn.sync_engine.pool._invalidate(fairy, error, _checkin=False)
    await conn.invalidate(error)
    raise DatabaseUnavailable(reason(error)) from error


__all__ = ["fetch_direct", "fetch_in_transaction"]
