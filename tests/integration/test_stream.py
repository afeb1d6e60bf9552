"""The subscription stream in process, on both databases (DESIGN §6).

Real parts only: :class:`PlaylistStore` commits, the :class:`OutboxRelay`
publishes the outbox to an :class:`InProcessBus`, the :class:`Hub` fans out to
:func:`playlist_stream`, which the tests consume directly. Where a test needs
to lose an event, the relay does not run and the test publishes outbox rows to
the bus itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select

from chorus.db import repository
from chorus.db.compaction import compact
from chorus.db.engine import Database, DatabaseUnavailable
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox
from chorus.domain.changes import (
    DetailsUpdated,
    EntriesAdded,
    EntriesMoved,
    EntriesRemoved,
    MembersChanged,
    PlaylistDeleted,
    PlaylistEvent,
)
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    DeletePlaylist,
    MoveEntries,
    Placement,
    RemoveEntries,
    RemoveMember,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.committed import CommittedVersion
from chorus.domain.errors import DomainError, ErrorCode, Forbidden, InvalidInput, NotFound
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Role, Visibility
from chorus.events.relay import OutboxRelay
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resilience.tasks import cancel_and_wait
from chorus.resolvers.context import RequestContext, Services
from chorus.subscriptions import stream as stream_module
from chorus.subscriptions.bus import BusPublisher, InProcessBus
from chorus.subscriptions.hub import Hub
from chorus.subscriptions.stream import Resync, StreamItem, playlist_stream
from tests.deadlines import patience

ALICE, BOB, CAROL, DAVE = "alice", "bob", "carol", "dave"
TIMEOUT_S = patience(15.0)
QUIET_S = 0.4
"""How long a stream must stay silent to count as having sent nothing more."""

schema = build_schema()


class Rig:
    """A store, relay, bus and hub over one database, as ``chorus serve`` wires them."""

    def __init__(
        self, db: Database, *, queue_size: int, queue_entries: int = 10_000, catch_ups: int = 2
    ) -> None:
        self.db = db
        self.bus = InProcessBus()
        self.hub = Hub(
            self.bus,
            queue_size=queue_size,
            queue_entries=queue_entries,
            catch_ups_per_viewer=catch_ups,
        )
        self.relay = OutboxRelay(db, BusPublisher(self.bus), poll_interval_s=0.05)
        self.store = PlaylistStore(db, on_commit=self.relay.notify)
        self._ops = 0

    def op(self) -> str:
        self._ops += 1
        return f"op-{self._ops}"

    async def create(
        self, visibility: Visibility = Visibility.PRIVATE, collaborative: bool = True
    ) -> str:
        created = await self.store.create(
            CreatePlaylist(self.op(), "Mix", visibility=visibility, collaborative=collaborative),
            ALICE,
        )
        return created.outcome.playlist_id

    async def run(self, command_type: type[Any], playlist_id: str, actor: str = ALICE, **kw: Any):
        """One command against the current version; the version it committed."""
        async with self.db.read() as conn:
            header = await repository.get_playlist(conn, playlist_id)
        assert header is not None
        committed = await self.store.execute(
            command_type(
                playlist_id=playlist_id, operation_id=self.op(), base_version=header.version, **kw
            ),
            actor,
        )
        assert not committed.replayed
        return committed.outcome

    async def add(self, playlist_id: str, count: int = 1) -> int:
        """``count`` versions, each adding one media at the end; the last version."""
        version = -1
        for _ in range(count):
            outcome = await self.store.execute(
                AddEntries(playlist_id, self.op(), 0, (f"m{self._ops}",)), ALICE
            )
            version = outcome.outcome.version
        return version

    async def head(self, playlist_id: str) -> int:
        async with self.db.read() as conn:
            header = await repository.get_playlist(conn, playlist_id)
        assert header is not None
        return header.version

    async def outbox_event(self, playlist_id: str, version: int) -> PlaylistEvent:
        async with self.db.read() as conn:
            payload = await conn.scalar(
                select(outbox.c.payload).where(
                    outbox.c.playlist_id == playlist_id, outbox.c.version == version
                )
            )
        assert payload is not None
        event: PlaylistEvent = payload
        return event

    def stream(
        self, viewer: str, playlist_id: str, since: int, **kw: Any
    ) -> AsyncIterator[StreamItem]:
        return playlist_stream(self.db, self.hub, viewer, playlist_id, since, **kw)

    def counts(self) -> tuple[int, int, int]:
        return self.hub.stream_count, self.hub.playlist_count, self.bus.subscription_count

    async def relay_caught_up(self) -> None:
        """Wait until the relay has published every committed event."""
        for _ in range(int(TIMEOUT_S / 0.02)):
            async with self.db.read() as conn:
                rows = await conn.execute(
                    select(outbox.c.event_id).where(outbox.c.published_at.is_(None)).limit(1)
                )
                if rows.first() is None:
                    return
            await asyncio.sleep(0.02)
        raise AssertionError("the relay did not publish the outbox")


@contextlib.asynccontextmanager
async def rig(
    db: Database,
    *,
    relay: bool = True,
    queue_size: int = 1_000,
    queue_entries: int = 10_000,
    catch_ups: int = 2,
) -> AsyncIterator[Rig]:
    parts = Rig(db, queue_size=queue_size, queue_entries=queue_entries, catch_ups=catch_ups)
    task = asyncio.create_task(parts.relay.run()) if relay else None
    try:
        yield parts
    finally:
        if task is not None:
            await cancel_and_wait(task)
        await parts.bus.aclose()


class Subscriber:
    """Consumes a stream in a task; items (and the error that ended it) queue up."""

    def __init__(self, stream: AsyncIterator[StreamItem]) -> None:
        self.items: asyncio.Queue[StreamItem | BaseException | None] = asyncio.Queue()
        self.task = asyncio.create_task(self._consume(stream))

    async def _consume(self, stream: AsyncIterator[StreamItem]) -> None:
        try:
            async for item in stream:
                self.items.put_nowait(item)
        except DomainError as error:
            self.items.put_nowait(error)
            return
        self.items.put_nowait(None)

    async def take(self, count: int) -> list[StreamItem]:
        out: list[StreamItem] = []
        for _ in range(count):
            item = await asyncio.wait_for(self.items.get(), TIMEOUT_S)
            if isinstance(item, BaseException):
                raise AssertionError(f"stream failed after {versions(out)}") from item
            assert item is not None, f"stream ended after {versions(out)}"
            out.append(item)
        return out

    async def error(self) -> BaseException:
        item = await asyncio.wait_for(self.items.get(), TIMEOUT_S)
        assert isinstance(item, BaseException), f"expected an error, got {item!r}"
        return item

    async def quiet(self) -> None:
        """Nothing more arrives for a while."""
        await asyncio.sleep(QUIET_S)
        assert self.items.empty(), f"unexpected item {self.items.get_nowait()!r}"

    async def close(self) -> None:
        await cancel_and_wait(self.task)


async def _take(stream: AsyncIterator[StreamItem], count: int) -> list[StreamItem]:
    return [await _next(stream) for _ in range(count)]


def versions(items: list[StreamItem]) -> list[Any]:
    """Each item as its version, or ``("resync", current, reason)``."""
    return [
        ("resync", i.current_version, i.reason) if isinstance(i, Resync) else i.version
        for i in items
    ]


@dataclass
class Replica:
    """A subscriber's copy of the list, rebuilt only from the changes it received."""

    entries: dict[str, str]

    def apply(self, items: list[StreamItem]) -> None:
        for item in items:
            assert not isinstance(item, Resync)
            for change in item.changes:
                match change:
                    case EntriesAdded():
                        self.entries.update({e.entry_id: e.position_key for e in change.entries})
                    case EntriesMoved():
                        self.entries.update(
                            {m.entry.entry_id: m.entry.position_key for m in change.moves}
                        )
                    case EntriesRemoved():
                        for e in change.entries:
                            self.entries.pop(e.entry_id)

    def order(self) -> list[str]:
        return [i for i, _ in sorted(self.entries.items(), key=lambda kv: (kv[1], kv[0]))]


