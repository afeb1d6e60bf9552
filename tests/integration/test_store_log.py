"""The mutation log and the outbox: one row each per version, canonical, foldable into the list.

Runs on SQLite and PostgreSQL alike (the ``store``/``database`` fixtures).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import repository, writer
from chorus.db.compaction import compact
from chorus.db.engine import Database
from chorus.db.store import Committed, PlaylistStore
from chorus.db.tables import outbox, playlist_mutation
from chorus.domain.changes import Change, decode_change
from chorus.domain.commands import AddEntries, RevertPlaylist
from chorus.domain.decisions import Decision
from chorus.domain.errors import InvalidInput
from tests.integration.store_helpers import (
    ALICE,
    fold_log,
    header,
    live_rows,
    new_playlist,
    random_history,
)


async def test_each_version_is_one_log_row_and_one_outbox_event(
    store: PlaylistStore, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    decided: dict[tuple[str, int], tuple[Change, ...]] = {}
    real_write = writer.write_decision

    async def spy(conn: AsyncConnection, decision: Decision, **kwargs: Any) -> None:
        await real_write(conn, decision, **kwargs)
        decided[decision.playlist.id, decision.outcome.version] = decision.changes

    monkeypatch.setattr(writer, "write_decision", spy)
    ed = await new_playlist(store)
    await random_history(ed, database, random.Random(7), 40)

    async with database.read() as conn:
        log = {
            r.version: r
            for r in await conn.execute(
                select(playlist_mutation).where(playlist_mutation.c.playlist_id == ed.playlist_id)
            )
        }
        events = (
            await conn.execute(select(outbox).where(outbox.c.playlist_id == ed.playlist_id))
        ).all()
    # Exactly one log row and one outbox event per version.
    assert sorted(log) == list(range(41))
    assert sorted(e.version for e in events) == list(range(41))
    for version, row in log.items():
        # The log keeps the canonical changes exactly as decided.
        assert (
            tuple(decode_change(w) for w in row.payload["changes"])
            == decided[ed.playlist_id, version]
        )
        if version:
            assert row.operation_id == ed.ops[version - 1]
    await fold_log(database, ed.playlist_id)


async def test_entries_at_every_version(store: PlaylistStore, database: Database) -> None:
    ed = await new_playlist(store)
    snapshots = await random_history(ed, database, random.Random(11), 30)
    async with database.read() as conn:
        for version, expected in snapshots.items():
            assert await repository.entries_at(conn, ed.playlist_id, version) == expected, version
        since = await repository.versions_since(conn, ed.playlist_id, 25)
    assert since is not None
    assert [v.version for v in since] == [26, 27, 28, 29, 30]
    assert [v.operation_id for v in since] == ed.ops[25:]


async def test_compaction_sets_the_retention_floor(
    store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(store)
    first = ed.command(AddEntries, media_ids=("first",))
    first_result = await store.execute(first, ALICE)
    ed.version = 1
    snapshots = await random_history(ed, database, random.Random(11), 29)
    pid = ed.playlist_id
    # Keep versions 20…30; the rows below stay for retries within the retry window.
    report = await compact(database, keep_versions=11, now=datetime.now(UTC))
    assert (report.playlists, report.log_rows_deleted) == (1, 0)
    async with database.read() as conn:
        assert await repository.log_floor(conn, pid) == 20
        assert await repository.versions_since(conn, pid, 18) is None
        assert await repository.entries_at(conn, pid, 18) is None
        kept = await repository.versions_since(conn, pid, 19)
        assert kept is not None
        assert [v.version for v in kept] == list(range(20, 31))
        for version in range(19, 31):
            assert await repository.entries_at(conn, pid, version) == snapshots[version]
    assert await store.execute(first, ALICE) == Committed(first_result.outcome, replayed=True)
    with pytest.raises(InvalidInput) as error:
        await ed.run(RevertPlaylist, to_version=10)
    assert error.value.field == ("toVersion",)
    await ed.run(RevertPlaylist, to_version=19)
    assert await live_rows(database, pid) == snapshots[19]


async def test_compaction_drops_rows_kept_for_retries_once_the_window_passed(
    store: PlaylistStore, database: Database
) -> None:
    """Rows below the floor are kept for the retry window only, then deleted.

    Fails: ``compact`` skips a playlist whose floor does not move, so on a
    playlist with no new versions since, rows kept for the retry window stay
    for good.
    """
    ed = await new_playlist(store)
    await random_history(ed, database, random.Random(5), 10)
    now = datetime.now(UTC)
    await compact(database, keep_versions=3, now=now)  # floor 8; rows 0…7 kept for retries
    report = await compact(database, keep_versions=3, now=now + timedelta(days=2))
    async with database.read() as conn:
        below_floor = await conn.scalar(
            select(func.count()).where(
                playlist_mutation.c.playlist_id == ed.playlist_id,
                playlist_mutation.c.version < 8,
            )
        )
    assert below_floor == 0
    assert report.log_rows_deleted == 8


async def test_log_rows_deleted_by_hand_are_not_served_with_a_gap(
    store: PlaylistStore, database: Database
) -> None:
    """Old log rows deleted outside ``compact`` (by hand, a script) must not leave a gap.

    Fails: since the floor became ``playlist.log_floor``, ``versions_since``
    trusts the column and returns versions 20…30 for "after 18", silently
    missing 19; a subscriber repairing a gap would apply them on top of 18.
    """
    ed = await new_playlist(store)
    snapshots = await random_history(ed, database, random.Random(11), 30)
    pid = ed.playlist_id
    async with database.write() as conn:
        await conn.execute(
            delete(playlist_mutation).where(
                playlist_mutation.c.playlist_id == pid, playlist_mutation.c.version < 20
            )
        )
    async with database.read() as conn:
        kept = await repository.versions_since(conn, pid, 19)
        assert kept is not None
        assert [v.version for v in kept] == list(range(20, 31))
        assert await repository.entries_at(conn, pid, 19) == snapshots[19]
        assert await repository.versions_since(conn, pid, 18) is None
        assert await repository.entries_at(conn, pid, 18) is None


async def test_timestamps_keep_their_instant(database: Database) -> None:
    """An aware timestamp reads back as the same instant, whatever its zone.

    Fails on SQLite: ``UTCDateTime`` stores the wall-clock time of a non-UTC
    datetime and reads it back as UTC, two hours off here; PostgreSQL's
    ``timestamptz`` converts.
    """
    plus_two = timezone(timedelta(hours=2))
    store = PlaylistStore(database, clock=lambda: datetime.now(plus_two))
    ed = await new_playlist(store)
    (added,) = (await ed.add("m1")).entries
    (row,) = await live_rows(database, ed.playlist_id)
    assert row.added_at == added.added_at
    async with database.read() as conn:
        committed = await conn.scalar(
            select(playlist_mutation.c.committed_at).where(
                playlist_mutation.c.playlist_id == ed.playlist_id,
                playlist_mutation.c.version == 1,
            )
        )
    assert committed == added.added_at
    assert (await header(database, ed.playlist_id)).updated_at == added.added_at
