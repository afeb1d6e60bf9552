"""Writes a decision: entry rows, the header, the mutation log and the outbox.

Every row change comes from the decision's canonical changes, the same ones
the log keeps, so the tables are always the log folded up to ``version``.
Called inside the command's transaction only (:mod:`chorus.db.store`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, assert_never

import orjson
from sqlalchemy import bindparam, delete, insert, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import TextClause

from chorus.db import checkpoints
from chorus.db.direct import fetch_in_transaction
from chorus.db.stored_results import outcome_to_json
from chorus.db.tables import (
    outbox,
    playlist,
    playlist_batch_operation,
    playlist_entry,
    playlist_member,
    playlist_mutation,
)
from chorus.domain.changes import (
    WIRE_VERSION,
    DetailsUpdated,
    EntriesAdded,
    EntriesMoved,
    EntriesRemoved,
    MembersChanged,
    PlaylistCreated,
    PlaylistDeleted,
    PlaylistEvent,
    encode_change,
)
from chorus.domain.decisions import Decision
from chorus.domain.model import Entry, Playlist, Role
from chorus.domain.playlist_search import title_key
from chorus.domain.version_history import checkpoint_due

_PLAYLIST_FIELDS = tuple(f.name for f in dataclasses.fields(Playlist))
"""Looked up once: ``dataclasses.fields`` per commit was half of this function's cost."""


def _header_values(p: Playlist) -> dict[str, Any]:
    values = {name: getattr(p, name) for name in _PLAYLIST_FIELDS}
    values["visibility"] = p.visibility.value
    values["kind"] = p.kind.value
    values["title_key"] = title_key(p.title)
    return values


def entry_values(playlist_id: str, e: Entry) -> dict[str, Any]:
    """The ``playlist_entry`` row of ``e``, live, in ``playlist_id``."""
    return {
        "playlist_id": playlist_id,
        "entry_id": e.entry_id,
        "position_key": e.position_key,
        "media_id": e.media_id,
        "added_by": e.added_by,
        "added_at": e.added_at,
        "removed_at": None,
    }


async def _upsert_entries(
    conn: AsyncConnection, playlist_id: str, entries: tuple[Entry, ...]
) -> None:
    """Insert new entries; a revert's re-added ids bring their tombstone back to life."""
    stmt = _ENTRY_UPSERTS.get(conn.dialect.name)
    if stmt is None:
        stmt = _ENTRY_UPSERTS[conn.dialect.name] = _entry_upsert(conn.dialect.name)
    await conn.execute(stmt, [entry_values(playlist_id, e) for e in entries])


def _entry_upsert(dialect_name: str) -> postgresql.Insert | sqlite.Insert:
    stmt = (postgresql.insert if dialect_name == "postgresql" else sqlite.insert)(playlist_entry)
    return stmt.on_conflict_do_update(
        index_elements=[playlist_entry.c.playlist_id, playlist_entry.c.entry_id],
        set_={"position_key": stmt.excluded.position_key, "removed_at": None},
    )


_ENTRY_UPSERTS: dict[str, postgresql.Insert | sqlite.Insert] = {}
"""The entry upsert, built once per dialect: building it copies the whole table
(``excluded`` aliases it), a cycle of ~90 objects the collector paid for in 50 ms
pauses under load."""


@dataclass(frozen=True, slots=True)
class Record:
    """The rows that record one committed version: its log row and its outbox event.

    ``log`` is the ``playlist_mutation`` row (also the idempotency record:
    ``request_hash`` and the stored ``result``), ``event`` the ``outbox`` row,
    ``playlist`` the header the version left (a history checkpoint keeps it).
    """

    log: dict[str, Any]
    event: dict[str, Any]
    playlist: Playlist


