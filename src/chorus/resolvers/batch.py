"""``applyOperations``: a batch of edits made offline, committed by the store.

The batch is checked as a whole (:func:`chorus.domain.batch.check_batch`),
its adds' media are looked up in **one** catalog call, and the store applies
it in one transaction (:meth:`chorus.db.store.PlaylistStore.apply_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

from chorus.catalog.protocol import CatalogUnavailable
from chorus.db.store import BatchAnswer, Committed
from chorus.domain.batch import Batch, check_batch, field_of
from chorus.domain.commands import AddEntries
from chorus.domain.errors import DomainError, MediaNotFound, RateLimited
from chorus.resolvers.context import RequestContext
from chorus.resolvers.errors import CATALOG_UNAVAILABLE, ServiceUnavailable
from chorus.resolvers.mutations import well_formed_media

__all__ = ["BatchAnswer", "BatchResult", "Committed", "apply_operations"]


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a batch did: one answer per operation, or the error that refused it whole."""

    playlist_id: str | None
    answer: BatchAnswer | None = None
    error: DomainError | None = None


async def _unknown_media(ctx: RequestContext, batch: Batch) -> dict[int, DomainError]:
    """The adds (by index) naming a media the catalog does not know, in one catalog call.

    Raises:
        ServiceUnavailable: the catalog does not answer.
    """
    limits = ctx.services.limits
    # An add over the limit is refused by the domain; the catalog is not asked for it.
    adds = [
        (i, op.command)
        for i, op in enumerate(batch.operations)
        if isinstance(op.command, AddEntries)
        and len(op.command.media_ids) <= limits.max_media_per_add
    ]
    media = (m for _, add in adds for m in add.media_ids if well_formed_media(m, limits))
    wanted = list(dict.fromkeys(media))
    if not wanted:
        return {}
    try:
        known = await ctx.services.catalog.get_many(wanted)
    except CatalogUnavailable:
        raise ServiceUnavailable(CATALOG_UNAVAILABLE) from None
    refused: dict[int, DomainError] = {}
    wanted_set = set(wanted)
    for i, add in adds:
        for j, media_id in enumerate(add.media_ids):
            if media_id in wanted_set and media_id not in known:
                refused[i] = MediaNotFound(
                    f"media {media_id!r} is not in the catalog",
                    field=field_of(i, batch.operations[i], "mediaIds", str(j)),
                )
                break
    return refused


async def _committed(ctx: RequestContext, batch: Batch, actor: str) -> int:
    """How many of ``batch``'s operations ``actor`` already committed (one indexed read each)."""
    found = 0
    for operation in batch.operations:
        try:
            found += await ctx.services.store.replay(operation.command, actor) is not None
        except DomainError:  # a malformed or reused id: the batch itself answers it
            continue
    return found


async def apply_operations(ctx: RequestContext, batch: Batch) -> BatchResult:
    """Apply ``batch`` as the viewer.

    The rate limit (when set) is charged one token per operation; a refused
    batch costs nothing, and replayed operations are given back.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: the batch adds media while the catalog does not answer.
    """
    actor = ctx.viewer()
    try:
        check_batch(batch, ctx.services.limits)
    except DomainError as error:
        return BatchResult(batch.playlist_id, error=error)
    cost = len(batch.operations)
    limiter = ctx.services.rate_limiter
    if limiter is not None and not limiter.allow(actor, cost):
        # A retry of what already committed costs nothing (as a single edit's
        # retry): charge only the operations not committed yet.
        committed = await _committed(ctx, batch, actor)
        cost -= committed
        if cost > 0 and not limiter.allow(actor, cost):
            wait = limiter.retry_after_ms(actor, cost)
            refusal = RateLimited(
                f"more than {limiter.per_minute} mutations a minute (a batch counts each of "
                f"its {cost} operations not yet committed); retry in about {wait} ms with "
                "the same operationIds",
                retry_after_ms=wait,
            )
            return BatchResult(batch.playlist_id, error=refusal)
    else:
        committed = 0
    try:
        refused = await _unknown_media(ctx, batch)
        answer = await ctx.services.store.apply_batch(batch, actor, refused)
    except DomainError as error:
        if limiter is not None:
            limiter.refund(actor, cost)
        return BatchResult(batch.playlist_id, error=error)
    except BaseException:
        if limiter is not None:
            limiter.refund(actor, cost)
        raise
    free = sum(1 for a in answer.answers if not isinstance(a, DomainError) and a.replayed)
    free -= committed  # those were not charged
    if limiter is not None and free > 0:
        limiter.refund(actor, free)
    ctx.loaders.forget(batch.playlist_id)
    return BatchResult(batch.playlist_id, answer=answer)