async def live_order(db: Database, playlist_id: str) -> list[str]:
    async with db.read() as conn:
        page = await repository.entries_page(conn, playlist_id, limit=1 << 20)
    return [e.entry_id for e in page]


async def _next(stream: AsyncIterator[StreamItem]) -> StreamItem:
    return await asyncio.wait_for(anext(stream), TIMEOUT_S)


# --- catch-up, live, no gap, no duplicate -----------------------------------------------


async def test_catch_up_then_live_sends_each_version_once_in_order(database: Database) -> None:
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid, 5)
        first = await parts.run(AddEntries, pid, media_ids=("x", "y", "z"))
        moved = first.entries[2].entry_id
        await parts.run(MoveEntries, pid, entry_ids=(moved,), placement=Placement(before=None))
        await parts.run(RemoveEntries, pid, entry_ids=(first.entries[0].entry_id,))
        sub = Subscriber(parts.stream(ALICE, pid, 0))
        caught_up = await sub.take(8)
        assert versions(caught_up) == list(range(1, 9))
        await parts.add(pid, 3)
        await parts.run(
            MoveEntries,
            pid,
            entry_ids=(moved,),
            placement=Placement(after=first.entries[1].entry_id),
        )
        live = await sub.take(4)
        assert versions(live) == [9, 10, 11, 12]
        await sub.quiet()
        replica = Replica({})
        replica.apply(caught_up + live)
        assert replica.order() == await live_order(database, pid)
        await sub.close()
        assert parts.counts() == (0, 0, 0)