async def write_decision(
    conn: AsyncConnection,
    decision: Decision,
    *,
    operation_id: str,
    actor_id: str,
    request_hash: str,
    group: list[Record] | None = None,
    added: dict[str, Entry] | None = None,
    trace_context: str | None = None,
) -> None:
    """Apply ``decision`` and append its log row and outbox event.

    Args:
        trace_context: the committing request's ``traceparent`` (:func:`record`).
        added: in a group commit, the entries added and not written yet (entry
            id → entry); a decision that :func:`only_adds` puts its entries
            there (alone, it writes them with its end: :func:`write_end`).
        group: in a group commit, the group's records so far: the entry and
            member rows are written now (the next command reads them), the
            log row and outbox event are appended to ``group`` and the header
            is left for the end of the group (:func:`write_end`).

    Raises:
        sqlalchemy.exc.IntegrityError: the operation id was committed
            concurrently by the same actor (the caller replays it).
    """
    p = decision.playlist
    later: list[Entry] = []  # written by the group, or (alone) with the end
    if only_adds(decision) and (added is not None or (group is None and p.version)):
        later = [e for c in decision.changes if isinstance(c, EntriesAdded) for e in c.entries]
        if added is not None:
            added.update((e.entry_id, e) for e in later)
    else:
        await write_changes(conn, decision)
    done = record(
        decision,
        operation_id=operation_id,
        actor_id=actor_id,
        request_hash=request_hash,
        trace_context=trace_context,
    )
    if group is not None:
        group.append(done)
        return
    if decision.outcome.version > 0:
        await write_end(conn, decision.playlist, [done], later, before=p.version - 1)
    else:
        await write_records(conn, [done])


def only_adds(decision: Decision) -> bool:
    """Whether every change of ``decision`` adds entries (rows to write later)."""
    return bool(decision.changes) and all(isinstance(c, EntriesAdded) for c in decision.changes)


async def write_added(conn: AsyncConnection, playlist_id: str, entries: Sequence[Entry]) -> None:
    """The rows of entries added to ``playlist_id`` (a revert's re-added ids come back to life)."""
    if entries:
        await _upsert_entries(conn, playlist_id, tuple(entries))


async def write_changes(conn: AsyncConnection, decision: Decision) -> None:
    """The entry and member rows of ``decision`` (not the header, the log or the outbox).

    A group commit writes these before deciding the next command, which
    reads them; the header and the records can wait for the end of the group.
    """
    p = decision.playlist
    now = p.updated_at
    for change in decision.changes:
        match change:
            case PlaylistCreated():
                await conn.execute(insert(playlist).values(_header_values(p)))
                await conn.execute(
                    insert(playlist_member).values(
                        playlist_id=p.id,
                        user_id=p.owner_id,
                        role=Role.OWNER.value,
                        membership_epoch=0,
                    )
                )
            case EntriesAdded():
                await _upsert_entries(conn, p.id, change.entries)
            case EntriesMoved():
                await conn.execute(
                    update(playlist_entry)
                    .where(
                        playlist_entry.c.playlist_id == p.id,
                        playlist_entry.c.entry_id == bindparam("b_entry_id"),
                    )
                    .values(position_key=bindparam("b_key")),
                    [
                        {"b_entry_id": m.entry.entry_id, "b_key": m.entry.position_key}
                        for m in change.moves
                    ],
                )
            case EntriesRemoved():
                await conn.execute(
                    update(playlist_entry)
                    .where(
                        playlist_entry.c.playlist_id == p.id,
                        playlist_entry.c.entry_id.in_([e.entry_id for e in change.entries]),
                    )
                    .values(removed_at=now)
                )
            case MembersChanged():
                await _write_member(conn, p, change)
            case DetailsUpdated() | PlaylistDeleted():
                pass  # they live in the header
            case _:
                assert_never(change)


async def write_header(conn: AsyncConnection, p: Playlist) -> None:
    """The playlist row as ``p`` (an existing playlist: version, count, details, times)."""
    await conn.execute(_UPDATE_HEADER, _header_params(p))


_HEADER_COLUMNS = [c.name for c in playlist.c if c.name not in ("id", "log_floor")]
"""What a commit writes of the header: every column but the key and the compaction's floor."""
_UPDATE_HEADER = (
    update(playlist)
    .where(playlist.c.id == bindparam("h_id"))
    .values({name: bindparam(f"h_{name}") for name in _HEADER_COLUMNS})
)
"""Built once: a statement object memoises its cache key and compiled form."""


