"""Group commit through the owner queue against the one-command path (differential).

Property: whatever the interleaving of concurrent commands through a
playlist's owner queue (which of them arrive together, so how the groups
fall), every command gets the answer, and the playlist the log, that the
plain path (``group_commit=False``, one transaction per command) gives when
the same commands are applied one by one in the order the owner committed
them. The commands include refusals (stale strict, unknown anchor, a
non-member), duplicates of an earlier command and reused operation ids, so
some groups hold a duplicate or a reuse of one of their own members.

Both runs use their own database of the same backend (SQLite and PostgreSQL),
the same clock and the same id sequence, so entry ids and times match too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from chorus.db.engine import Database
from chorus.db.store import Committed, PlaylistStore
from chorus.db.tables import outbox, playlist_entry, playlist_mutation
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    MoveEntries,
    Placement,
    PlaylistCommand,
    RemoveEntries,
    RemoveMember,
    RevertPlaylist,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.errors import DomainError, ErrorCode, RateLimited
from chorus.domain.model import Role

ALICE, BOB, MALLORY = "alice", "bob", "mallory"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SEEDS = 3
"""Entries every example's playlist starts with (e0, e1, e2), at version 2."""


@dataclass(frozen=True)
class Sent:
    """One command as a client sends it: who, and the command (``playlist_id`` filled later)."""

    actor: str
    command: PlaylistCommand


def _commands() -> st.SearchStrategy[list[Sent]]:
    """Commands against a seeded playlist, with duplicates and reused operation ids."""
    entry = st.sampled_from([f"e{i}" for i in range(SEEDS)])
    anchor = st.one_of(st.none(), entry, st.just("never-there"))
    placement = st.builds(Placement, after=anchor)
    base = st.integers(0, 2)
    strict = st.booleans()
    actor = st.sampled_from([ALICE, ALICE, BOB, MALLORY])
    op = st.integers(0, 10_000).map(lambda n: f"op-{n}")
    media = st.lists(st.sampled_from(["m1", "m2", "m3"]), min_size=1, max_size=2).map(tuple)
    targets = st.lists(entry, min_size=1, max_size=2, unique=True).map(tuple)
    common = {"playlist_id": st.just(""), "operation_id": op, "base_version": base}
    command = st.one_of(
        st.builds(AddEntries, **common, media_ids=media, placement=placement, strict=strict),
        st.builds(MoveEntries, **common, entry_ids=targets, placement=placement, strict=strict),
        st.builds(RemoveEntries, **common, entry_ids=targets, strict=strict),
        st.builds(UpdatePlaylist, **common, title=st.sampled_from(["A", "B"]), strict=strict),
        st.builds(
            SetMemberRole,
            **common,
            user_id=st.just(BOB),
            role=st.sampled_from([Role.EDITOR, Role.VIEWER]),
            strict=strict,
        ),
        st.builds(RemoveMember, **common, user_id=st.just(BOB), strict=strict),
        st.builds(RevertPlaylist, **common, to_version=st.integers(0, 3), strict=strict),
    )
    sent = st.builds(Sent, actor, command)

    @st.composite
    def with_repeats(draw: st.DrawFn) -> list[Sent]:
        out: list[Sent] = []
        for _ in range(draw(st.integers(1, 12))):
            kind = draw(st.sampled_from(["new", "new", "duplicate", "reuse"])) if out else "new"
            if kind == "new":
                out.append(draw(sent))
                continue
            earlier = draw(st.sampled_from(out))
            if kind == "duplicate":
                out.append(earlier)
            else:  # the same actor and operation id, another request
                other = draw(sent)
                reused = _with(other.command, operation_id=earlier.command.operation_id)
                out.append(Sent(earlier.actor, reused))
        return out

    return with_repeats()


def _with(command: PlaylistCommand, **fields: Any) -> PlaylistCommand:
    import dataclasses

    return dataclasses.replace(command, **fields)


def _on(pid: str, seeded: dict[str, str], title: str, command: PlaylistCommand) -> PlaylistCommand:
    """``command`` on the seeded playlist: its id, seed names (e0…) mapped to its entry
    ids, operation ids made the example's own."""
    fields: dict[str, Any] = {
        "playlist_id": pid,
        "operation_id": f"{title}-{command.operation_id}",
    }
    if isinstance(command, MoveEntries | RemoveEntries):
        fields["entry_ids"] = tuple(seeded.get(e, e) for e in command.entry_ids)
    if isinstance(command, AddEntries | MoveEntries):
        after = command.placement.after
        fields["placement"] = Placement(after=seeded.get(after, after) if after else None)
    return _with(command, **fields)


Answer = tuple[str, Any]


def _answer(result: Committed | BaseException) -> Answer:
    if isinstance(result, DomainError):
        return ("error", (result.code, result.message, result.field))
    if isinstance(result, BaseException):
        raise result
    return ("committed", (result.outcome, result.replayed))


