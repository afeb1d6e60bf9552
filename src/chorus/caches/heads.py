"""Head versions: the newest committed version of each playlist, as the response cache checks them.

A cached answer names the version of every playlist it read
(:class:`~chorus.caches.responses.CachedAnswer`); it may be served only
while each of them is still that playlist's head. Two registries answer
"are these still the heads?":

* :class:`LocalHeads` — in-process, for the embedded profile, where every
  commit is this process's own: the store's ``on_commit`` hook
  (:class:`chorus.wiring.CommitHooks`) raises a head the moment its
  transaction committed.
* :class:`SharedHeads` — the full profile: the Redis head keys every API
  process raises after its commits (:mod:`chorus.caches.reader`) and the
  cache projector raises from the event stream; one ``MGET`` checks all the
  playlists of an answer.

A head never goes down. A playlist whose head is not known yet is learned
from a read (:meth:`Heads.read_at`): the version an answer read is committed,
so it is a safe floor; a commit raises it past that. In Redis, "never goes
down" needs more, since Redis can forget: answers are stamped with Redis's
generation, and a head is learned only from a read that began after it went
missing (:mod:`chorus.caches.generation`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Protocol

from chorus.caches.generation import Ticket
from chorus.caches.reader import SnapshotCache

MAX_LOCAL_HEADS = 200_000
"""Playlists whose head :class:`LocalHeads` remembers (least recently used forgotten first)."""


class Heads(Protocol):
    """Where the response cache learns whether the versions an answer read are still current."""

    def ticket(self) -> Ticket:
        """A mark taken before an answer is computed, handed back to :meth:`read_at`.

        Its ``generation`` is the one the answer is kept under (:meth:`current`).
        """
        ...

    def committed(self, playlist_id: str, version: int) -> None:
        """This process committed ``version`` (the store's ``on_commit``)."""
        ...

    async def current(self, versions: Mapping[str, int], generation: str) -> bool:
        """Whether each playlist's head is exactly its version here; ``False`` when unsure.

        Args:
            generation: the ticket's, when the answer was computed; an answer
                of another generation is never current.
        """
        ...

    async def read_at(self, versions: Mapping[str, int], ticket: Ticket) -> bool:
        """An answer read these versions: learn the heads not known yet.

        Returns:
            whether every head is now known (``False``: do not cache the answer).
        """
        ...


class LocalHeads:
    """The heads of the playlists this process committed or read (embedded profile).

    Args:
        max_playlists: how many heads are remembered; the least recently
            used is forgotten beyond that. A forgotten head is learned again
            from a later read, never from a read that began before it was
            forgotten (that read may predate a commit the forgotten head held).
    """

    def __init__(self, max_playlists: int = MAX_LOCAL_HEADS) -> None:
        if max_playlists < 1:
            raise ValueError("max_playlists must be at least 1")
        self._heads: OrderedDict[str, int] = OrderedDict()
        self._max = max_playlists
        self._clock = 0
        self._forgot_at = -1

    def __len__(self) -> int:
        return len(self._heads)

    def head(self, playlist_id: str) -> int | None:
        return self._heads.get(playlist_id)

    def ticket(self) -> Ticket:
        self._clock += 1
        return Ticket(self._clock)

    def committed(self, playlist_id: str, version: int) -> None:
        self._raise(playlist_id, version)

    async def current(self, versions: Mapping[str, int], generation: str = "") -> bool:
        return self.current_now(versions)

    def current_now(self, versions: Mapping[str, int]) -> bool:
        """:meth:`current` without awaiting (nothing here waits)."""
        heads = self._heads
        return all(heads.get(pid) == version for pid, version in versions.items())

    async def read_at(self, versions: Mapping[str, int], ticket: Ticket) -> bool:
        if self._forgot_at >= ticket.clock and any(pid not in self._heads for pid in versions):
            return False
        for pid, version in versions.items():
            if pid not in self._heads:
                self._raise(pid, version)
        return True

    def _raise(self, playlist_id: str, version: int) -> None:
        heads = self._heads
        if version > heads.get(playlist_id, -1):
            heads[playlist_id] = version
        if playlist_id in heads:
            heads.move_to_end(playlist_id)
        while len(heads) > self._max:
            heads.popitem(last=False)
            self._clock += 1
            self._forgot_at = self._clock


class SharedHeads:
    """The heads in Redis, shared by every API process (full profile).

    Reads go through the snapshot cache's client and circuit breaker: while
    Redis fails, :meth:`current` is ``False`` and every answer is computed.
    Commits of this process that Redis has not taken yet count too (the
    snapshot cache remembers them). The one ``MGET`` of :meth:`current` also
    reads Redis's generation: an answer computed in another is not current.
    """

    def __init__(self, snapshots: SnapshotCache) -> None:
        self._snapshots = snapshots

    def ticket(self) -> Ticket:
        return self._snapshots.ticket()

    def committed(self, playlist_id: str, version: int) -> None:
        # The snapshot cache raises Redis's head after every commit already
        # (CommitHooks); nothing more to remember here.
        return None

    async def current(self, versions: Mapping[str, int], generation: str = "") -> bool:
        if not versions:
            return True
        found = await self._snapshots.heads(versions)
        if found is None or found[0] != generation:
            return False
        heads = found[1]
        return all(heads.get(pid) == version for pid, version in versions.items())

    async def read_at(self, versions: Mapping[str, int], ticket: Ticket) -> bool:
        if not versions:
            return True
        return await self._snapshots.raise_heads(versions, ticket)


__all__ = ["MAX_LOCAL_HEADS", "Heads", "LocalHeads", "SharedHeads"]
