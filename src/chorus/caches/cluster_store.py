"""Snapshots and heads on a Redis Cluster: one generation per slot.

On a cluster each primary forgets on its own (a failover, a restart) and a
slot can move, so the one generation of :mod:`chorus.caches.generation`
becomes one per slot (:func:`~chorus.caches.keys.slot_generation_key`),
stored in that slot beside the playlists' heads and snapshots, so that every
script touches one slot. Every script of this store refuses unless the slot's
generation began on the node answering (:func:`~chorus.caches.scripts.on_cluster`);
:data:`~chorus.caches.scripts.ENSURE_SLOT` then deletes that slot's heads and
snapshots and begins a new generation, as :data:`~chorus.caches.scripts.ENSURE`
does for a whole single Redis. A moved slot counts as forgotten too: it costs
SQL reads, never a stale answer.

This process's belief is kept per slot (:class:`SlotGenerations`); a ticket
carries the belief's epoch, which grows whenever any slot's belief changes,
so a write uses a slot's belief only if it was held before the ticket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection, Mapping, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from chorus.caches import scripts
from chorus.caches.generation import Generation, Ticket, fresh_token
from chorus.caches.keys import head_key, playlist_slot, slot_generation_key, snapshot_key
from chorus.caches.snapshot import Snapshot
from chorus.caches.snapshot_writer import REFUSED, SnapshotStore, StaleTicket

EPOCH = "slots:"
"""The prefix of a cluster ticket's ``generation``: ``slots:<epoch>``."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SlotGenerations(Generation):
    """This process's belief of each slot's generation (learned from Redis only).

    ``current`` is ``slots:<epoch>``: the stamp of cached answers, current
    only while no slot's belief changed and every slot read still matches.
    """

    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0
        self.current = f"{EPOCH}0"
        self.evicted = 0
        self._slots: dict[int, tuple[str, int, int]] = {}
        """Slot → (generation, evicted_keys of its node or -1, epoch it was learned at)."""

    def ticket(self, clock: int = 0) -> Ticket:
        return Ticket(clock, f"{EPOCH}{self.epoch}", -1)

    def saw(self, generation: str) -> None:
        return None  # the store learned each slot already (:meth:`learn_slot`)

    def learn_slot(self, slot: int, generation: str, evicted: int) -> None:
        """Believe ``generation`` for ``slot`` from now on (the epoch grows if it changed)."""
        held = self._slots.get(slot)
        if held is not None and held[0] == generation and held[1] == evicted:
            return
        self.epoch += 1
        self.current = f"{EPOCH}{self.epoch}"
        self._slots[slot] = (generation, evicted, self.epoch)

    def forget_slot(self, slot: int) -> None:
        if self._slots.pop(slot, None) is not None:
            self.epoch += 1
            self.current = f"{EPOCH}{self.epoch}"

    def at(self, slot: int, ticket: Ticket) -> tuple[str, int]:
        """``(generation, evicted)`` believed for ``slot`` when ``ticket`` was taken.

        ``("", -1)`` when unknown then: Redis refuses the write.
        """
        held = self._slots.get(slot)
        epoch = int(ticket.generation.removeprefix(EPOCH) or -1) if ticket.generation else -1
        if held is None or held[2] > epoch:
            return "", -1
        return held[0], held[1]

    def believed(self, slot: int) -> str | None:
        held = self._slots.get(slot)
        return None if held is None else held[0]


def _by_slot(playlist_ids: Collection[str]) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = {}
    for pid in playlist_ids:
        groups.setdefault(playlist_slot(pid), []).append(pid)
    return groups


async def _each(calls: Sequence[Awaitable[Any]]) -> list[Any]:
    """Every call at once (each slot's scripts may go to another node), in order."""
    return list(await asyncio.gather(*calls))


