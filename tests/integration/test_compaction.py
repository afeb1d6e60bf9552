"""Retention on both databases: ``chorus.db.compaction.compact`` and ``chorus compact``.

Commits are stamped by a controllable clock, so "old" means old without
waiting: the log keeps the last N versions (or those younger than an age),
operation-id records stay replayable within the retry window, old tombstones
and published outbox rows go.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from chorus.db import repository
from chorus.db.compaction import CompactionReport, compact
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox, playlist_entry, playlist_mutation
from chorus.domain.commands import AddEntries, CreatePlaylist, Placement, RemoveEntries
from chorus.domain.errors import AnchorNotFound, OperationIdReused
from chorus.events.relay import OutboxRelay
from chorus.subscriptions.bus import BusPublisher, InProcessBus
from tests.switches import child_environ

T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
ALICE = "alice"


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


class Log:
    """One playlist whose commits are stamped by ``clock``; remembers every command."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self.store = PlaylistStore(db, clock=clock)
        self.commands: dict[int, AddEntries | RemoveEntries] = {}
        self.playlist_id = ""
        self.version = 0
        self._ops = 0

    def op(self) -> str:
        self._ops += 1
        return f"op-{self._ops}-{uuid.uuid4().hex[:8]}"

    async def create(self) -> str:
        created = await self.store.create(CreatePlaylist(self.op(), "Mix"), ALICE)
        self.playlist_id = created.outcome.playlist_id
        return self.playlist_id

    async def commit(self, command: AddEntries | RemoveEntries) -> Any:
        committed = await self.store.execute(command, ALICE)
        assert not committed.replayed
        self.version = committed.outcome.version
        self.commands[self.version] = command
        return committed.outcome

    async def add(self, *media: str, after: str | None = None) -> Any:
        media = media or (f"m{self._ops}",)
        return await self.commit(
            AddEntries(self.playlist_id, self.op(), self.version, media, Placement(after=after))
        )

    async def adds(self, count: int, *, step: timedelta = timedelta(0)) -> None:
        for _ in range(count):
            await self.add()
            self.clock.now += step

    async def remove(self, *entry_ids: str) -> Any:
        return await self.commit(
            RemoveEntries(self.playlist_id, self.op(), self.version, entry_ids)
        )

    async def floor(self) -> int | None:
        async with self.db.read() as conn:
            return await repository.log_floor(conn, self.playlist_id)

    async def logged(self, since: int) -> list[int] | None:
        async with self.db.read() as conn:
            log = await repository.versions_since(conn, self.playlist_id, since)
        return None if log is None else [v.version for v in log]

    async def count(self, table: Any, *where: Any) -> int:
        async with self.db.read() as conn:
            return int(await conn.scalar(select(func.count()).select_from(table).where(*where)))

    async def log_rows(self) -> list[int]:
        async with self.db.read() as conn:
            rows = await conn.scalars(
                select(playlist_mutation.c.version)
                .where(playlist_mutation.c.playlist_id == self.playlist_id)
                .order_by(playlist_mutation.c.version)
            )
            return list(rows)


async def test_compaction_keeps_the_last_n_versions(database: Database) -> None:
    log = Log(database, Clock(T0 - timedelta(hours=48)))
    await log.create()
    await log.adds(30)
    small = Log(database, log.clock)
    await small.create()
    await small.adds(5)
    report = await compact(database, keep_versions=10, now=T0)
    # Versions 0…20 of the first playlist go (all older than the retry
    # window); the second playlist has fewer than 10 versions and is untouched.
    assert report == CompactionReport(
        playlists=1, log_rows_deleted=21, tombstones_deleted=0, outbox_rows_deleted=0
    )
    assert await log.floor() == 21
    assert await log.log_rows() == list(range(21, 31))
    assert await log.logged(20) == list(range(21, 31))
    assert await log.logged(19) is None
    assert await small.floor() == 0
    assert await small.logged(0) == [1, 2, 3, 4, 5]
    # The list itself is untouched and keeps taking commits.
    assert await log.count(playlist_entry, playlist_entry.c.playlist_id == log.playlist_id) == 30
    await log.add()
    assert await log.logged(20) == list(range(21, 32))
    # Running it again moves nothing.
    again = await compact(database, keep_versions=10, now=T0)
    assert again.playlists == 1  # the new version moved the floor to 22
    assert await log.floor() == 22
    assert await compact(database, keep_versions=10, now=T0) == CompactionReport(0, 0, 0, 0)