def _header_params(p: Playlist) -> dict[str, Any]:
    return {f"h_{name}": value for name, value in _header_values(p).items()}


@dataclass(frozen=True, slots=True)
class Unlocked:
    """What a commit outside a transaction was decided on (:func:`write_end`): its end
    writes only while the database still says so.

    Attributes:
        row: the playlist row the commit was decided on, as read (or as this process's
            last commit of it wrote it): its ``xmin``, as text. Any change to the row
            writes a new one, with or without a new playlist version.
        roles: the deciding actors' roles, by user id (``None``: no member row); each
            member row must still say so.
        ids_read: whether the idempotency records of the records' operation ids were
            read; if not, none of them may be committed already (a log row's, or an
            atomic batch's later operation's).
    """

    row: str
    roles: Mapping[str, Role | None]
    ids_read: bool = True


async def write_end(
    conn: AsyncConnection,
    header: Playlist,
    records: Sequence[Record],
    added: Sequence[Entry] = (),
    *,
    before: int,
    unlocked: Unlocked | None = None,
) -> str | None:
    """The end of a commit: the entries ``added`` (:func:`write_added`), the header as
    ``header``, then :func:`write_records`.

    On PostgreSQL all four (entries, header, log rows, outbox events) are **one**
    statement (:data:`_END_POSTGRES`), which writes only while the playlist's row is at
    version ``before`` (and, ``unlocked``, while the rest holds): it writes nothing and
    answers ``None`` otherwise. Elsewhere they are up to four, and always written.

    Args:
        before: the version of the playlist's row the commit was decided on (a group's
            versions before the end are in its log, not yet in the row).
        unlocked: ``conn`` is outside a transaction, where the statement commits on its
            own, and this is what the commit was decided on (:data:`_END_UNLOCKED`);
            ``None``: ``conn``'s transaction holds the playlist's row lock, taken before
            the commit was decided, so nothing can have moved on.

    Returns:
        ``None`` when it wrote nothing; else the playlist row it wrote (PostgreSQL: its
        ``xmin``, :attr:`Unlocked.row`; elsewhere ``""``).

    Raises:
        RuntimeError: not ``unlocked``, and the playlist's row was not at version
            ``before`` (the transaction is rolled back: nothing of it is kept).
        ValueError: ``unlocked``, and the records keep a checkpoint
            (:func:`keeps_checkpoint`): its statement would not be part of the commit.
        sqlalchemy.exc.IntegrityError: an operation id was committed
            concurrently by the same actor.
    """
    if unlocked is not None and (conn.dialect.name != "postgresql" or keeps_checkpoint(records)):
        raise ValueError("only a PostgreSQL commit with no checkpoint is one statement")
    if conn.dialect.name != "postgresql" or not records:
        await write_added(conn, header.id, added)
        await write_header(conn, header)
        await write_records(conn, records)
        return ""
    params = _end_params(header, records, added, before)
    statement = _END_POSTGRES
    if unlocked is not None:
        statement = _unlocked(params, unlocked, records)
    rows = await fetch_in_transaction(conn, statement, params)
    written: str | None = rows[0][0]
    if written is None:
        if unlocked is None:
            raise RuntimeError(f"playlist {header.id!r} moved on under its lock")
        return None
    if unlocked is None:
        await _keep_checkpoint(conn, records)
    return written


def _unlocked(params: dict[str, Any], unlocked: Unlocked, records: Sequence[Record]) -> TextClause:
    """:data:`_END_UNLOCKED`'s statement for ``unlocked`` and ``records``, its parameters
    added to ``params``."""
    params["b_row"] = unlocked.row
    roles = [
        (user, role.value if role is not None else None) for user, role in unlocked.roles.items()
    ]
    keys = list(dict.fromkeys((r.log["actor_id"], r.log["operation_id"]) for r in records))
    one_actor, one_key = len(roles) == 1, len(keys) == 1
    if one_actor:
        ((params["r_user"], params["r_role"]),) = roles
    else:
        params["r_users"] = [u for u, _ in roles]
        params["r_roles"] = [r for _, r in roles]
    if one_key:
        ((params["n_actor"], params["n_operation"]),) = keys
    else:
        params["n_actors"] = [a for a, _ in keys]
        params["n_operations"] = [o for _, o in keys]
    return _END_UNLOCKED[one_actor, one_key, not unlocked.ids_read]


