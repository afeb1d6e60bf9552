"""What waits in an owner queue (:mod:`chorus.db.owners`) and what it is answered.

A single command (:class:`QueuedCommand`) is answered with its
:class:`~chorus.db.idempotency.Committed`; a batch (:class:`QueuedBatch`,
``applyOperations``) with a :class:`BatchAnswer`, one answer per operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from chorus.db.idempotency import Committed
from chorus.domain.batch import Batch
from chorus.domain.commands import PlaylistCommand
from chorus.domain.errors import DomainError
from chorus.tracing import current_traceparent


@dataclass(frozen=True, slots=True)
class QueuedCommand:
    """A command waiting in an owner queue, with its request hash."""

    command: PlaylistCommand
    actor_id: str
    digest: str
    traceparent: str | None = field(default_factory=current_traceparent)
    """The submitting request's trace context: the owner's task is not the request's."""

    @property
    def key(self) -> tuple[str, str]:
        """The idempotency key: operation ids are scoped to their actor."""
        return self.actor_id, self.command.operation_id


@dataclass(frozen=True, slots=True)
class QueuedBatch:
    """A batch of one actor's edits, checked by :func:`chorus.domain.batch.check_batch`.

    ``refused`` holds the operations refused before the batch was queued (by
    index: an add whose media the catalog does not know); each is answered with
    its error unless it had committed already, when it replays.
    """

    batch: Batch
    actor_id: str
    refused: Mapping[int, DomainError] = field(default_factory=dict)
    traceparent: str | None = field(default_factory=current_traceparent)
    """The submitting request's trace context (:class:`QueuedCommand`'s)."""

    @property
    def keys(self) -> list[tuple[str, str]]:
        """The idempotency keys of every operation."""
        return [(self.actor_id, op.operation_id) for op in self.batch.operations]


@dataclass(frozen=True, slots=True)
class BatchAnswer:
    """One answer per operation of a batch, in order, and where the playlist ended.

    Attributes:
        answers: each operation's commit (maybe replayed) or domain error.
        version: the playlist's version once the batch was applied (its last
            commit, or the version it found when nothing committed); ``None``
            when the playlist was not found.
    """

    answers: tuple[Committed | DomainError, ...]
    version: int | None


Queued = QueuedCommand | QueuedBatch
Answer = Committed | BatchAnswer


def weight(item: Queued) -> int:
    """Decisions ``item`` costs a group: one per command, one per operation of a batch."""
    return len(item.batch.operations) if isinstance(item, QueuedBatch) else 1
