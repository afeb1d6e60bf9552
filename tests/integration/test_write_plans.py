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

from chorus.db import group_commit, outbox, writer

TABLES = ("playlist_mutation", "playlist_batch_operation", "playlist_member", "playlist_entry")


def literal(value: object) -> str:
    """``value`` (a ``str``, a list of them or ``None``) as an SQL literal (``EXECUTE`` takes no
    bound parameters)."""
    if value is None:
        return "NULL"
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
@pytest.mark.parametrize("name", ["_AFTER_LOCK", "_LOCK_AND_READ", "_READ"])
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
    tables = (*TABLES, "playlist") if name != "_AFTER_LOCK" else TABLES
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


END_VALUES: dict[str, object] = {
    "e_rows": '{"records": [], "added": []}',
    "e_playlist_id": "p",
    "e_before": "1",
    "b_row": "1",
    "r_user": "alice",
    "r_role": "owner",
    "r_users": ["alice", "bob"],
    "r_roles": ["owner", "editor"],
    "n_actor": "alice",
    "n_operation": "op0",
    "n_actors": ["alice", "bob"],
    "n_operations": ["op0", "op1"],
}


@pytest.mark.parametrize(
    "key",
    [None, *writer._END_UNLOCKED],
    ids=lambda k: "locked" if k is None else "unlocked-{}-{}-{}".format(*k),
)
async def test_each_end_reaches_the_log_and_members_by_index(
    postgres: str, key: tuple[bool, bool, bool] | None
) -> None:
    """The end of a commit (``writer._END_POSTGRES``, and outside a transaction each
    ``_END_UNLOCKED`` variant: one actor or several, one operation id or several, read
    or not) finds the header, the deciding actors' member rows and the operation ids'
    records through indexes: a scan of the log per commit grows with the log."""
    statement = writer._END_POSTGRES if key is None else writer._END_UNLOCKED[key]
    compiled = statement.compile(dialect=postgresql.asyncpg.dialect())
    values = {**END_VALUES, **{n: None for n in compiled.positiontup or () if n.startswith("h_")}}
    plan = await generic_plan(postgres, statement, values)
    assert not re.findall(r"Seq Scan on (\w+)", plan), plan
    assert "hashed SubPlan" not in plan, plan
    assert re.search(r"Index Scan using pk_playlist on playlist\b", plan), plan
    if key is not None:
        assert re.search(r"Index (Only )?Scan using \w+ on playlist_member\b", plan), plan
        if key[2]:  # the operation ids were not read: the end looks them up
            for table in ("playlist_mutation", "playlist_batch_operation"):
                assert re.search(rf"Index (Only )?Scan using \w+ on {table}\b", plan), plan


async def test_the_relays_claim_reaches_unpublished_events_by_index(postgres: str) -> None:
    """The relay's locks and claim (``outbox.claim_and_stamp``) read the outbox's
    unpublished events through their partial index, never the whole outbox."""
    plan = await generic_plan(
        postgres, outbox._CLAIM_AND_STAMP, {"lock_class": "1", "limit": "200", "now": "now"}
    )
    assert not re.findall(r"Seq Scan on (\w+)", plan), plan
    assert plan.count("using ix_outbox_unpublished on outbox") == 2, plan