class ClusterSnapshotStore(SnapshotStore):
    """:class:`SnapshotStore` on a Redis Cluster (every script on one slot).

    Args:
        redis: a ``RedisCluster`` client.
        generation: the per-slot belief; a fresh one by default.
    """

    def __init__(self, redis: RedisCluster, generation: SlotGenerations | None = None) -> None:
        self.generation: SlotGenerations = generation or SlotGenerations()
        super().__init__(redis, self.generation)  # type: ignore[arg-type]
        self._ensure_slot = redis.register_script(scripts.ENSURE_SLOT)
        self._put = redis.register_script(scripts.on_cluster(scripts.PUT, 3))
        self._remove = redis.register_script(scripts.on_cluster(scripts.REMOVE, 3))
        self._learn = redis.register_script(scripts.on_cluster(scripts.LEARN, 1))
        self._heads = redis.register_script(scripts.HEADS)
        self._read = redis.register_script(scripts.READ)
        self._unknown: set[int] = set()

    async def ensure(self) -> str:
        """Check the slots found unknown or refused since the last call; learn them."""
        slots, self._unknown = self._unknown, set()
        await _each([self.ensure_slot(slot) for slot in slots])
        return f"{EPOCH}{self.generation.epoch}"

    async def ensure_slot(self, slot: int) -> None:
        """Check one slot's generation (a new one if its node forgot); learn it."""
        generation, evicted = await self._ensure_slot(
            [slot_generation_key(slot)], [fresh_token(), slot]
        )
        self.generation.learn_slot(slot, _text(generation), int(evicted))

    async def ticket(self) -> Ticket:
        return self.generation.ticket()

    async def write(self, puts: Sequence[Snapshot], removes: dict[str, int], ticket: Ticket) -> int:
        calls: list[Awaitable[Any]] = []
        slots: list[int] = []
        for snapshot in puts:
            pid = snapshot.playlist.id
            slot = playlist_slot(pid)
            gen, evicted = self.generation.at(slot, ticket)
            keys = [snapshot_key(pid), head_key(pid), slot_generation_key(slot)]
            calls.append(self._put(keys, [snapshot.version, snapshot.to_json(), gen, evicted]))
            slots.append(slot)
        for pid, version in removes.items():
            slot = playlist_slot(pid)
            gen, evicted = self.generation.at(slot, ticket)
            keys = [snapshot_key(pid), head_key(pid), slot_generation_key(slot)]
            calls.append(self._remove(keys, [version, gen, evicted]))
            slots.append(slot)
        results = await _each(calls)
        refused = {slot for slot, r in zip(slots, results, strict=True) if r == REFUSED}
        if refused:
            self._unknown |= refused
            await self.ensure()
            raise StaleTicket("Redis forgot since the snapshots were read")
        return sum(1 for r in results if r == 1)

    async def learn_heads(self, versions: Mapping[str, int], ticket: Ticket) -> bool:
        groups = _by_slot(list(versions))
        calls = []
        for slot, ids in groups.items():
            gen, evicted = self.generation.at(slot, ticket)
            keys = [slot_generation_key(slot), *(head_key(i) for i in ids)]
            calls.append(self._learn(keys, [gen, evicted, *(versions[i] for i in ids)]))
        results = await _each(calls)
        refused = {slot for slot, r in zip(groups, results, strict=True) if r != 1}
        if not refused:
            return True
        self._unknown |= refused
        await self.ensure()
        return False

    async def bump_heads(self, versions: dict[str, int]) -> None:
        await _each([self.bump_head(pid, v) for pid, v in versions.items()])

    async def versions(self, playlist_ids: Collection[str]) -> dict[str, int]:
        groups = list(_by_slot(playlist_ids).values())
        found = await _each([self._versions([snapshot_key(i) for i in ids], []) for ids in groups])
        return {
            i: int(v)
            for ids, got in zip(groups, found, strict=True)
            for i, v in zip(ids, got, strict=True)
            if int(v) >= 0
        }

    async def read_raw(self, playlist_id: str) -> tuple[int | None, bytes | str | None]:
        """``(head, snapshot JSON)``; ``(None, None)`` while the slot's generation is
        not one begun on the node answering (checked by the next :meth:`ensure`)."""
        slot = playlist_slot(playlist_id)
        keys = [slot_generation_key(slot), head_key(playlist_id), snapshot_key(playlist_id)]
        head, doc, own = await self._read(keys, [])
        if not own:
            self._unknown.add(slot)
            return None, None
        return (None if head is None else int(head)), doc

    async def heads(self, playlist_ids: Sequence[str]) -> tuple[str | None, dict[str, int]]:
        """``(slots:<epoch>, heads)``, or ``(None, heads)`` when a slot's generation is
        not one this process holds (it is checked by the next :meth:`ensure`)."""
        groups = _by_slot(playlist_ids)
        replies = await _each(
            [
                self._heads([slot_generation_key(slot), *(head_key(i) for i in ids)], [])
                for slot, ids in groups.items()
            ]
        )
        heads: dict[str, int] = {}
        matched = True
        for (slot, ids), (gen, *found) in zip(groups.items(), replies, strict=True):
            if gen is None or _text(gen) != self.generation.believed(slot):
                matched = False
                self._unknown.add(slot)
            heads.update({i: int(v) for i, v in zip(ids, found, strict=True) if v is not None})
        return (f"{EPOCH}{self.generation.epoch}" if matched else None), heads


__all__ = ["ClusterSnapshotStore", "SlotGenerations", "snapshot_store"]


def snapshot_store(redis: Any, generation: Generation | None = None) -> SnapshotStore:
    """The store for ``redis``: :class:`ClusterSnapshotStore` on a ``RedisCluster``."""
    if isinstance(redis, RedisCluster):
        slots = generation if isinstance(generation, SlotGenerations) else None
        return ClusterSnapshotStore(redis, slots)
    return SnapshotStore(redis, generation)