@asynccontextmanager
async def _store(url: str, title: str, **options: Any) -> AsyncIterator[PlaylistStore]:
    db = Database(url)
    ids = (f"{title}-id-{n:04d}" for n in itertools.count())
    try:
        yield PlaylistStore(db, clock=lambda: NOW, id_factory=lambda: next(ids), **options)
    finally:
        await db.dispose()


async def _seeded(store: PlaylistStore, title: str) -> tuple[str, dict[str, str]]:
    """A collaborative playlist of Alice's, Bob its editor, entries e0–e2.

    Returns:
        its id, and each seed name's entry id.
    """
    created = await store.create(
        CreatePlaylist(f"create-{title}", title, collaborative=True), ALICE
    )
    pid = created.outcome.playlist_id
    added = await store.execute(
        AddEntries(pid, f"seed-{title}", 0, tuple(f"s{i}" for i in range(SEEDS))), ALICE
    )
    await store.execute(SetMemberRole(pid, f"bob-{title}", 1, user_id=BOB, role=Role.EDITOR), ALICE)
    seeded = {f"e{i}": e.entry_id for i, e in enumerate(added.outcome.entries)}
    return pid, seeded


async def _log(database: Database, playlist_id: str) -> list[tuple[Any, ...]]:
    async with database.read() as conn:
        rows = await conn.execute(
            select(playlist_mutation)
            .where(playlist_mutation.c.playlist_id == playlist_id)
            .order_by(playlist_mutation.c.version)
        )
        log = [
            (r.version, r.operation_id, r.actor_id, r.payload, r.request_hash, r.result)
            for r in rows
        ]
        events = await conn.execute(
            select(outbox.c.version, outbox.c.payload)
            .where(outbox.c.playlist_id == playlist_id)
            .order_by(outbox.c.event_id)
        )
        # The outbox holds one event per version, in version order.
        assert [(e.version, e.payload["version"]) for e in events] == [(v[0], v[0]) for v in log]
    return log


async def _rows(database: Database, playlist_id: str) -> list[tuple[Any, ...]]:
    """Every entry row of the playlist, tombstones too, by entry id."""
    async with database.read() as conn:
        rows = await conn.execute(
            select(playlist_entry)
            .where(playlist_entry.c.playlist_id == playlist_id)
            .order_by(playlist_entry.c.entry_id)
        )
        return [tuple(r) for r in rows]


async def _grouped(
    url: str, title: str, sent: Sequence[Sent], pauses: Sequence[bool], max_group: int
) -> tuple[list[Answer], list[Sent], list[tuple[Any, ...]], list[int], list[tuple[Any, ...]]]:
    """Send every command concurrently through the owner queue.

    Returns:
        the answers and the commands in the order the owner committed them, the
        log, the size of each group, and the entry rows at the end.
    """
    async with _store(url, title, max_group=max_group) as store:
        pid, seeded = await _seeded(store, title)
        assert store.owners is not None
        real_commit = store.owners._commit
        order: list[PlaylistCommand] = []
        sizes: list[int] = []

        async def recording(playlist_id: str, group: Sequence[Any]) -> Any:
            order.extend(c.command for c in group)
            sizes.append(len(group))
            return await real_commit(playlist_id, group)

        store.owners._commit = recording
        commands = [Sent(s.actor, _on(pid, seeded, title, s.command)) for s in sent]

        async def send(s: Sent) -> Committed | BaseException:
            try:
                return await store.execute(s.command, s.actor)
            except DomainError as error:
                return error

        tasks = []
        for s, pause in zip(commands, pauses, strict=False):
            tasks.append(asyncio.create_task(send(s)))
            if pause:  # let the owner take what arrived so far: the next group starts here
                await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
        answers = {id(s): _answer(r) for s, r in zip(commands, results, strict=True)}
        # The committed order, as the owner took the commands (each task's own object).
        by_command = {id(s.command): s for s in commands}
        committed_order = [by_command[id(c)] for c in order]
        assert sorted(map(id, committed_order)) == sorted(id(s) for s in commands)
        return (
            [answers[id(s)] for s in committed_order],
            committed_order,
            await _log(store.db, pid),
            sizes,
            await _rows(store.db, pid),
        )


async def _one_by_one(
    url: str, title: str, in_order: Sequence[Sent]
) -> tuple[list[Answer], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    async with _store(url, title, group_commit=False) as store:
        pid, _ = await _seeded(store, title)
        # The same clock and ids: the twin's playlist has the grouped run's ids.
        assert all(s.command.playlist_id == pid for s in in_order)
        answers = []
        for s in in_order:
            try:
                answers.append(_answer(await store.execute(s.command, s.actor)))
            except DomainError as error:
                answers.append(_answer(error))
        return answers, await _log(store.db, pid), await _rows(store.db, pid)


EXAMPLES = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sent=_commands(),
    # A pause after a command lets the owner take what arrived: a group ends there.
    pauses=st.lists(st.integers(0, 3).map(lambda n: n == 0), min_size=12, max_size=12),
    max_group=st.sampled_from([1, 2, 3, 64]),
)
def test_any_interleaving_commits_as_one_by_one_in_the_committed_order(
    database_url: str, twin_url: str, sent: list[Sent], pauses: list[bool], max_group: int
) -> None:
    title = f"t{next(EXAMPLES)}"

    async def run() -> None:
        answers, order, log, _, rows = await _grouped(database_url, title, sent, pauses, max_group)
        await _same_as_one_by_one(twin_url, title, answers, order, log, rows)

    asyncio.run(run())


