"""The owner queue: each playlist's commands wait at one place in this process.

DESIGN §1 puts one owner in front of each playlist. Here it is a queue per
playlist and an **owner** task that takes what is queued and hands it, as a
group, to one commit (:meth:`chorus.db.store.PlaylistStore.execute`'s group
commit: one transaction, one row lock, each command still its own version).
The owner exists only while the queue holds commands: the first command to
arrive starts it, and it ends when it finds the queue empty, so nothing runs
in the background while a playlist is quiet and nothing needs stopping.

Limits, per playlist and process (DESIGN §4, ``RATE_LIMITED``):

* at most ``size`` commands wait; one more is refused with a retry hint;
* at most ``per_user`` of them from one user, so a user who floods a
  playlist fills only their share and the others still get in;
* a group takes one command from each waiting user in turn (round robin,
  users in the order they arrived), at most ``max_group``, so a user with a
  long queue does not hold the others back either.

Across processes the playlist row lock still orders the groups; see
docs/semantics.md for routing a playlist to one owner process and what
happens when an owner stops. Nothing here speaks SQL.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from chorus.domain.errors import RateLimited
from chorus.metrics import GROUP_COMMIT_SIZE, OWNER_QUEUE_REFUSED, OWNER_QUEUE_WAITING

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_HINT_MS = 50
"""The retry hint before any group has been timed (milliseconds)."""


@dataclass(eq=False, slots=True)
class Waiting(Generic[T, R]):
    """One queued command: what to commit, who sent it, where its answer goes."""

    item: T
    user_id: str
    answer: asyncio.Future[R]


@dataclass(slots=True)
class _Queue(Generic[T, R]):
    """One playlist's waiting commands, per user in arrival order of the users."""

    by_user: OrderedDict[str, deque[Waiting[T, R]]] = field(default_factory=OrderedDict)
    count: int = 0
    owner: asyncio.Task[None] | None = None

    def add(self, waiting: Waiting[T, R]) -> None:
        self.by_user.setdefault(waiting.user_id, deque()).append(waiting)
        self.count += 1

    def waiting_of(self, user_id: str) -> int:
        mine = self.by_user.get(user_id)
        return len(mine) if mine else 0

    def take(self, limit: int, weight: Callable[[T], int] = lambda _: 1) -> list[Waiting[T, R]]:
        """Commands weighing up to ``limit`` (at least one), one per user in turn.

        A user still waiting goes last.
        """
        group: list[Waiting[T, R]] = []
        taken = 0
        while self.by_user and taken < limit:
            for user_id in list(self.by_user):
                mine = self.by_user[user_id]
                cost = weight(mine[0].item)
                if taken >= limit or (group and taken + cost > limit):
                    taken = limit  # full: the next group starts with this one
                    break
                taken += cost
                group.append(mine.popleft())
                if mine:
                    self.by_user.move_to_end(user_id)
                else:
                    del self.by_user[user_id]
        self.count -= len(group)
        return group