def keeps_checkpoint(records: Sequence[Record]) -> bool:
    """Whether writing ``records`` keeps a history checkpoint (:func:`write_records`)."""
    return bool(records) and checkpoint_due(
        records[0].playlist.version - 1, records[-1].playlist.version
    )


def _end_params(
    header: Playlist, records: Sequence[Record], added: Sequence[Entry], before: int
) -> dict[str, Any]:
    """:data:`_END_POSTGRES`' parameters: the header's columns, and the records' and the
    added entries' rows as one JSON document (``e_rows``)."""
    params = _header_params(header)
    params["e_playlist_id"] = header.id
    params["e_before"] = before
    params["e_rows"] = _document(
        {
            "records": [
                {
                    "version": r.log["version"],
                    "operation_id": r.log["operation_id"],
                    "actor_id": r.log["actor_id"],
                    "payload": r.log["payload"],
                    "request_hash": r.log["request_hash"],
                    "result": r.log["result"],
                    "committed_at": r.log["committed_at"],
                    "event": r.event["payload"],
                    "trace_context": r.event["trace_context"],
                }
                for r in records
            ],
            "added": [
                {
                    "entry_id": e.entry_id,
                    "position_key": e.position_key,
                    "media_id": e.media_id,
                    "added_by": e.added_by,
                    "added_at": e.added_at,
                }
                for e in added
            ],
        }
    )
    return params


def _document(rows: dict[str, Any]) -> str:
    """``rows`` as JSON text, times as RFC 3339 (naive ones are UTC).

    orjson's where it can (one call, ~10x ``json.dumps``); ``json.dumps``' for what
    orjson refuses (an integer past 64 bits), so nothing a payload holds today fails.
    """
    try:
        return orjson.dumps(rows, option=orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z).decode()
    except orjson.JSONEncodeError:
        return json.dumps(rows, default=_rfc3339)


def _rfc3339(value: object) -> str:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


_WRITTEN = "WHERE EXISTS (SELECT FROM header)"


def _end(unknown: str = "") -> str:
    """:data:`_END_POSTGRES`' SQL; ``unknown``: more conditions of the header's update."""
    return (
        "WITH header AS ("
        f"UPDATE playlist SET {', '.join(f'{n} = :h_{n}' for n in _HEADER_COLUMNS)} "
        f"WHERE id = :h_id AND version = :e_before{unknown} "
        "RETURNING CAST(xmin AS text) AS written"
        "), entries AS ("
        "INSERT INTO playlist_entry (playlist_id, entry_id, position_key, media_id, added_by, "
        "added_at) SELECT :e_playlist_id, a.* FROM jsonb_to_recordset("
        "CAST(:e_rows AS jsonb) -> 'added') AS a(entry_id varchar, position_key varchar, "
        f"media_id varchar, added_by varchar, added_at timestamptz) {_WRITTEN} "
        "ON CONFLICT (playlist_id, entry_id) DO UPDATE "
        "SET position_key = excluded.position_key, removed_at = NULL"
        "), log AS ("
        "INSERT INTO playlist_mutation (playlist_id, version, operation_id, actor_id, payload, "
        "request_hash, result, committed_at) "
        "SELECT :e_playlist_id, r.version, r.operation_id, r.actor_id, r.payload, "
        f"r.request_hash, r.result, r.committed_at FROM {_RECORDS} {_WRITTEN}"
        "), events AS ("
        "INSERT INTO outbox (playlist_id, version, payload, created_at, trace_context) "
        "SELECT :e_playlist_id, r.version, r.event, r.committed_at, r.trace_context "
        f"FROM {_RECORDS} {_WRITTEN} ORDER BY r.n"
        ") SELECT (SELECT written FROM header)"
    )