async def _thirty_versions(database: Database, hours_before: float) -> Log:
    """A playlist created and given 10 adds ``hours_before`` T0, then 20 adds an hour before it."""
    clock = Clock(T0 - timedelta(hours=hours_before))
    log = Log(database, clock)
    await log.create()
    await log.adds(10)
    clock.now = T0 - timedelta(hours=1)
    await log.adds(20)
    return log


async def test_operation_ids_within_the_retry_window_still_replay(database: Database) -> None:
    log = await _thirty_versions(database, hours_before=48)
    first_outcomes = {}
    for version in (15, 27):
        async with database.read() as conn:
            first_outcomes[version] = await conn.scalar(
                select(playlist_mutation.c.result).where(
                    playlist_mutation.c.playlist_id == log.playlist_id,
                    playlist_mutation.c.version == version,
                )
            )
    report = await compact(database, keep_versions=5, retry_window=timedelta(hours=24), now=T0)
    # Floor 26; rows 0…10 are past the retry window and go, 11…25 stay as
    # operation-id records only: their changes are no longer served.
    assert report.log_rows_deleted == 11
    assert await log.floor() == 26
    assert await log.log_rows() == list(range(11, 31))
    assert await log.logged(15) is None
    assert await log.logged(25) == list(range(26, 31))
    outbox_rows = await log.count(outbox)
    for version in (15, 27):
        retried = await log.store.execute(log.commands[version], ALICE)
        assert retried.replayed
        assert retried.outcome.version == version
        assert [e.entry_id for e in retried.outcome.entries] == [
            e["entry_id"] for e in first_outcomes[version]["entries"]
        ]
    # Nothing committed: same head, same log, same outbox.
    async with database.read() as conn:
        header = await repository.get_playlist(conn, log.playlist_id)
    assert header is not None
    assert header.version == 30
    assert await log.log_rows() == list(range(11, 31))
    assert await log.count(outbox) == outbox_rows
    # The record still tells a reused id from a retry.
    reused = AddEntries(log.playlist_id, log.commands[15].operation_id, 30, ("other",))
    with pytest.raises(OperationIdReused):
        await log.store.execute(reused, ALICE)


async def test_records_kept_for_retries_go_once_past_the_retry_window(database: Database) -> None:
    log = await _thirty_versions(database, hours_before=20)
    first = await compact(database, keep_versions=5, now=T0)
    assert (first.playlists, first.log_rows_deleted) == (1, 0)  # all within 24 h
    assert await log.floor() == 26
    # Five hours later the floor does not move, but versions 0…10 are now
    # more than 24 h old: their operation-id records go.
    later = await compact(database, keep_versions=5, now=T0 + timedelta(hours=5))
    assert later.log_rows_deleted == 11
    assert await log.floor() == 26
    assert await log.log_rows() == list(range(11, 31))


async def test_old_tombstones_are_deleted_and_recent_ones_kept(database: Database) -> None:
    clock = Clock(T0 - timedelta(hours=48))
    log = Log(database, clock)
    await log.create()
    added = await log.add("a", "b", "c")
    gone, kept, live = (e.entry_id for e in added.entries)
    clock.now += timedelta(minutes=1)
    await log.remove(gone)  # version 2: long before the floor
    clock.now += timedelta(minutes=1)
    await log.adds(20, step=timedelta(minutes=1))
    await log.remove(kept)  # version 23: after the floor
    report = await compact(database, keep_versions=5, now=T0)
    assert await log.floor() == 19
    assert report.tombstones_deleted == 1
    async with database.read() as conn:
        rows = await repository.get_entries(conn, log.playlist_id, [gone, kept, live])
    assert set(rows) == {kept, live}
    assert rows[kept].removed_at is not None
    # A stale anchor on the deleted tombstone no longer resolves; one on the
    # kept tombstone still lands where it stood.
    with pytest.raises(AnchorNotFound):
        await log.add("x", after=gone)
    placed = await log.add("y", after=kept)
    async with database.read() as conn:
        order = [e.entry_id for e in await repository.entries_page(conn, log.playlist_id, limit=99)]
    assert order[:2] == [placed.entries[0].entry_id, live]


async def test_published_outbox_rows_older_than_the_retry_window_are_pruned(
    database: Database,
) -> None:
    clock = Clock(T0 - timedelta(hours=50))
    log = Log(database, clock)
    relay_clock = Clock(T0 - timedelta(hours=48))
    relay = OutboxRelay(database, BusPublisher(InProcessBus()), clock=relay_clock)
    await log.create()
    await log.adds(3)
    assert await relay.drain_once() == 4  # versions 0…3, published 48 h ago
    await log.adds(3)
    relay_clock.now = T0 - timedelta(hours=1)
    assert await relay.drain_once() == 3  # versions 4…6, published an hour ago
    await log.adds(2)  # versions 7, 8: not published yet
    report = await compact(database, keep_versions=100, retry_window=timedelta(hours=24), now=T0)
    assert report.outbox_rows_deleted == 4
    async with database.read() as conn:
        left = list(await conn.scalars(select(outbox.c.version).order_by(outbox.c.version)))
    assert left == [4, 5, 6, 7, 8]
    assert await relay.drain_once() == 2


