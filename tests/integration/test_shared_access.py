"""Access after a version that changed it: one read for every stream of the process (DESIGN §6).

The streams of :mod:`tests.integration.test_stream`'s rig, on both
databases; :class:`~chorus.subscriptions.access.SharedAccess` counts its SQL
reads, so the test can say that thirty streams cost one.
"""

from __future__ import annotations

from chorus.db.engine import Database
from chorus.domain.commands import RemoveMember, SetMemberRole
from chorus.domain.errors import Forbidden
from chorus.domain.model import Role, Visibility
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
        streams = {user: Subscriber(parts.stream(user, pid, head)) for user in MEMBERS}
        access = parts.hub.access(parts.db)
        reads = access.reads
        await parts.run(RemoveMember, pid, user_id="member7")
        for user, stream in streams.items():
            assert versions(await stream.take(1)) == [head + 1], user
        assert isinstance(await streams["member7"].error(), Forbidden)
        # One read of the playlist's readers for the 30 checks of that version.
        assert access.reads - reads == 1
        await parts.add(pid)
        for user, stream in streams.items():
            if user != "member7":
                assert versions(await stream.take(1)) == [head + 2], user
        await streams["member7"].quiet()
        for stream in streams.values():
            await stream.close()