async def test_a_stream_from_the_middle_starts_right_after_since_version(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid, 6)
        sub = Subscriber(parts.stream(ALICE, pid, 4))
        assert versions(await sub.take(2)) == [5, 6]
        await sub.quiet()
        await parts.add(pid)
        assert versions(await sub.take(1)) == [7]
        await sub.close()


async def test_versions_committed_during_catch_up_are_sent_once(database: Database) -> None:
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid, 250)  # three catch-up pages of 100
        stream = parts.stream(ALICE, pid, 0)
        got = [await _next(stream)]
        # The stream has joined the hub and read its first page; 40 more
        # versions commit and reach its queue while it has 249 left to catch up on.
        await parts.add(pid, 40)
        await parts.relay_caught_up()
        while len(got) < 290:
            got.append(await _next(stream))
        assert versions(got) == list(range(1, 291))
        sub = Subscriber(stream)  # the queued live copies must all be dropped
        await sub.quiet()
        await parts.add(pid)
        assert versions(await sub.take(1)) == [291]
        await sub.close()


# --- gap repair -----------------------------------------------------------------------


async def test_a_live_event_that_skips_ahead_is_repaired_from_sql(database: Database) -> None:
    # No relay: the bus carries only what the test publishes, so versions 4
    # and 5 are "lost" on the way; version 6 arriving must bring them from SQL.
    async with rig(database, relay=False) as parts:
        pid = await parts.create()
        await parts.add(pid, 3)
        sub = Subscriber(parts.stream(ALICE, pid, 1, idle_check_s=600))
        assert versions(await sub.take(2)) == [2, 3]
        await parts.add(pid, 3)
        await sub.quiet()  # nothing published yet, and no idle check within the test
        await parts.bus.publish(await parts.outbox_event(pid, 6))
        assert versions(await sub.take(3)) == [4, 5, 6]
        # Late and repeated deliveries (at-least-once bus) are dropped.
        await parts.bus.publish(await parts.outbox_event(pid, 5))
        await parts.bus.publish(await parts.outbox_event(pid, 6))
        await sub.quiet()
        await parts.add(pid)
        await parts.bus.publish(await parts.outbox_event(pid, 7))
        await parts.bus.publish(await parts.outbox_event(pid, 7))
        assert versions(await sub.take(1)) == [7]
        await sub.quiet()
        await sub.close()