_RECORDS = (
    "ROWS FROM (jsonb_to_recordset(CAST(:e_rows AS jsonb) -> 'records') AS (version integer, "
    "operation_id varchar, actor_id varchar, payload jsonb, request_hash varchar, "
    "result jsonb, committed_at timestamptz, event jsonb, trace_context varchar)) "
    "WITH ORDINALITY AS r(version, operation_id, actor_id, payload, request_hash, result, "
    "committed_at, event, trace_context, n)"
)
"""The records of ``e_rows``, numbered in their order (``n``)."""


_END_POSTGRES = text(_end())
"""The header update, the added entries (:func:`_entry_upsert`), the log rows and the
outbox events as one PostgreSQL statement, if the playlist's row is still at the version
the commit was decided on (``:e_before``); its one row holds the updated row's ``xmin``
as text (``NULL``: nothing was written).

A commit's end was four round trips through SQLAlchemy, each ~0.4 ms of the
process's CPU (bench/writes.py, py-spy); this is one, of a fixed shape whatever
the group's size, so it is prepared once per connection. The rows go as one JSON
document (``e_rows``, read by ``jsonb_to_recordset``), not as an array per column:
asyncpg bound the fourteen arrays and three JSON dumps per record for ~40 µs of the
process's CPU per commit, the document costs ~5 µs (``orjson``), and PostgreSQL
spends about the same on either. The other parts write only if the header's did (data-modifying
``WITH`` parts see one snapshot and talk only through ``RETURNING``). The outbox rows
are inserted in the records' order (their ids keep the versions').

The version condition lets a commit run outside a transaction
(:mod:`chorus.db.group_commit`, "One statement"): under ``READ COMMITTED`` an
``UPDATE`` that meets a row another transaction changed waits for it, then checks
its condition on the row as that one left it, so it writes only when no commit
landed since the version was read. Inside a transaction holding the row's lock
the condition always holds.

Run on asyncpg itself (:func:`chorus.db.direct.fetch_in_transaction`): its
parameters have no bind processor of SQLAlchemy's (the JSON is dumped here)."""

_SAME_ROW = " AND CAST(xmin AS text) = :b_row"
_SAME_ROLES = {
    True: (
        " AND (SELECT m.role FROM playlist_member m WHERE m.playlist_id = :h_id "
        "AND m.user_id = :r_user) IS NOT DISTINCT FROM CAST(:r_role AS varchar)"
    ),
    False: (
        " AND NOT EXISTS (SELECT FROM unnest(CAST(:r_users AS varchar[]), "
        "CAST(:r_roles AS varchar[])) AS r(u, role) WHERE (SELECT m.role FROM "
        "playlist_member m WHERE m.playlist_id = :h_id AND m.user_id = r.u) "
        "IS DISTINCT FROM r.role)"
    ),
}
_KNOWN = {
    True: (
        " AND NOT EXISTS (SELECT FROM playlist_mutation WHERE actor_id = :n_actor "
        "AND operation_id = :n_operation) AND NOT EXISTS (SELECT FROM "
        "playlist_batch_operation WHERE actor_id = :n_actor AND operation_id = :n_operation)"
    ),
    # Each key looked up on its own by the unique index: a LATERAL subquery with LIMIT 1,
    # which the planner can neither flatten nor hash (group_commit._LOCK_AND_READ's
    # note). Written as EXISTS (...) OR EXISTS (...) over the keys, the generic plan a
    # young database gave it hashed a sequential scan of the whole log, kept while the
    # log grew: writes at 16 clients fell by half in a minute (autovacuum off).
    False: "".join(
        " AND NOT EXISTS (SELECT FROM unnest(CAST(:n_actors AS varchar[]), "
        "CAST(:n_operations AS varchar[])) AS k(a, o) CROSS JOIN LATERAL (SELECT FROM "
        f"{table} WHERE actor_id = k.a AND operation_id = k.o LIMIT 1) AS found)"
        for table in ("playlist_mutation", "playlist_batch_operation")
    ),
}
_END_UNLOCKED = {
    (one_actor, one_key, unread): text(
        _end(_SAME_ROW + _SAME_ROLES[one_actor] + (_KNOWN[one_key] if unread else ""))
    )
    for one_actor in (True, False)
    for one_key in (True, False)
    for unread in (True, False)
}
""":data:`_END_POSTGRES` for a commit decided outside a transaction (:class:`Unlocked`):
its header's update, on which every other part waits, also requires the playlist row to
be the one the commit was decided on (``b_row``, its ``xmin``: any update of the row
writes a new one) and every deciding actor's member row (``r_``) to be as it was, and,
when the records' operation ids were not read, none of them to be committed (``n_``). A
change made without a new version, by SQL or by anything else (retention's log floor
too), is not overwritten: the commit is decided again. One parameter for the row, not
one per column (each is bound and compared at every commit). By whether the group has
one actor, and one operation id (plain parameters, whose generic plan is kept:
group_commit._AFTER_LOCK's note) or several (arrays, each looked up by its index), and
whether the operation ids are checked."""


