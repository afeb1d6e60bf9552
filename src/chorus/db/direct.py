"""A fixed read statement run on asyncpg itself, in front of SQLAlchemy's execution layer.

The cold page read (a playlist's header and first page, one statement of
~50 rows) cost ~1.2 ms of CPU through SQLAlchemy's ``AsyncConnection.execute``
(the greenlet hop, the cursor adapter, a result processor per column of
each row) and ~0.5 ms on asyncpg directly, measured on this statement
(docs/caching.md, "The cold path"). :func:`fetch_direct` runs a statement
built once with SQLAlchemy, compiled once per dialect, on the pooled
connection's asyncpg connection. The pool, the checkout ping, the span,
the replica rule and SQLAlchemy's ``before_cursor_execute`` event stay:
only the execution goes around.

It is for connections opened by :meth:`~chorus.db.engine.Database.read_on`
with ``one_statement`` on PostgreSQL without a transaction pooler
(:attr:`~chorus.db.engine.Database.direct_reads`): no transaction is open,
so nothing SQLAlchemy tracks (its lazily begun transaction, its statement
cache) is bypassed. Behind PgBouncer in transaction mode the statement's
prepare and execution could reach two server connections; there the caller
runs the statement through SQLAlchemy, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ClauseElement

from chorus.db.engine import DatabaseUnavailable, is_lost_connection

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
        DatabaseUnavailable: the connection was lost (it is invalidated: the pool drops it).
    """
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
    driver: Any = (await conn.get_raw_connection()).driver_connection
    try:
        rows: Sequence[Sequence[Any]] = await driver.fetch(sql_text, *args)
    except Exception as error:
        if not is_lost_connection(error) and not driver.is_closed():
            raise
        await conn.invalidate(error)
        message = " ".join(str(error).split()) or type(error).__name__
        raise DatabaseUnavailable(message) from error
    return rows


__all__ = ["fetch_direct"]
