"""Access after a version that changed it: one read for every stream of the process (DESIGN §6).

The streams of :mod:`tests.integration.test_stream`'s rig, on both
databases; :class:`~chorus.subscriptions.reader_checks.SharedAccess` counts its SQL
reads, so the test can say that thirty streams cost one.
"""

from __future__ import annotations

import asyncio

from chorus.db.engine import Database
from chorus.domain.commands import RemoveMember, SetMemberRole
from chorus.domain.errors import Forbidden
from chorus.domain.model import Role, Visibility
from chorus.subscriptions.reader_checks import Readers, SharedAccess
from tests.integration.test_stream import Subscriber, rig, versions

MEMBERS = [f"member{n}" for n in range(30)]


async def test_one_removal_costs_one_read_and_ends_only_the_removed_stream(
    database: Database,
) -> None:
    async with rig(database) as parts:
        pid = await parts.create(Visibility.PRIVATE)
        for user in MEMBERS:
            await parts.run(SetMemberRole, pid, user_id=user, role=Role.VIEWER)
        head = await parts.head(pid)
        access = parts.hub.access(parts.db)
        before = access.reads
        streams = {user: Subscriber(parts.stream(user, pid, head)) for user in MEMBERS}
        await parts.add(pid)
        for user, stream in streams.items():
            assert versions(await stream.take(1)) == [head + 1], user
        # The 30 subscribes share their first read: one under way, one waiting at most.
        assert access.reads - before <= 2
        reads = access.reads
        await parts.run(RemoveMember, pid, user_id="member7")
        for user, stream in streams.items():
            assert versions(await stream.take(1)) == [head + 2], user
        assert isinstance(await streams["member7"].error(), Forbidden)
        # One read of the playlist's readers for the 30 checks of that version.
        assert access.reads - reads == 1
        await parts.add(pid)
        for user, stream in streams.items():
            if user != "member7":
                assert versions(await stream.take(1)) == [head + 3], user
        await streams["member7"].quiet()
        for stream in streams.values():
            await stream.close()


async def test_subscribes_share_only_a_read_that_starts_after_they_arrive(
    database: Database,
) -> None:
    """A read under way may predate a revoking commit a later subscriber did not hear:
    the later ones wait for the next read, which all of them share."""
    access = SharedAccess(database)
    started: list[asyncio.Event] = []

    async def read(playlist_id: str) -> Readers:
        n = len(started)
        started.append(gate := asyncio.Event())
        await gate.wait()
        return Readers(None, {f"read{n}": Role.VIEWER})

    access._read = read  # type: ignore[method-assign]
    first = asyncio.ensure_future(access.since_now("p"))
    await _turns()
    assert len(started) == 1
    later = [asyncio.ensure_future(access.since_now("p")) for _ in range(3)]
    other = asyncio.ensure_future(access.since_now("q"))  # another playlist: its own read
    await _turns()
    assert len(started) == 2  # p's first read, q's; p's second waits for the first
    started[0].set()
    assert (await first).roles == {"read0": Role.VIEWER}
    await _turns()
    assert len(started) == 3  # the three later callers' one read
    started[1].set()
    started[2].set()
    assert {tuple((await f).roles) for f in later} == {("read2",)}
    assert (await other).roles == {"read1": Role.VIEWER}


async def _turns(n: int = 20) -> None:
    """Let the event loop run the tasks that are ready (``n`` turns)."""
    for _ in range(n):
        await asyncio.sleep(0)
