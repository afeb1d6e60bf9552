"""The writer of snapshots and head versions (the cache projector's, and the API's head raises).

Every write is one of :mod:`chorus.caches.scripts`, idempotent by version;
those that learn a head from an observation carry a
:class:`~chorus.caches.generation.Ticket` taken before it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from redis.asyncio import Redis
from redis.exceptions import RedisError

from chorus.caches import scripts
from chorus.caches.generation import Generation, Ticket, fresh_token
from chorus.caches.keys import GENERATION_KEY, PLAYLIST_PATTERN, head_key, snapshot_key
from chorus.caches.snapshot import Snapshot

REFUSED = -1
"""What a guarded script returns when its ticket is stale (:mod:`chorus.caches.scripts`)."""


class StaleTicket(RedisError):
    """Redis refused a write: it forgot something since the ticket was taken.

    Read again with a new ticket (the generation was learned again already).
    """


class SnapshotStore:
    """Writes snapshots and head versions; every write is idempotent by version.

    Errors of the Redis client (``redis.RedisError``, ``OSError``) propagate:
    the cache projector retries them.

    Args:
        generation: this process's belief of Redis's generation (the one the
            client's ``redis_connect_func`` keeps); a fresh one by default.
    """

    def __init__(self, redis: Redis, generation: Generation | None = None) -> None:
        self._redis = redis
        self.generation = generation if generation is not None else Generation()
        self._ensure = redis.register_script(scripts.ENSURE)
        self._put = redis.register_script(scripts.PUT)
        self._remove = redis.register_script(scripts.REMOVE)
        self._learn = redis.register_script(scripts.LEARN)
        self._bump = redis.register_script(scripts.BUMP)
        self._versions = redis.register_script(scripts.VERSIONS)

    async def ensure(self) -> str:
        """Check Redis's generation (a new one if Redis forgot); learn and return it."""
        reply = await self._ensure([GENERATION_KEY], [fresh_token(), PLAYLIST_PATTERN])
        return self.generation.learn(reply)

    async def ticket(self) -> Ticket:
        """A ticket to take before reading SQL (:meth:`ensure` first if none is known)."""
        if self.generation.current is None or self.generation.evicted < 0:
            await self.ensure()
        return self.generation.ticket()

    async def put(self, snapshot: Snapshot, ticket: Ticket) -> bool:
        """Store ``snapshot`` unless the stored one or the head is newer; raise the head.

        Args:
            ticket: taken before ``snapshot`` was read.

        Returns:
            whether the snapshot was written.
        """
        return await self.write([snapshot], {}, ticket) == 1

    async def remove(self, playlist_id: str, version: int, ticket: Ticket) -> bool:
        """Drop the snapshot (not PUBLIC at ``version``, or deleted) unless a newer one is stored.

        Returns:
            whether a snapshot was deleted. The head is raised to ``version``
            unless the ticket is stale.
        """
        return await self.write([], {playlist_id: version}, ticket) == 1

    async def write(self, puts: Sequence[Snapshot], removes: dict[str, int], ticket: Ticket) -> int:
        """:meth:`put` and :meth:`remove` for many playlists in one pipeline.

        Args:
            puts: snapshots to store.
            removes: playlist id → the version at which it stopped being PUBLIC.
            ticket: taken before the snapshots were read.

        Returns:
            how many snapshots were written or deleted.

        Raises:
            StaleTicket: Redis refused a write for this ticket (the others
                were done); the generation was learned again (:meth:`ensure`).
        """
        gen, evicted = ticket.generation, ticket.evicted
        async with self._redis.pipeline(transaction=False) as pipe:
            for snapshot in puts:
                pid = snapshot.playlist.id
                await self._put(
                    [snapshot_key(pid), head_key(pid), GENERATION_KEY],
                    [snapshot.version, snapshot.to_json(), gen, evicted],
                    client=pipe,
                )
            for pid, version in removes.items():
                await self._remove(
                    [snapshot_key(pid), head_key(pid), GENERATION_KEY],
                    [version, gen, evicted],
                    client=pipe,
                )
            results = await pipe.execute()
        if REFUSED in results:
            await self.ensure()
            raise StaleTicket("Redis forgot since the snapshots were read")
        return sum(1 for r in results if r == 1)

    async def learn_heads(self, versions: Mapping[str, int], ticket: Ticket) -> bool:
        """Raise the heads to versions a read saw (taken before it); create missing ones if safe.

        Returns:
            whether Redis took every one; when not, the generation is learned
            again (:meth:`ensure`).
        """
        ids = list(versions)
        keys = [GENERATION_KEY, *(head_key(i) for i in ids)]
        args: list[str | int] = [ticket.generation, ticket.evicted, *(versions[i] for i in ids)]
        if await self._learn(keys, args) == 1:
            return True
        await self.ensure()
        return False

    async def bump_head(self, playlist_id: str, version: int) -> None:
        """Raise the head to ``version`` (a commit happened); never lowers it."""
        await self._bump([head_key(playlist_id)], [version])

    async def bump_heads(self, versions: dict[str, int]) -> None:
        """:meth:`bump_head` for many playlists in one pipeline."""
        if len(versions) == 1:
            await self.bump_head(*next(iter(versions.items())))
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for playlist_id, version in versions.items():
                await self._bump([head_key(playlist_id)], [version], client=pipe)
            await pipe.execute()

    async def versions(self, playlist_ids: Collection[str]) -> dict[str, int]:
        """The versions of the stored snapshots (playlists without one are absent)."""
        ids = list(playlist_ids)
        if not ids:
            return {}
        found = await self._versions([snapshot_key(i) for i in ids], [])
        return {i: int(v) for i, v in zip(ids, found, strict=True) if int(v) >= 0}

    async def heads(self, playlist_ids: Sequence[str]) -> tuple[str | None, dict[str, int]]:
        """The generation and the head versions of these playlists, in one ``MGET``.

        Returns:
            ``(generation or None when missing, playlist id → head)``; playlists
            without a head are absent.
        """
        gen, *found = await self._redis.mget([GENERATION_KEY, *(head_key(i) for i in playlist_ids)])
        heads = {i: int(v) for i, v in zip(playlist_ids, found, strict=True) if v is not None}
        return (None if gen is None else gen.decode() if isinstance(gen, bytes) else gen), heads

    async def read(self, playlist_id: str) -> tuple[int | None, Snapshot | None]:
        """``(head, snapshot)`` as stored, in one round trip.

        Raises:
            ValueError: the stored snapshot is not one.
        """
        head, doc = await self.read_raw(playlist_id)
        return head, Snapshot.from_json(doc) if doc is not None else None

    async def read_raw(self, playlist_id: str) -> tuple[int | None, bytes | str | None]:
        """``(head, snapshot JSON)`` as stored, in one round trip, undecoded."""
        head, doc = await self._redis.mget(head_key(playlist_id), snapshot_key(playlist_id))
        return (None if head is None else int(head)), doc