async def test_keep_age_keeps_versions_younger_than_the_age(database: Database) -> None:
    clock = Clock(T0 - timedelta(hours=30))
    log = Log(database, clock)
    await log.create()
    clock.now += timedelta(hours=1)
    await log.adds(30, step=timedelta(hours=1))  # version k committed at T0 - (30 - k) h
    window = timedelta(minutes=1)
    age = timedelta(hours=5, minutes=30)  # versions 25…30
    # Both rules: a version stays when either keeps it (the last 10 is more).
    await compact(database, keep_versions=10, keep_age=age, retry_window=window, now=T0)
    assert await log.floor() == 21
    assert (await compact(database, keep_versions=None, keep_age=age, now=T0)).playlists == 1
    assert await log.floor() == 25
    assert await log.logged(24) == [25, 26, 27, 28, 29, 30]
    # The age keeps more than the last 2 here: nothing moves.
    assert (await compact(database, keep_versions=2, keep_age=age, now=T0)).playlists == 0
    # Only the head is younger than a second: the floor stops there.
    await compact(database, keep_versions=None, keep_age=timedelta(seconds=1), now=T0)
    assert await log.floor() == 30
    assert await log.logged(29) == [30]
    assert await log.logged(30) == []


async def test_compaction_needs_a_rule(database: Database) -> None:
    with pytest.raises(ValueError, match="keep_versions"):
        await compact(database, keep_versions=None, now=T0)
    with pytest.raises(ValueError, match="at least 1"):
        await compact(database, keep_versions=0, now=T0)


# --- the command line -----------------------------------------------------------------


def chorus(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = child_environ()
    return subprocess.run(
        [sys.executable, "-m", "chorus.cli", *args],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_chorus_compact_prints_its_report(database: Database, database_url: str) -> None:
    log = Log(database, Clock(datetime.now(UTC) - timedelta(days=3)))
    await log.create()
    await log.adds(12)
    # The commits are three days old: past the default 24 h retry window.
    done = chorus("compact", "--keep-versions", "5", CHORUS_DATABASE_URL=database_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "compacted 1 playlists: 8 log rows, 0 tombstones, 0 outbox rows, "
        "0 feed rows past CHORUS_FEED_RETENTION_DAYS deleted"
    )
    assert await log.floor() == 8
    assert await log.log_rows() == [8, 9, 10, 11, 12]
    again = chorus("compact", "--keep-days", "1", CHORUS_DATABASE_URL=database_url)
    assert again.returncode == 0, again.stderr
    assert await log.floor() == 12  # nothing younger than a day: the head stays


@pytest.mark.parametrize(
    "args",
    [
        ["compact", "--keep-versions", "0"],
        ["compact", "--keep-versions", "x"],
        ["compact", "--keep-days", "-1"],
        ["compact", "--keep-days", "soon"],
        ["compact", "--keep-days", "inf"],
        ["compact", "--keep-days", "nan"],
        ["compact", "--keep-days", "1e9"],  # timedelta overflowed: a traceback
        ["compact", "--keep-everything"],
    ],
)
def test_chorus_compact_with_bad_arguments_exits_2(args: list[str], tmp_path: Any) -> None:
    done = chorus(*args, CHORUS_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.strip()


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["compact"], {}, id="no-rule"),
        pytest.param(
            ["compact", "--keep-versions", "3"],
            {"CHORUS_DATABASE_URL": "not a url"},
            id="bad-settings",
        ),
        pytest.param(["compact"], {"CHORUS_LOG_KEEP_DAYS": "inf"}, id="keep-days-inf"),
        pytest.param(["compact"], {"CHORUS_LOG_KEEP_DAYS": "800000"}, id="keep-days-huge"),
    ],
)
def test_chorus_compact_without_a_rule_or_with_bad_settings_exits_2(
    args: list[str], env: dict[str, str], tmp_path: Any
) -> None:
    # cli.py's docstring: "Bad settings or arguments exit with status 2 and a
    # one-line message, never a traceback."
    env = {"CHORUS_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", **env}
    done = chorus(*args, **env)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
