"""The plans PostgreSQL caches for a commit's reads use the indexes, whatever the statistics.

A statement Chorus runs on every commit is prepared once per pooled connection,
and after five executions PostgreSQL keeps its *generic* plan: made without the
parameters' values (an array parameter is guessed at 10 elements) and from the
statistics of the moment. A plan made on a fresh database, or one whose
statistics are never gathered (autovacuum off, as on this project's CI), sees
tiny tables; if it scans one, it keeps scanning it as the table grows, and the
commit's cost grows with the log. So each statement is planned here the way a
pooled connection keeps it (``plan_cache_mode = force_generic_plan``) on an
empty, never analysed, migrated database, and its plan must reach the tables
through an index.
"""

from __future__ import annotations

import re

import asyncpg
import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import TextClause

from chorus.db import group_commit

TABLES = ("playlist_mutation", "playlist_batch_operation", "playlist_member", "playlist_entry")


def literal(value: object) -> str:
    """``value`` (a ``str`` or a list of them) as an SQL literal (``EXECUTE`` takes no
    bound parameters)."""
    if isinstance(value, list):
        return f"ARRAY[{', '.join(map(literal, value))}]::text[]"
    assert isinstance(value, str)
    return "'" + value.replace("'", "''") + "'"


async def generic_plan(url: str, statement: TextClause, values: dict[str, object]) -> str:
    """The generic plan PostgreSQL keeps for ``statement``, as ``EXPLAIN`` prints it."""
    compiled = statement.compile(dialect=postgresql.asyncpg.dialect())
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE kept AS {compiled}")
        arguments = ", ".join(literal(values[name]) for name in compiled.positiontup or ())
        rows = await conn.fetch(f"EXPLAIN EXECUTE kept({arguments})")
        return "\n".join(row[0] for row in rows)
    finally:
        await conn.close()


@pytest.mark.parametrize("operations", [1, 3])
async def test_the_reads_after_the_lock_use_the_indexes(postgres: str, operations: int) -> None:
    plan = await generic_plan(
        postgres,
        group_commit._AFTER_LOCK,
        {
            "playlist_id": "p",
            "actors": ["alice"] * operations,
            "operations": [f"op{n}" for n in range(operations)],
            "users": ["alice"],
            "batch_member": "h",
            "batch_result": "{}",
        },
    )
    scanned = re.findall(r"Seq Scan on (\w+)", plan)
    assert not scanned, plan
    for table in TABLES:
        assert re.search(rf"Index (Only )?Scan(?: Backward)? using \w+ on {table}\b", plan), plan
