"""Presence: ``Playlist.presence``, ``setPresence`` and ``playlistPresence``.

Presence is read from :class:`~chorus.subscriptions.presence.Presence` (Redis
in the full profile, this process in the embedded one), never from SQL's log,
and never cached: :func:`playlist_presence` refuses the response cache for
the answer that reads it (and ``graphql/execution/cacheable_fields.py`` does not list it).
Who is listed follows the playlist's members, read from SQL with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from redis.exceptions import RedisError

from chorus.db import pages
from chorus.domain.errors import DomainError, NotFound
from chorus.domain.model import Playlist, Visibility, role_can_read
from chorus.domain.presence import Listing, PresenceState, listing
from chorus.resolvers.admission import MutationOutcome, admit
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import ServiceUnavailable
from chorus.subscriptions.presence import Presence
from chorus.subscriptions.presence_stream import PresenceItem, presence_stream

UNAVAILABLE = "presence is not available right now; try again"


def _presence(ctx: RequestContext) -> Presence:
    if ctx.services.presence is None:
        raise ServiceUnavailable("presence is not enabled in this process")
    return ctx.services.presence


async def playlist_presence(ctx: RequestContext, playlist: Playlist) -> Listing:
    """Who is present on a playlist the viewer may read, now.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: presence is off here, or its store (Redis) did not answer.
    """
    ctx.reads.record.refuse("presence is live, no version names it")
    viewer = ctx.viewer()
    presence = _presence(ctx)
    roles = await pages.member_roles(ctx.services.db, playlist.id)
    if not role_can_read(roles.get(viewer), playlist):
        return Listing((), 0)  # not reached through a visible playlist: show nothing
    try:
        present = await presence.current(playlist.id)
    except (RedisError, OSError):
        raise ServiceUnavailable(UNAVAILABLE) from None
    return listing(present, roles, public=playlist.visibility is Visibility.PUBLIC)


@dataclass(frozen=True, slots=True)
class Declared:
    """The state ``setPresence`` declared (``None``: withdrawn or refused), for how long."""

    state: PresenceState | None
    expires_in_s: float


PresenceOutcome = MutationOutcome[Declared]
"""What ``setPresence`` did, or (``error``) why not."""

NOTHING = Declared(None, 0)
"""What a refused ``setPresence`` declared."""


async def set_presence(
    ctx: RequestContext, playlist_id: str, state: PresenceState | None
) -> PresenceOutcome:
    """Declare the viewer's state on a playlist it may read, for ``CHORUS_PRESENCE_TTL_S``.

    ``state`` ``None`` withdraws the declaration (a live subscription still
    shows the viewer as VIEWING). Admitted by :func:`~chorus.resolvers.admission.admit`
    (a rate-limit token; no operation id, nothing to replay).

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: presence is off here, or its store did not answer.
    """
    viewer = ctx.viewer()
    presence = _presence(ctx)
    refused = (await admit(ctx)).answer
    if refused is not None:
        assert isinstance(refused, DomainError)  # nothing to replay
        return MutationOutcome(NOTHING, refused)
    header = await ctx.reads.loaders.playlist.load(playlist_id)
    role = await ctx.reads.loaders.role.load(playlist_id)
    if header is None or not role_can_read(role, header):
        return MutationOutcome(NOTHING, NotFound("playlist not found", field=("playlistId",)))
    try:
        await presence.declare(playlist_id, viewer, state)
    except (RedisError, OSError):
        raise ServiceUnavailable(UNAVAILABLE) from None
    return MutationOutcome(Declared(state, presence.ttl_s if state is not None else 0))


async def presence_events(ctx: RequestContext, playlist_id: str) -> AsyncGenerator[PresenceItem]:
    """The current presence, then its changes; see :func:`presence_stream`.

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: presence or live updates are off, or the store did not answer.
        DomainError: NOT_FOUND (not visible), FORBIDDEN (access lost).
    """
    viewer = ctx.viewer()
    services = ctx.services
    presence = _presence(ctx)
    if services.hub is None:
        raise ServiceUnavailable("live updates are not enabled in this process")
    stream = presence_stream(services.db, services.hub, presence, viewer, playlist_id)
    async with contextlib.aclosing(stream):
        try:
            async for item in stream:
                yield item
        except (RedisError, OSError):
            raise ServiceUnavailable(UNAVAILABLE) from None
