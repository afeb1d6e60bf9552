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


@pytest.mark.parametrize("one", [True, False])
@pytest.mark.parametrize("name", ["_AFTER_LOCK", "_LOCK_AND_READ"])
async def test_the_lock_and_the_reads_use_the_indexes(postgres: str, name: str, one: bool) -> None:
    operations = 1 if one else 3
    plan = await generic_plan(
        postgres,
        getattr(group_commit, name)[one],
        {
            "playlist_id": "p",
            "actors": ["alice"] * operations,
            "operations": [f"op{n}" for n in range(operations)],
            "users": ["alice"],
            "actor": "alice",
            "operation": "op0",
            "user": "alice",
            "batch_member": "h",
            "batch_result": "{}",
        },
    )
    scanned = re.findall(r"Seq Scan on (\w+)", plan)
    assert not scanned, plan
    tables = (*TABLES, "playlist") if name == "_LOCK_AND_READ" else TABLES
    for table in tables:
        assert re.search(rf"Index (Only )?Scan(?: Backward)? using \w+ on {table}\b", plan), plan


@pytest.mark.parametrize("name", ["_AFTER_LOCK", "_LOCK_AND_READ"])
async def test_a_command_alone_keeps_one_plan(postgres: str, name: str) -> None:
    """After its first five executions PostgreSQL keeps the generic plan of a group of one
    command's read: it is not planned again at every commit (the plan ``EXPLAIN EXECUTE``
    shows compares with the parameters, ``$n``, not with this call's values)."""
    statement = getattr(group_commit, name)[True]
    compiled = statement.compile(dialect=postgresql.asyncpg.dialect())
    values = {
        "playlist_id": "p",
        "actor": "alice",
        "operation": "op0",
        "user": "alice",
        "batch_member": "h",
        "batch_result": "{}",
    }
    arguments = ", ".join(literal(values[n]) for n in compiled.positiontup or ())
    conn = await asyncpg.connect(postgres.replace("postgresql+asyncpg", "postgresql"))
    try:
        await conn.execute(f"PREPARE kept AS {compiled}")
        for _ in range(6):
            await conn.execute(f"EXECUTE kept({arguments})")
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE kept({arguments})"))
    finally:
        await conn.close()
    assert "'alice'" not in plan, plan
    assert "= $" in plan, plan