async def write_batch_members(
    conn: AsyncConnection, playlist_id: str, members: Sequence[tuple[str, str, int]]
) -> None:
    """Keep the operation ids of atomic batches after their first, each beside its batch's
    log row: ``(actor id, operation id, version)`` (``playlist_batch_operation``).

    Raises:
        sqlalchemy.exc.IntegrityError: one was kept already (a concurrent batch).
    """
    await conn.execute(
        insert(playlist_batch_operation),
        [
            {"actor_id": a, "operation_id": o, "playlist_id": playlist_id, "version": v}
            for a, o, v in members
        ],
    )


def record(
    decision: Decision,
    *,
    operation_id: str,
    actor_id: str,
    request_hash: str,
    trace_context: str | None = None,
) -> Record:
    """The log row and outbox event of ``decision``; the changes are encoded once for both.

    ``trace_context``: the committing request's ``traceparent`` (:mod:`chorus.tracing`),
    kept with the outbox event; ``None`` when it was not traced.
    """
    p = decision.playlist
    now = p.updated_at
    wires = [encode_change(c) for c in decision.changes]
    log = {
        "playlist_id": p.id,
        "version": p.version,
        "operation_id": operation_id,
        "actor_id": actor_id,
        "payload": {"v": WIRE_VERSION, "changes": wires},
        "request_hash": request_hash,
        "result": outcome_to_json(decision.outcome),
        "committed_at": now,
    }
    event: PlaylistEvent = {
        "v": WIRE_VERSION,
        "type": "PlaylistChanged",
        "playlist_id": p.id,
        "version": p.version,
        "operation_id": operation_id,
        "actor_id": actor_id,
        "committed_at": now.isoformat(),
        "changes": wires,
    }
    row = {
        "playlist_id": p.id,
        "version": p.version,
        "payload": event,
        "created_at": now,
        "trace_context": trace_context,  # the relay's and consumers' spans link to it
    }
    return Record(log, row, p)


async def write_records(conn: AsyncConnection, records: Sequence[Record]) -> None:
    """Append the log rows, then the outbox events, of ``records`` (in version order).

    One ``INSERT`` per table however many records (SQLAlchemy's
    "insertmanyvalues"), so the outbox's ids keep the versions' order. When
    the records reach a checkpoint's version (:func:`chorus.domain.version_history.checkpoint_due`),
    the entry rows, which are at the last record's version, are kept as one.

    Raises:
        sqlalchemy.exc.IntegrityError: an operation id was committed
            concurrently by the same actor.
    """
    if not records:
        return
    await conn.execute(insert(playlist_mutation), [r.log for r in records])
    await conn.execute(insert(outbox), [r.event for r in records])
    await _keep_checkpoint(conn, records)


async def _keep_checkpoint(conn: AsyncConnection, records: Sequence[Record]) -> None:
    """Keep a history checkpoint if ``records`` reach a checkpoint's version."""
    if keeps_checkpoint(records):
        await checkpoints.keep(conn, records[-1].playlist)


async def _write_member(conn: AsyncConnection, p: Playlist, change: MembersChanged) -> None:
    key = (playlist_member.c.playlist_id == p.id, playlist_member.c.user_id == change.user_id)
    await conn.execute(delete(playlist_member).where(*key))
    if change.role is not None:
        await conn.execute(
            insert(playlist_member).values(
                playlist_id=p.id,
                user_id=change.user_id,
                role=change.role.value,
                membership_epoch=p.membership_epoch,
            )
        )