class OwnerQueues(Generic[T, R]):
    """The owner queues of one process, one per playlist with waiting commands.

    Args:
        commit: commits one group of one playlist, in the order given, and
            returns one answer per command (a result or the exception to raise
            to its sender), in the same order. It must not raise.
        size: commands that may wait per playlist (``CHORUS_OWNER_QUEUE_SIZE``).
        per_user: of which at most this many from one user
            (``CHORUS_OWNER_QUEUE_PER_USER``).
        max_group: commands committed together at most (by ``weight``).
        weight: what one queued item counts against ``max_group`` (a batch of
            edits: its operations); always at least one item is taken.
        clock: monotonic seconds, for the retry hint.
    """

    def __init__(
        self,
        commit: Callable[[str, Sequence[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        size: int,
        per_user: int,
        max_group: int,
        weight: Callable[[T], int] = lambda _: 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 1 or per_user < 1 or max_group < 1:
            raise ValueError("size, per_user and max_group must be at least 1")
        self._commit = commit
        self.size = size
        self.per_user = per_user
        self.max_group = max_group
        self._weight = weight
        self._clock = clock
        self._queues: dict[str, _Queue[T, R]] = {}
        self._per_command_s: float | None = None
        """A moving average of a group's commit time per command."""

    def waiting(self, playlist_id: str) -> int:
        """Commands waiting for ``playlist_id`` now (not the group being committed)."""
        queue = self._queues.get(playlist_id)
        return queue.count if queue else 0

    async def submit(self, playlist_id: str, user_id: str, item: T) -> R:
        """Queue ``item`` for the playlist's owner and wait for its answer.

        A caller cancelled while waiting does not take its command back: it
        commits (or not) with its group, and a retry with the same operation id
        replays it.

        Raises:
            RateLimited: the playlist's queue, or this user's share of it, is
                full; nothing was queued. ``retry_after_ms`` says when a retry
                may find room.
            BaseException: whatever the commit answered for this command.
        """
        queue = self._queues.get(playlist_id)
        if queue is None:
            queue = self._queues[playlist_id] = _Queue()
        if queue.count >= self.size:
            raise self._refusal(queue, f"{queue.count} commands wait for this playlist")
        if queue.waiting_of(user_id) >= self.per_user:
            raise self._refusal(
                queue, f"{self.per_user} of your commands wait for this playlist already"
            )
        answer: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        queue.add(Waiting(item, user_id, answer))
        OWNER_QUEUE_WAITING.inc()
        if queue.owner is None:
            queue.owner = asyncio.create_task(self._own(playlist_id, queue), name="owner")
        return await answer

    def _refusal(self, queue: _Queue[T, R], why: str) -> RateLimited:
        # The queue ahead drains at the recent commit time per command.
        OWNER_QUEUE_REFUSED.inc()
        per_command_s = self._per_command_s or DEFAULT_HINT_MS / 1000
        retry_ms = max(1, math.ceil((queue.count + 1) * per_command_s * 1000))
        return RateLimited(
            f"{why}; retry in about {retry_ms} ms with the same operationId",
            retry_after_ms=retry_ms,
        )

    async def _own(self, playlist_id: str, queue: _Queue[T, R]) -> None:
        """Commit groups until the queue is empty, then leave (no await after the check)."""
        try:
            while queue.count:
                group = queue.take(self.max_group, self._weight)
                OWNER_QUEUE_WAITING.dec(len(group))
                GROUP_COMMIT_SIZE.observe(len(group))
                started = self._clock()
                try:
                    answers = await self._commit(playlist_id, [w.item for w in group])
                except BaseException as error:  # commit must not raise; if it does, tell all
                    answers = [error] * len(group)
                    if isinstance(error, asyncio.CancelledError):
                        self._answer(group, answers)
                        raise
                self._observe((self._clock() - started) / len(group))
                self._answer(group, answers)
        finally:
            queue.owner = None
            if queue.count:  # cancelled with commands still waiting: they are not answered
                left = queue.take(queue.count)
                OWNER_QUEUE_WAITING.dec(len(left))
                for waiting in left:
                    waiting.answer.cancel()
            if self._queues.get(playlist_id) is queue:
                del self._queues[playlist_id]

    @staticmethod
    def _answer(group: Sequence[Waiting[T, R]], answers: Sequence[R | BaseException]) -> None:
        for waiting, answer in zip(group, answers, strict=True):
            if waiting.answer.done():  # its sender was cancelled
                continue
            if isinstance(answer, BaseException):
                waiting.answer.set_exception(answer)
            else:
                waiting.answer.set_result(answer)

    def _observe(self, per_command_s: float) -> None:
        previous = self._per_command_s
        self._per_command_s = (
            per_command_s if previous is None else 0.8 * previous + 0.2 * per_command_s
        )
