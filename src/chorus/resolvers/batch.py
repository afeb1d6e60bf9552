"""``applyOperations``: a batch of edits made offline, committed by the store.

The batch is checked as a whole (:func:`chorus.domain.batch.check_batch`,
here and only here), admitted (:func:`chorus.resolvers.admission.admit`: a
rate-limit token per operation), its adds' media are looked up in **one**
catalog call, and the store applies it in one transaction
(:meth:`chorus.db.store.PlaylistStore.apply_batch`).
"""

from __future__ import annotations

from chorus.db.store import BatchAnswer, Committed
from chorus.domain.batch import Batch, check_batch, field_of
from chorus.domain.commands import AddEntries
from chorus.domain.errors import DomainError
from chorus.resolvers.admission import MutationOutcome, admit
from chorus.resolvers.context import RequestContext
from chorus.resolvers.media_check import unknown_media

__all__ = ["BatchAnswer", "BatchOutcome", "Committed", "apply_operations"]

BatchOutcome = MutationOutcome[BatchAnswer | None]
"""A batch's outcome: one answer per operation, or (``None``) the error that refused it whole."""


async def _unknown_media(ctx: RequestContext, batch: Batch) -> dict[int, DomainError]:
    """The adds (by index) naming a media the catalog does not know, in one catalog call.

    Raises:
        ServiceUnavailable: the catalog does not answer.
    """
    adds = [
        (i, op.command.media_ids, lambda j, i=i, op=op: field_of(i, op, "mediaIds", str(j)))
        for i, op in enumerate(batch.operations)
        if isinstance(op.command, AddEntries)
    ]
    return dict(await unknown_media(ctx, adds))


async def apply_operations(ctx: RequestContext, batch: Batch) -> BatchOutcome:
    """Apply ``batch`` as the viewer.

    The rate limit (when set) is charged one token per operation; a refused
    batch costs nothing, and replayed operations are given back.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: the batch adds media while the catalog does not answer.
    """
    ctx.viewer()
    try:
        check_batch(batch, ctx.services.limits)
    except DomainError as error:
        return MutationOutcome(None, error, playlist_id=batch.playlist_id)
    admission = await admit(ctx, [op.command for op in batch.operations], batch=True)
    if admission.answer is not None:
        assert isinstance(admission.answer, DomainError)  # a batch replays in the store
        return MutationOutcome(None, admission.answer, playlist_id=batch.playlist_id)
    try:
        refused = await _unknown_media(ctx, batch)
        answer = await ctx.services.store.apply_batch(batch, admission.actor, refused, checked=True)
    except DomainError as error:
        admission.refund()
        return MutationOutcome(None, error, playlist_id=batch.playlist_id)
    except BaseException:
        admission.refund()
        raise
    admission.settle(answer.answers)
    ctx.reads.forget(batch.playlist_id)
    return MutationOutcome(answer, playlist_id=batch.playlist_id)
