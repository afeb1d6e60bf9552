"""Direct writes (subscriptions/hub.py): a group's parked subscribers get versions, streams asleep.

In process, on both databases: real store, relay, bus, hub and streams. Each
subscriber is consumed as the GraphQL layer does: every version its stream
yields is rendered through the hub's memo (once per group) and "sent"; its
:class:`Sink` records what the hub wrote to it directly. What one subscriber
saw is both, in the order they happened, which is its socket's order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from chorus.db.engine import Database
from chorus.domain.commands import RemoveMember, SetMemberRole
from chorus.domain.committed import CommittedVersion
from chorus.domain.errors import DomainError, Forbidden
from chorus.domain.model import Role, Visibility
from chorus.subscriptions.stream import StreamItem
from tests.integration.test_stream import ALICE, BOB, TIMEOUT_S, Rig, rig

GROUP = ("playlist", "document")


@dataclass(frozen=True)
class Shown:
    """A rendering: which version, and whether every viewer of the group may get it."""

    version: int
    shared: bool = True


class Reader:
    """One subscriber: its stream consumed in a task, its sink written by the hub."""

    def __init__(
        self, parts: Rig, viewer: str, playlist_id: str, since: int, *, accept: bool, shared: bool
    ) -> None:
        self.seen: list[int] = []
        self.error: DomainError | None = None
        self.accept = accept
        self.direct = 0
        self._parts = parts
        self._viewer = viewer
        self._shared = shared
        stream = parts.stream(viewer, playlist_id, since, group=GROUP, sink=self)
        self.task = asyncio.create_task(self._consume(stream))

    def write(self, rendering: object) -> bool:
        if not self.accept:
            return False
        assert isinstance(rendering, Shown)
        assert rendering.shared
        self.seen.append(rendering.version)
        self.direct += 1
        return True

    async def _consume(self, stream: AsyncIterator[StreamItem]) -> None:
        try:
            async for item in stream:
                assert isinstance(item, CommittedVersion)
                shown = await self._parts.hub.renders.render(
                    GROUP, item.version, self._viewer, lambda v=item.version: self._make(v)
                )
                self.seen.append(shown.version)
        except DomainError as error:
            self.error = error

    async def _make(self, version: int) -> Shown:
        return Shown(version, self._shared)


async def until_seen(readers: list[Reader], versions: list[int]) -> None:
    """Until every reader saw exactly ``versions`` (failing on any other list)."""
    async with asyncio.timeout(TIMEOUT_S):
        while not all(r.seen == versions for r in readers):
            for r in readers:
                assert r.seen == versions[: len(r.seen)], (r.seen, versions)
            await asyncio.sleep(0.01)


async def close(readers: list[Reader]) -> None:
    for r in readers:
        r.task.cancel()
    await asyncio.gather(*(r.task for r in readers), return_exceptions=True)


async def started(
    parts: Rig, count: int, *, accept: bool = True, shared: bool = True
) -> tuple[str, int, list[Reader]]:
    """A PUBLIC playlist at version 1 that ``count`` readers (viewers u0, u1, …) have all seen."""
    pid = await parts.create(Visibility.PUBLIC)
    head = await parts.head(pid)
    readers = [
        Reader(parts, f"u{n}", pid, head, accept=accept or n > 0, shared=shared)
        for n in range(count)
    ]
    await parts.add(pid)  # every stream is parked once it has sent this one
    await until_seen(readers, [head + 1])
    return pid, head, readers


async def test_the_parked_members_of_a_group_are_written_once_per_version(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid, head, readers = await started(parts, 10)
        before, made = parts.hub.direct_writes, parts.hub.renders.renders
        for n in range(2, 5):
            await parts.add(pid)
            await until_seen(readers, list(range(head + 1, head + n + 1)))
        # Each version: one leader woken and rendering it, the other nine written directly.
        assert parts.hub.direct_writes - before == 3 * 9
        assert parts.hub.renders.renders - made == 3
        await close(readers)


async def test_versions_that_come_before_the_last_was_written_arrive_in_order_once(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid, head, readers = await started(parts, 10)
        last = await parts.add(pid, 6)  # back to back: direct writes still owed meanwhile
        await until_seen(readers, list(range(head + 1, last + 1)))
        await parts.add(pid, 1)
        await until_seen(readers, list(range(head + 1, last + 2)))
        await close(readers)


async def test_a_socket_that_takes_nothing_more_gets_its_versions_from_its_stream(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid, head, readers = await started(parts, 6, accept=False)
        slow = readers[0]
        before = parts.hub.direct_writes
        for n in range(2, 5):
            await parts.add(pid)
            await until_seen(readers, list(range(head + 1, head + n + 1)))
        assert slow.direct == 0
        assert parts.hub.direct_writes == sum(r.direct for r in readers)
        assert parts.hub.direct_writes - before >= 3 * 4  # the slow one may have led
        await close(readers)


async def test_a_rendering_for_one_viewer_is_never_written_to_another(database: Database) -> None:
    async with rig(database) as parts:
        pid, head, readers = await started(parts, 5, shared=False)
        before = parts.hub.direct_writes
        await parts.add(pid, 1)
        await until_seen(readers, [head + 1, head + 2])
        assert parts.hub.direct_writes == before
        assert parts.hub.renders.renders >= 5 * 2  # each viewer's own
        await close(readers)


async def test_losing_access_ends_exactly_that_stream_after_the_revoking_version(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid = await parts.create(Visibility.PRIVATE)
        viewers = [BOB, "carol", "dave", "erin"]
        for viewer in viewers:
            await parts.run(SetMemberRole, pid, user_id=viewer, role=Role.VIEWER)
        head = await parts.head(pid)
        readers = [Reader(parts, v, pid, head, accept=True, shared=True) for v in viewers]
        await parts.add(pid)
        await until_seen(readers, [head + 1])
        bob, others = readers[0], readers[1:]
        await parts.run(RemoveMember, pid, user_id=BOB, actor=ALICE)
        # Every stream gets the version that revoked bob's access (he could
        # see the playlist before it); then his ends, the others go on.
        await until_seen(readers, [head + 1, head + 2])
        async with asyncio.timeout(TIMEOUT_S):
            await bob.task
        assert isinstance(bob.error, Forbidden)
        before = parts.hub.direct_writes
        await parts.add(pid, 1)
        await until_seen(others, [head + 1, head + 2, head + 3])
        assert bob.seen == [head + 1, head + 2]
        assert parts.hub.direct_writes - before == 2
        await close(others)
