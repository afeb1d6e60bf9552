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
from chorus.domain.errors import DomainError, InvalidInput, MediaNotFound, RateLimited
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


def _well_formed(media_id: str, limits: Limits) -> bool:
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
    wanted = [m for m in dict.fromkeys(media_ids) if _well_formed(m, ctx.services.limits)]
    try:
        known = await ctx.services.catalog.get_many(wanted)
    except CatalogUnavailable:
        raise ServiceUnavailable(CATALOG_UNAVAILABLE) from None
    for i, media_id in enumerate(media_ids):
        if media_id in wanted and media_id not in known:
            at = (*field, str(i)) if field == ("mediaIds",) else field
            raise MediaNotFound(f"media {media_id!r} is not in the catalog", field=at)


def _rate_limited(ctx: RequestContext, actor: str) -> RateLimited | None:
    limiter = ctx.services.rate_limiter
    if limiter is None or limiter.allow(actor):
        return None
    return RateLimited(f"more than {limiter.per_minute} mutations a minute; retry later")


async def create_playlist(ctx: RequestContext, command: CreatePlaylist) -> MutationResult:
    """Create a playlist owned by the viewer.

    Raises:
        Unauthenticated: no valid token.
    """
    actor = ctx.viewer()
    if limited := _rate_limited(ctx, actor):
        return MutationResult(command.operation_id, error=limited)
    try:
        committed = await ctx.services.store.create(command, actor)
    except DomainError as error:
        return MutationResult(command.operation_id, error=error)
    return MutationResult(
        command.operation_id, committed, playlist_id=committed.outcome.playlist_id
    )


async def execute(ctx: RequestContext, command: PlaylistCommand) -> MutationResult:
    """Run ``command`` as the viewer.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: adding media while the catalog does not answer.
    """
    actor = ctx.viewer()
    if limited := _rate_limited(ctx, actor):
        return MutationResult(command.operation_id, error=limited, playlist_id=command.playlist_id)
    try:
        if (
            isinstance(command, AddEntries)
            and len(command.media_ids) <= ctx.services.limits.max_media_per_add
        ):
            await _check_media(ctx, command.media_ids)
        if isinstance(command, LikeMedia):
            await _check_media(ctx, (command.media_id,), ("mediaId",))
        committed = await ctx.services.store.execute(command, actor)
    except DomainError as error:
        return MutationResult(command.operation_id, error=error, playlist_id=command.playlist_id)
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
