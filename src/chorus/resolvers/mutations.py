"""Mutations: one domain command each, committed by the store.

Domain failures come back inside :class:`MutationResult` (they become
``userErrors``); request-level failures (no token, catalog down) raise.
"""

from __future__ import annotations

from dataclasses import dataclass

from chorus.catalog.protocol import CatalogUnavailable
from chorus.db.store import Committed
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    LikeMedia,
    PlaylistCommand,
    UnlikeMedia,
)
from chorus.domain.errors import (
    DomainError,
    InvalidInput,
    MediaNotFound,
    OperationIdReused,
    RateLimited,
)
from chorus.domain.limits import Limits
from chorus.domain.validation import check_id
from chorus.resolvers.context import RequestContext
from chorus.resolvers.errors import CATALOG_UNAVAILABLE, ServiceUnavailable


@dataclass(frozen=True, slots=True)
class MutationResult:
    """What a mutation did: a commit (maybe replayed) or a domain error."""

    operation_id: str
    committed: Committed | None = None
    error: DomainError | None = None
    playlist_id: str | None = None


def well_formed_media(media_id: str, limits: Limits) -> bool:
    """Whether the catalog may be asked for ``media_id`` (the domain refuses the others)."""
    try:
        check_id(media_id, ("mediaIds",), limits, "a media id")
    except InvalidInput:
        return False
    return True


async def _check_media(
    ctx: RequestContext, media_ids: tuple[str, ...], field: tuple[str, ...] = ("mediaIds",)
) -> None:
    """Raises :class:`MediaNotFound` for the first media id the catalog does not know.

    Malformed ids are left to the domain, which refuses them as ``INVALID_INPUT``
    after its access checks; some (a lone surrogate, NUL) no catalog could even look up.
    """
    wanted = [m for m in dict.fromkeys(media_ids) if well_formed_media(m, ctx.services.limits)]
    try:
        known = await ctx.services.catalog.get_many(wanted)
    except CatalogUnavailable:
        raise ServiceUnavailable(CATALOG_UNAVAILABLE) from None
    for i, media_id in enumerate(media_ids):
        if media_id in wanted and media_id not in known:
            at = (*field, str(i)) if field == ("mediaIds",) else field
            raise MediaNotFound(f"media {media_id!r} is not in the catalog", field=at)


async def _check_media_unless_replay(
    ctx: RequestContext, command: AddEntries | LikeMedia, actor: str
) -> Committed | None:
    """Check the media of ``command``; if the catalog refuses, answer a committed retry instead.

    A retry must learn whether its edit committed even while the catalog is
    down (or has since dropped a track), so only a failed check pays for the
    operation-id look-up.

    Raises:
        ServiceUnavailable, MediaNotFound: the check failed and ``command``
            has not committed; ``OperationIdReused``: its id committed with
            another input.
    """
    try:
        if isinstance(command, LikeMedia):
            await _check_media(ctx, (command.media_id,), ("mediaId",))
        else:
            await _check_media(ctx, command.media_ids)
    except (ServiceUnavailable, MediaNotFound):
        stored = await ctx.services.store.replay(command, actor)
        if stored is None:
            raise
        return stored
    return None


async def _charge(
    ctx: RequestContext, command: CreatePlaylist | PlaylistCommand, actor: str
) -> Committed | DomainError | None:
    """Take the command's token from the actor's rate limit, if one is set.

    ``None``: go ahead (a token taken, or no limit). When the bucket is
    empty, a retry of a command that already committed is still answered:
    its stored result (``replayed``), or ``OPERATION_ID_REUSED`` for the same
    operation id with another input; otherwise ``RATE_LIMITED``, and nothing
    is committed.
    """
    limiter = ctx.services.rate_limiter
    if limiter is None or limiter.allow(actor):
        return None
    try:
        stored = await ctx.services.store.replay(command, actor)
    except DomainError as error:
        return error
    if stored is not None:
        return stored
    wait = limiter.retry_after_ms(actor)
    return RateLimited(
        f"more than {limiter.per_minute} mutations a minute; retry in about {wait} ms "
        "with the same operationId",
        retry_after_ms=wait,
    )


def _refund_if_free(ctx: RequestContext, actor: str, answer: Committed | DomainError) -> None:
    """A replay (or a reused operation id) found under the lock cost nothing: give its token back.

    This is the race of a retry with its own first attempt: both took a
    token, the first committed, the retry waited for it and replays.
    """
    limiter = ctx.services.rate_limiter
    free = isinstance(answer, OperationIdReused) or (
        isinstance(answer, Committed) and answer.replayed
    )
    if limiter is not None and free:
        limiter.refund(actor)


async def create_playlist(ctx: RequestContext, command: CreatePlaylist) -> MutationResult:
    """Create a playlist owned by the viewer.

    A retry of a committed create returns its stored result and costs none
    of the rate limit (:func:`_charge`).

    Raises:
        Unauthenticated: no valid token.
    """
    actor = ctx.viewer()
    admitted = await _charge(ctx, command, actor)
    if isinstance(admitted, DomainError):
        return MutationResult(command.operation_id, error=admitted)
    if admitted is not None:
        committed = admitted
    else:
        try:
            committed = await ctx.services.store.create(command, actor)
        except DomainError as error:
            _refund_if_free(ctx, actor, error)
            return MutationResult(command.operation_id, error=error)
        _refund_if_free(ctx, actor, committed)
    return MutationResult(
        command.operation_id, committed, playlist_id=committed.outcome.playlist_id
    )


async def execute(ctx: RequestContext, command: PlaylistCommand) -> MutationResult:
    """Run ``command`` as the viewer.

    A retry of a committed command returns its stored result and costs none
    of the rate limit (:func:`_charge`).

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: adding media while the catalog does not answer.
    """
    actor = ctx.viewer()
    admitted = await _charge(ctx, command, actor)
    if isinstance(admitted, DomainError):
        return MutationResult(command.operation_id, error=admitted, playlist_id=command.playlist_id)
    if admitted is not None:
        return MutationResult(command.operation_id, admitted, playlist_id=command.playlist_id)
    try:
        if isinstance(command, LikeMedia) or (
            isinstance(command, AddEntries)
            and len(command.media_ids) <= ctx.services.limits.max_media_per_add
        ):
            stored = await _check_media_unless_replay(ctx, command, actor)
            if stored is not None:
                _refund_if_free(ctx, actor, stored)
                return MutationResult(command.operation_id, stored, playlist_id=command.playlist_id)
        committed = await ctx.services.store.execute(command, actor)
    except DomainError as error:
        _refund_if_free(ctx, actor, error)
        return MutationResult(command.operation_id, error=error, playlist_id=command.playlist_id)
    _refund_if_free(ctx, actor, committed)
    ctx.loaders.forget(command.playlist_id)
    return MutationResult(command.operation_id, committed, playlist_id=command.playlist_id)


async def like(
    ctx: RequestContext, operation_id: str, media_id: str, *, like: bool
) -> MutationResult:
    """Like (``like=True``) or unlike ``media_id`` in the viewer's Liked Songs.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: liking while the catalog does not answer.
    """
    playlist_id = ctx.services.store.liked_songs_id(ctx.viewer())
    kind = LikeMedia if like else UnlikeMedia
    return await execute(ctx, kind(playlist_id, operation_id, media_id))