async def test_a_database_that_blips_pauses_the_stream_and_ends_nothing(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read the database cannot answer while streaming (a gap to repair, access to check
    again, an idle check) is tried again until it answers: the stream goes on from the
    last version it sent, each version once, in order (docs/live-updates.md)."""
    failures = {"read_since": 2, "can_read": 2, "head": 2}

    def blipping(name: str, real: Any) -> Any:
        async def call(*args: Any, **kw: Any) -> Any:
            if failures[name]:
                failures[name] -= 1
                raise DatabaseUnavailable("connection was closed in the middle of operation")
            return await real(*args, **kw)

        return call

    monkeypatch.setattr(stream_module, "RETRY_FIRST_S", 0.01)
    async with rig(database, relay=False) as parts:
        pid = await parts.create()
        await parts.add(pid, 3)
        sub = Subscriber(parts.stream(ALICE, pid, 1, idle_check_s=0.3))
        assert versions(await sub.take(2)) == [2, 3]
        monkeypatch.setattr(
            stream_module, "read_since", blipping("read_since", stream_module.read_since)
        )
        access = parts.hub.access(database)
        monkeypatch.setattr(access, "can_read", blipping("can_read", access.can_read))
        monkeypatch.setattr(access, "head", blipping("head", access.head))
        await parts.add(pid, 2)  # never published: found by the idle check, read by catch-up
        assert versions(await sub.take(2)) == [4, 5]
        await parts.run(UpdatePlaylist, pid, visibility=Visibility.PUBLIC)  # access changes
        await parts.bus.publish(await parts.outbox_event(pid, 6))
        assert versions(await sub.take(1)) == [6]
        await parts.add(pid)
        await parts.bus.publish(await parts.outbox_event(pid, 7))
        assert versions(await sub.take(1)) == [7]  # after 6's access check answered
        assert failures == {"read_since": 0, "can_read": 0, "head": 0}
        await sub.quiet()
        await sub.close()


async def test_a_lost_event_is_found_when_the_stream_has_been_quiet(database: Database) -> None:
    async with rig(database, relay=False) as parts:
        pid = await parts.create()
        sub = Subscriber(parts.stream(ALICE, pid, 0, idle_check_s=0.2))
        await asyncio.sleep(0.1)
        await parts.add(pid, 2)  # never published
        assert versions(await sub.take(2)) == [1, 2]
        await sub.close()


async def test_a_quiet_stream_waits_for_the_version_the_head_shows_before_reading_sql(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The idle check looks between a commit and its event: the head is ahead, the
    # event on its way. Reading SQL then is wasted, and with thousands of quiet
    # streams it queued hundreds of catch-ups a commit (bench/ws_fanout.py).
    monkeypatch.setattr(stream_module, "IN_FLIGHT_S", 1.0)
    reads: list[int] = []
    real = stream_module.read_since

    async def counted(*args: Any, **kw: Any) -> Any:
        reads.append(args[2])  # the version read after
        return await real(*args, **kw)

    monkeypatch.setattr(stream_module, "read_since", counted)

    def catch_ups(reason: str) -> float:
        value = REGISTRY.get_sample_value("chorus_subscription_catch_ups_total", {"reason": reason})
        return value or 0.0

    at_start = {r: catch_ups(r) for r in ("subscribe", "lost", "gap")}
    async with rig(database, relay=False) as parts:
        pid = await parts.create()
        sub = Subscriber(parts.stream(ALICE, pid, await parts.head(pid), idle_check_s=0.2))
        await sub.quiet()  # live: caught up to the head
        before = len(reads)
        version = await parts.add(pid)  # the head moves; its event comes late
        await asyncio.sleep(0.5)  # two idle checks saw the head ahead
        await parts.bus.publish(await parts.outbox_event(pid, version))
        assert versions(await sub.take(1)) == [version]
        assert reads[before:] == [], "read SQL for a version on its way"
        assert parts.hub.arrival_s >= 0.5  # its commit to the hub: the next waits longer
        await parts.add(pid)  # never published: still found, 1 s later
        assert versions(await sub.take(1)) == [version + 1]
        assert reads[before:] == [version]
        await sub.close()
    counted_now = {r: catch_ups(r) - at_start[r] for r in at_start}
    assert counted_now == {"subscribe": 1, "lost": 1, "gap": 0}


async def test_a_stream_cancelled_as_an_event_wakes_it_still_ends(database: Database) -> None:
    # The client disconnects just as an event arrives: the operation's task is
    # cancelled in the same loop turn that wakes its stream. The cancel must
    # win (Python 3.11's wait_for would swallow it, and the stream would go on
    # for a client that is gone, holding its connection open on the server).
    async with rig(database, relay=False) as parts:
        pid = await parts.create()
        for turns in range(4):  # how many loop turns the cancel comes after the wakeup
            head = await parts.head(pid)
            sub = Subscriber(parts.stream(ALICE, pid, head, idle_check_s=600))
            await sub.quiet()  # waiting for live events
            version = await parts.add(pid)
            event = await parts.outbox_event(pid, version)
            await parts.bus.publish(event)
            for _ in range(turns):
                await asyncio.sleep(0)
            sub.task.cancel()
            await asyncio.wait({sub.task}, timeout=2)
            assert sub.task.cancelled(), f"still streaming after a cancel {turns} turns late"
        assert parts.counts() == (0, 0, 0)


# --- slow consumers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bound", "held"),
    [({"queue_size": 4}, 4), ({"queue_entries": 5}, 5)],
    ids=["versions", "entries"],
)
async def test_a_slow_consumer_gets_resync_then_continues_from_current_version(
    database: Database, bound: dict[str, int], held: int
) -> None:
    # The consumer stops reading while 60 versions are published: its queue
    # overflows and it falls 60 > max_lag versions behind. A queue with room
    # for 1,000 versions but only 5 entries overflows as surely: heavy versions
    # count as much as many light ones (a stalled socket keeps little memory).
    async with rig(database, **bound) as parts:
        pid = await parts.create()
        await parts.add(pid)
        # Versions 0 and 1 published before it subscribes: a relay running late (a loaded
        # machine) queued version 0's event, which holds no entries, among the counted.
        await parts.relay_caught_up()
        stream = parts.stream(ALICE, pid, 0, max_lag=20)
        assert versions([await _next(stream)]) == [1]
        await parts.add(pid, 60)
        await parts.relay_caught_up()
        [membership] = parts.hub._members[pid]
        assert membership.overflowed
        assert membership.queue.qsize() == membership.entries == held
        assert versions([await _next(stream)]) == [("resync", 61, "slow consumer")]
        await parts.add(pid, 3)
        assert versions([await _next(stream) for _ in range(3)]) == [62, 63, 64]
        assert membership.entries == 0
        await stream.aclose()  # type: ignore[attr-defined]
        assert parts.counts() == (0, 0, 0)


async def test_a_subscriber_too_far_behind_at_subscribe_resyncs_instead_of_a_replay(
    database: Database,
) -> None:
    # 200 subscriptions of one user from version 0 replayed the whole log 200
    # times (an attacker's pass): past max_lag the head is cheaper to read.
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid, 21)
        at_the_limit = parts.stream(ALICE, pid, 1, max_lag=20)
        assert versions([await _next(at_the_limit) for _ in range(20)]) == list(range(2, 22))
        far = parts.stream(ALICE, pid, 0, max_lag=20)
        assert versions([await _next(far)]) == [("resync", 21, "too far behind")]
        await parts.add(pid, 2)
        assert versions([await _next(far) for _ in range(2)]) == [22, 23]
        assert versions([await _next(at_the_limit) for _ in range(2)]) == [22, 23]
        await far.aclose()  # type: ignore[attr-defined]
        await at_the_limit.aclose()  # type: ignore[attr-defined]
        assert parts.counts() == (0, 0, 0)


async def test_one_viewers_streams_catch_up_a_page_at_a_time_and_others_do_not_wait(
    database: Database,
) -> None:
    # One slot: while Alice's first stream is inside a page (its consumer reads
    # slowly), her second waits its turn; Bob's stream does not wait for her.
    async with rig(database, catch_ups=1) as parts:
        pid = await parts.create(Visibility.PUBLIC)
        await parts.add(pid, 150)
        first = parts.stream(ALICE, pid, 0)
        assert versions([await _next(first)]) == [1]  # holds the slot, mid-page
        second = Subscriber(parts.stream(ALICE, pid, 0))
        await second.quiet()
        bob = Subscriber(parts.stream(BOB, pid, 0))
        assert versions(await bob.take(150)) == list(range(1, 151))
        # Read on: the first gives its slot back after its page, and the second
        # has its turn before the first's next page (first come, first served).
        rest = asyncio.create_task(_take(first, 149))
        assert versions(await second.take(150)) == list(range(1, 151))
        assert versions(await rest) == list(range(2, 151))
        await parts.add(pid)
        assert versions([await _next(first)]) == [151]
        assert versions(await second.take(1)) == [151]
        assert parts.hub.catch_ups.viewers == 0
        await first.aclose()  # type: ignore[attr-defined]
        await second.close()
        await bob.close()
        assert parts.counts() == (0, 0, 0)


async def test_a_slow_consumer_within_max_lag_catches_up_from_sql(database: Database) -> None:
    async with rig(database, queue_size=4) as parts:
        pid = await parts.create()
        await parts.add(pid)
        stream = parts.stream(ALICE, pid, 0, max_lag=1_000)
        assert versions([await _next(stream)]) == [1]
        await parts.add(pid, 30)
        await parts.relay_caught_up()
        got = [await _next(stream) for _ in range(30)]
        assert versions(got) == list(range(2, 32))
        sub = Subscriber(stream)
        await sub.quiet()
        await sub.close()


# --- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("since", [-1, "head+1", "head+50"])
async def test_since_version_outside_the_log_is_invalid_input(
    database: Database, since: int | str
) -> None:
    async with rig(database) as parts:
        pid = await parts.create()
        head = await parts.add(pid, 3)
        value = since if isinstance(since, int) else head + int(str(since).split("+")[1])
        with pytest.raises(InvalidInput) as refused:
            await _next(parts.stream(ALICE, pid, value))
        assert refused.value.code is ErrorCode.INVALID_INPUT
        assert parts.counts() == (0, 0, 0)


async def test_a_playlist_the_viewer_cannot_see_is_not_found(database: Database) -> None:
    async with rig(database) as parts:
        private = await parts.create(Visibility.PRIVATE)
        public = await parts.create(Visibility.PUBLIC)
        with pytest.raises(NotFound):
            await _next(parts.stream(BOB, private, 0))
        with pytest.raises(NotFound):
            await _next(parts.stream(BOB, "no-such-playlist", 0))
        await parts.run(DeletePlaylist, public)
        with pytest.raises(NotFound):
            await _next(parts.stream(ALICE, public, 0))
        assert parts.counts() == (0, 0, 0)


async def _remove_bob(parts: Rig, pid: str) -> None:
    await parts.run(RemoveMember, pid, user_id=BOB)


async def _make_private(parts: Rig, pid: str) -> None:
    await parts.run(UpdatePlaylist, pid, visibility=Visibility.PRIVATE)


async def _delete(parts: Rig, pid: str) -> None:
    await parts.run(DeletePlaylist, pid)


@pytest.mark.parametrize(
    ("visibility", "bob_is_member", "lose_access", "expected_change"),
    [
        pytest.param(Visibility.PRIVATE, True, _remove_bob, MembersChanged, id="member-removed"),
        pytest.param(Visibility.PUBLIC, False, _make_private, DetailsUpdated, id="made-private"),
        pytest.param(Visibility.PRIVATE, True, _delete, PlaylistDeleted, id="deleted"),
    ],
)
async def test_losing_access_ends_the_stream_with_forbidden_and_nothing_after(
    database: Database,
    visibility: Visibility,
    bob_is_member: bool,
    lose_access: Any,
    expected_change: type[Any],
) -> None:
    async with rig(database) as parts:
        pid = await parts.create(visibility)
        if bob_is_member:
            await parts.run(SetMemberRole, pid, user_id=BOB, role=Role.VIEWER)
        await parts.run(SetMemberRole, pid, user_id=CAROL, role=Role.EDITOR)
        await parts.run(SetMemberRole, pid, user_id=DAVE, role=Role.VIEWER)
        head = await parts.head(pid)
        bob = Subscriber(parts.stream(BOB, pid, head))
        dave = Subscriber(parts.stream(DAVE, pid, head))  # keeps access unless deleted
        await parts.add(pid)
        # Another member's change of access is not bob's: it reaches him.
        await parts.run(RemoveMember, pid, user_id=CAROL)
        got = await bob.take(2)
        assert versions(got) == [head + 1, head + 2]
        assert isinstance(got[1], CommittedVersion)
        assert isinstance(got[1].changes[0], MembersChanged)
        assert versions(await dave.take(2)) == [head + 1, head + 2]
        # Their streams' access check of head + 2 (one shared read) is done before the
        # next change: a read that ran after it would see it (docs/api.md, Subscriptions).
        await parts.hub.access(database).readers(pid, head + 2)
        await lose_access(parts, pid)
        # The version that takes bob's access away still reaches him (he could
        # see the playlist before it), then his stream ends.
        (last,) = await bob.take(1)
        assert versions([last]) == [head + 3]
        assert isinstance(last, CommittedVersion)
        assert [type(c) for c in last.changes] == [expected_change]
        error = await bob.error()
        assert isinstance(error, Forbidden)
        assert error.code is ErrorCode.FORBIDDEN
        assert versions(await dave.take(1)) == [head + 3]
        if lose_access is _delete:
            assert isinstance(await dave.error(), Forbidden)
        else:
            await parts.add(pid, 2)
            assert versions(await dave.take(2)) == [head + 4, head + 5]
            await dave.close()
        await bob.quiet()
        assert parts.counts() == (0, 0, 0)


async def test_each_stream_gets_only_its_own_playlist(database: Database) -> None:
    async with rig(database) as parts:
        one, two = await parts.create(), await parts.create()
        subs = {pid: Subscriber(parts.stream(ALICE, pid, 0)) for pid in (one, two)}
        for _ in range(5):
            await parts.add(one)
            await parts.add(two, 2)
        got = {pid: await sub.take(5 if pid == one else 10) for pid, sub in subs.items()}
        for pid, items in got.items():
            assert {i.playlist_id for i in items if isinstance(i, CommittedVersion)} == {pid}
        assert versions(got[one]) == list(range(1, 6))
        assert versions(got[two]) == list(range(1, 11))
        for sub in subs.values():
            await sub.quiet()
            await sub.close()


async def test_access_lost_while_catching_up_ends_the_stream_with_forbidden(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid = await parts.create(Visibility.PRIVATE)
        await parts.run(SetMemberRole, pid, user_id=BOB, role=Role.VIEWER)
        await parts.add(pid, 3)
        stream = parts.stream(BOB, pid, 1)
        assert versions([await _next(stream)]) == [2]
        await _remove_bob(parts, pid)
        await parts.add(pid, 2)
        got = [await _next(stream) for _ in range(3)]
        assert versions(got) == [3, 4, 5]  # version 5 removed him
        with pytest.raises(Forbidden):
            await _next(stream)  # and 6, 7 are not sent
        assert parts.counts() == (0, 0, 0)


# --- long logs and retention ----------------------------------------------------------


async def test_catch_up_from_zero_of_2000_versions_yields_each_in_order(database: Database) -> None:
    async with rig(database, relay=False) as parts:
        pid = await parts.create()
        assert await parts.add(pid, 2_000) == 2_000
        # 20 pages of the log; a lag limit that allows the replay (the default
        # 1,000 resyncs it: test_a_subscriber_too_far_behind_at_subscribe_…).
        stream = parts.stream(ALICE, pid, 0, idle_check_s=600, max_lag=2_000)
        got = [await _next(stream) for _ in range(2_000)]
        assert versions(got) == list(range(1, 2_001))
        replica = Replica({})
        replica.apply(got)
        assert replica.order() == await live_order(database, pid)
        await stream.aclose()  # type: ignore[attr-defined]
        assert parts.counts() == (0, 0, 0)


async def test_after_compaction_a_stream_from_zero_resyncs_then_goes_live(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid, 30)
        await compact(database, keep_versions=10, now=datetime.now(UTC))
        # The floor is 21: a stream from 20 still catches up, from 19 or 0 it resyncs.
        kept = Subscriber(parts.stream(ALICE, pid, 20))
        assert versions(await kept.take(10)) == list(range(21, 31))
        for since in (0, 19):
            current = await parts.head(pid)
            sub = Subscriber(parts.stream(ALICE, pid, since))
            assert versions(await sub.take(1)) == [("resync", current, "retention")]
            await sub.quiet()
            await parts.add(pid)
            head = await parts.head(pid)
            assert versions(await sub.take(1)) == [head]
            await sub.close()
        assert versions(await kept.take(2)) == [31, 32]
        await kept.close()
        assert parts.counts() == (0, 0, 0)


CHANGES = """query($id: ID!, $since: Int!, $first: Int) { playlist(id: $id) {
  version changes(sinceVersion: $since, first: $first) {
    sinceVersion currentVersion resyncRequired hasMore versions { version } } } }"""


async def test_changes_answers_resync_required_past_the_floor(database: Database) -> None:
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid, 30)
        await compact(database, keep_versions=10, now=datetime.now(UTC))
        services = Services(database, parts.store, _NoCatalog(), DEFAULT_LIMITS, parts.hub)

        async def changes(since: int, first: int | None = None) -> dict[str, Any]:
            result = await schema.execute(
                CHANGES,
                variable_values={
                    "id": ids.to_global_id("Playlist", pid),
                    "since": since,
                    "first": first,
                },
                context_value=RequestContext(services, ALICE),
            )
            assert result.errors is None, result.errors
            assert result.data is not None
            batch: dict[str, Any] = result.data["playlist"]["changes"]
            return batch

        past = await changes(19)
        assert past["resyncRequired"] is True
        assert (past["currentVersion"], past["versions"]) == (30, [])
        at_floor = await changes(20, 4)
        assert at_floor["resyncRequired"] is False
        assert [v["version"] for v in at_floor["versions"]] == [21, 22, 23, 24]
        assert at_floor["hasMore"] is True
        rest = await changes(24)
        assert [v["version"] for v in rest["versions"]] == list(range(25, 31))
        assert rest["hasMore"] is False


class _NoCatalog:
    async def get_many(self, media_ids: Any) -> dict[str, Any]:
        return {}

    async def search(self, query: str, *, offset: int, limit: int) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


# --- through the schema ---------------------------------------------------------------

EVENTS = """subscription($id: ID!, $since: Int!) {
  playlistEvents(playlistId: $id, sinceVersion: $since) {
    __typename ... on PlaylistChanged { version }
    ... on ResyncRequired { currentVersion reason } } }"""


async def test_playlist_events_through_the_schema_end_with_a_forbidden_code(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid = await parts.create(Visibility.PRIVATE)
        await parts.run(SetMemberRole, pid, user_id=BOB, role=Role.VIEWER)
        await parts.add(pid)
        services = Services(database, parts.store, _NoCatalog(), DEFAULT_LIMITS, parts.hub)
        results = await schema.subscribe(
            EVENTS,
            variable_values={"id": ids.to_global_id("Playlist", pid), "since": 1},
            context_value=RequestContext(services, BOB),
        )
        assert not hasattr(results, "errors"), results
        first = await asyncio.wait_for(anext(results), TIMEOUT_S)  # type: ignore[arg-type]
        assert first.errors is None
        assert first.data == {"playlistEvents": {"__typename": "PlaylistChanged", "version": 2}}
        await _remove_bob(parts, pid)
        removal = await asyncio.wait_for(anext(results), TIMEOUT_S)  # type: ignore[arg-type]
        assert removal.data == {"playlistEvents": {"__typename": "PlaylistChanged", "version": 3}}
        ended = await asyncio.wait_for(anext(results), TIMEOUT_S)  # type: ignore[arg-type]
        assert ended.data is None
        assert [e.extensions["code"] for e in ended.errors] == ["FORBIDDEN"]
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(results), TIMEOUT_S)  # type: ignore[arg-type]
        assert parts.counts() == (0, 0, 0)


async def test_closing_the_schemas_stream_leaves_the_hub_before_aclose_returns(
    database: Database,
) -> None:
    """Strawberry closes the stream when the client completes or disconnects.

    The stream must leave the hub then, not whenever the garbage collector
    finalizes the generators it was nested in: until then the process keeps a
    live stream (and a bus subscription) for a client that is gone.
    """
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid, 2)
        services = Services(database, parts.store, _NoCatalog(), DEFAULT_LIMITS, parts.hub)
        results = await schema.subscribe(
            EVENTS,
            variable_values={"id": ids.to_global_id("Playlist", pid), "since": 0},
            context_value=RequestContext(services, ALICE),
        )
        first = await asyncio.wait_for(anext(results), TIMEOUT_S)
        assert first.data == {"playlistEvents": {"__typename": "PlaylistChanged", "version": 1}}
        assert parts.counts() == (1, 1, 1)
        await results.aclose()
        assert parts.counts() == (0, 0, 0)


@pytest.mark.parametrize("since", [-1, 2])
async def test_since_version_out_of_range_through_the_schema_is_bad_user_input(
    database: Database, since: int
) -> None:
    async with rig(database) as parts:
        pid = await parts.create()
        await parts.add(pid)
        services = Services(database, parts.store, _NoCatalog(), DEFAULT_LIMITS, parts.hub)
        results = await schema.subscribe(
            EVENTS,
            variable_values={"id": ids.to_global_id("Playlist", pid), "since": since},
            context_value=RequestContext(services, ALICE),
        )
        refused = await asyncio.wait_for(anext(results), TIMEOUT_S)  # type: ignore[arg-type]
        assert refused.data is None
        assert [e.extensions["code"] for e in refused.errors] == ["BAD_USER_INPUT"]
        assert "sinceVersion" in refused.errors[0].message
        assert parts.counts() == (0, 0, 0)


# --- hub bookkeeping ------------------------------------------------------------------


async def test_hub_and_bus_counts_return_to_zero_when_streams_close_or_are_cancelled(
    database: Database,
) -> None:
    async with rig(database) as parts:
        one, two = await parts.create(), await parts.create()
        await parts.add(one)
        await parts.add(two)
        closed = [parts.stream(ALICE, pid, 0) for pid in (one, one, two)]
        for stream in closed:
            assert versions([await _next(stream)]) == [1]
        cancelled = [Subscriber(parts.stream(ALICE, pid, 0)) for pid in (one, two, two)]
        for sub in cancelled:
            assert versions(await sub.take(1)) == [1]
        assert parts.counts() == (6, 2, 2)
        for stream in closed:
            await stream.aclose()  # type: ignore[attr-defined]
        assert parts.counts() == (3, 2, 2)
        await cancelled[0].close()
        assert parts.counts() == (2, 1, 1)
        for sub in cancelled[1:]:
            await sub.close()
        assert parts.counts() == (0, 0, 0)
        # Events for a playlist nobody watches go nowhere, and joining again works.
        await parts.add(one)
        again = Subscriber(parts.stream(ALICE, one, 1))
        assert versions(await again.take(1)) == [2]
        assert parts.counts() == (1, 1, 1)
        await again.close()
        assert parts.counts() == (0, 0, 0)
