"""Mutations: one domain command each, admitted (:mod:`chorus.resolvers.admission`),
committed by the store.

Domain failures come back inside the :class:`~chorus.resolvers.admission.MutationOutcome`
(they become ``userErrors``); request-level failures (no token, catalog down) raise.
"""

from __future__ import annotations

from collections.abc import Sequence

from chorus.db.store import Committed
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    LikeMedia,
    PlaylistCommand,
    UnlikeMedia,
)
from chorus.domain.errors import DomainError, MediaNotFound
from chorus.resolvers.admission import Admission, Answer, MutationOutcome, admit
from chorus.resolvers.context import RequestContext
from chorus.resolvers.media_check import Field, unknown_media
from chorus.resolvers.request_errors import ServiceUnavailable

CommandOutcome = MutationOutcome[Committed | None]
"""A playlist command's outcome: its commit (``None`` on an error)."""


def outcome_of(
    operation_id: str, answer: Answer | None, playlist_id: str | None = None
) -> CommandOutcome:
    """The outcome of one command's answer (a commit or a domain error)."""
    if isinstance(answer, DomainError):
        return MutationOutcome(None, answer, operation_id, playlist_id)
    return MutationOutcome(answer, None, operation_id, playlist_id)


async def _check_media(ctx: RequestContext, command: AddEntries | LikeMedia) -> None:
    """Raises :class:`MediaNotFound` for ``command``'s first media id the catalog does not know.

    Raises:
        ServiceUnavailable: the catalog does not answer.
    """
    adds: list[tuple[int, Sequence[str], Field]]
    if isinstance(command, LikeMedia):
        adds = [(0, (command.media_id,), lambda _: ("mediaId",))]
    else:
        adds = [(0, command.media_ids, lambda j: ("mediaIds", str(j)))]
    for refused in (await unknown_media(ctx, adds)).values():
        raise refused


async def _run(admission: Admission, command: CreatePlaylist | PlaylistCommand) -> Answer:
    """Run an admitted ``command``: its commit, or the domain error that refused it.

    A command that adds media has them checked first; if the catalog
    refuses (down, or a track since dropped), a retry that already committed
    is still answered with its stored result: only a failed check pays for
    the operation-id look-up.
    """
    ctx, actor, store = admission.ctx, admission.actor, admission.ctx.services.store
    try:
        if isinstance(command, CreatePlaylist):
            return await store.create(command, actor)
        if isinstance(command, LikeMedia | AddEntries):
            try:
                await _check_media(ctx, command)
            except (ServiceUnavailable, MediaNotFound):
                stored = await store.replay(command, actor)
                if stored is None:
                    raise
                return stored
        committed = await store.execute(command, actor)
    except DomainError as error:
        return error
    ctx.reads.forget(command.playlist_id)
    return committed


async def execute(ctx: RequestContext, command: CreatePlaylist | PlaylistCommand) -> CommandOutcome:
    """Run ``command`` (a create, or a command on a playlist) as the viewer.

    A retry of a committed command returns its stored result and costs none
    of the rate limit (:func:`~chorus.resolvers.admission.admit`).

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: adding media while the catalog does not answer.
    """
    pid = None if isinstance(command, CreatePlaylist) else command.playlist_id
    admission = await admit(ctx, (command,))
    answer = admission.answer
    if answer is None:
        answer = await _run(admission, command)
        admission.settle((answer,))
    if pid is None and isinstance(answer, Committed):
        pid = answer.outcome.playlist_id
    return outcome_of(command.operation_id, answer, pid)


async def like(
    ctx: RequestContext, operation_id: str, media_id: str, *, like: bool
) -> CommandOutcome:
    """Like (``like=True``) or unlike ``media_id`` in the viewer's Liked Songs.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: liking while the catalog does not answer.
    """
    playlist_id = ctx.services.store.liked_songs_id(ctx.viewer())
    kind = LikeMedia if like else UnlikeMedia
    return await execute(ctx, kind(playlist_id, operation_id, media_id))
