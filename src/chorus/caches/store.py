"""The writer of snapshots and head versions (the cache projector's, and the API's head raises).

Every write is one of :mod:`chorus.caches.scripts`, idempotent by version.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from redis.asyncio import Redis

from chorus.caches import scripts
from chorus.caches.keys import head_key, snapshot_key
from chorus.caches.snapshot import Snapshot


class SnapshotStore:
    """Writes snapshots and head versions; every write is idempotent by version.

    Errors of the Redis client (``redis.RedisError``, ``OSError``) propagate:
    the cache projector retries them.
    """

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._put = redis.register_script(scripts.PUT)
        self._remove = redis.register_script(scripts.REMOVE)
        self._bump = redis.register_script(scripts.BUMP)
        self._versions = redis.register_script(scripts.VERSIONS)

    async def put(self, snapshot: Snapshot) -> bool:
        """Store ``snapshot`` unless the stored one or the head is newer; raise the head.

        Returns:
            whether the snapshot was written.
        """
        return await self.write([snapshot], {}) == 1

    async def remove(self, playlist_id: str, version: int) -> bool:
        """Drop the snapshot (not PUBLIC at ``version``, or deleted) unless a newer one is stored.

        Returns:
            whether a snapshot was deleted. The head is raised to ``version`` either way.
        """
        return await self.write([], {playlist_id: version}) == 1

    async def write(self, puts: Sequence[Snapshot], removes: dict[str, int]) -> int:
        """:meth:`put` and :meth:`remove` for many playlists in one pipeline.

        Args:
            puts: snapshots to store.
            removes: playlist id → the version at which it stopped being PUBLIC.

        Returns:
            how many snapshots were written or deleted.
        """
        async with self._redis.pipeline(transaction=False) as pipe:
            for snapshot in puts:
                pid = snapshot.playlist.id
                await self._put(
                    [snapshot_key(pid), head_key(pid)],
                    [snapshot.version, snapshot.to_json()],
                    client=pipe,
                )
            for pid, version in removes.items():
                await self._remove([snapshot_key(pid), head_key(pid)], [version], client=pipe)
            results = await pipe.execute()
        return sum(1 for r in results if r)

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

    async def heads(self, playlist_ids: Sequence[str]) -> dict[str, int]:
        """The head versions of these playlists in one ``MGET``; those without one are absent."""
        if not playlist_ids:
            return {}
        found = await self._redis.mget([head_key(i) for i in playlist_ids])
        return {i: int(v) for i, v in zip(playlist_ids, found, strict=True) if v is not None}

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