async def _same_as_one_by_one(
    twin_url: str,
    title: str,
    answers: list[Answer],
    order: list[Sent],
    log: list[Any],
    rows: list[Any],
) -> None:
    # The twin replays the committed order, command objects already on the playlist's ids.
    plain_answers, plain_log, plain_rows = await _one_by_one(twin_url, title, order)
    assert answers == plain_answers
    assert log == plain_log
    # The entry rows too (a group writes a run of appends' rows later, at once).
    assert rows == plain_rows
    # Versions are contiguous: one per committed, non-replayed command.
    fresh = sum(1 for kind, value in answers if kind == "committed" and not value[1])
    assert [row[0] for row in log] == list(range(3 + fresh))


def test_one_group_decides_each_command_on_what_the_previous_left(
    database_url: str, twin_url: str
) -> None:
    """All in one group, taken one per user in turn: an editor's add, a demotion, then the
    demoted editor's add (FORBIDDEN); an add, its duplicate (replayed) and a reuse of its id
    (OPERATION_ID_REUSED); a revert after the group's own versions; a stale strict
    command; an unknown anchor; a non-member."""
    add = AddEntries("", "add", 2, ("m1",), Placement(after="e1"))
    sent = [
        Sent(BOB, AddEntries("", "bob-add", 2, ("m3",))),
        Sent(ALICE, SetMemberRole("", "demote", 2, user_id=BOB, role=Role.VIEWER)),
        Sent(MALLORY, RemoveEntries("", "mallory", 2, ("e2",))),
        Sent(BOB, AddEntries("", "bob-add-2", 2, ("m4",))),
        Sent(ALICE, add),
        Sent(ALICE, add),
        Sent(ALICE, _with(add, media_ids=("m2",))),
        Sent(ALICE, RemoveEntries("", "remove", 0, ("e0",))),
        Sent(ALICE, RevertPlaylist("", "revert", 3, to_version=4)),
        Sent(ALICE, UpdatePlaylist("", "strict", 2, title="late", strict=True)),
        Sent(ALICE, MoveEntries("", "move", 1, ("e2",), Placement(after="never-there"))),
        Sent(ALICE, add),
    ]

    async def run() -> None:
        answers, order, log, sizes, rows = await _grouped(
            database_url, "one-group", sent, [False] * len(sent), 64
        )
        assert sizes == [len(sent)]
        # Round robin: Bob's first, Alice's, Mallory's, Bob's second, then Alice's.
        assert [s.command.operation_id for s in order] == [
            f"one-group-{s.command.operation_id}" for s in sent
        ]
        outcomes = [
            value[0] if kind == "error" else ("replayed" if value[1] else value[0].version)
            for kind, value in answers
        ]
        assert outcomes == [
            3,
            4,
            ErrorCode.NOT_FOUND,
            ErrorCode.FORBIDDEN,
            5,
            "replayed",
            ErrorCode.OPERATION_ID_REUSED,
            6,
            7,
            ErrorCode.VERSION_CONFLICT,
            ErrorCode.ANCHOR_NOT_FOUND,
            "replayed",
        ]
        await _same_as_one_by_one(twin_url, "one-group", answers, order, log, rows)

    asyncio.run(run())


async def test_a_retry_of_a_commit_is_answered_when_the_owner_queue_is_full(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second fresh user: with the user's share of the queue full, retries of edits
    # that had committed were refused RATE_LIMITED; a retry needs no place in it.
    store = PlaylistStore(database)
    made = await store.create(CreatePlaylist("c-full", "Queue"), "alice")
    pid = made.outcome.playlist_id
    first = await store.execute(AddEntries(pid, "a-full", 0, ("m1",)), "alice")
    assert store.owners is not None

    async def full(*_args: object) -> object:
        raise RateLimited("20 of your commands wait for this playlist", retry_after_ms=100)

    monkeypatch.setattr(store.owners, "submit", full)
    again = await store.execute(AddEntries(pid, "a-full", 0, ("m1",)), "alice")
    assert again.replayed
    assert again.outcome == first.outcome
    with pytest.raises(RateLimited):  # a new edit still finds the queue full
        await store.execute(AddEntries(pid, "b-full", 1, ("m2",)), "alice")
    with pytest.raises(DomainError) as reused:  # and an id reused for other input says so
        await store.execute(AddEntries(pid, "a-full", 0, ("m9",)), "alice")
    assert reused.value.code is ErrorCode.OPERATION_ID_REUSED
