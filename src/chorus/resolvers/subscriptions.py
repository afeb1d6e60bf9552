"""The live stream of a playlist for the viewer (``playlistEvents``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from chorus.resolvers.context import RequestContext
from chorus.resolvers.errors import ServiceUnavailable
from chorus.subscriptions.stream import StreamItem, playlist_stream


async def playlist_events(
    ctx: RequestContext, playlist_id: str, since_version: int
) -> AsyncIterator[StreamItem]:
    """Versions after ``since_version``, then live; see :func:`playlist_stream`.

    Before each item the context gets fresh DataLoaders, so every event
    resolves media and playlists as they are now.

    Raises:
        Unauthenticated: no valid token.
        DomainError: NOT_FOUND, INVALID_INPUT (sinceVersion), FORBIDDEN (access lost).
    """
    viewer = ctx.viewer()
    services = ctx.services
    if services.hub is None:
        raise ServiceUnavailable("live updates are not enabled in this process")
    async for item in playlist_stream(
        services.db,
        services.hub,
        viewer,
        playlist_id,
        since_version,
        max_lag=services.limits.max_subscriber_lag,
    ):
        ctx.renew_loaders()
        yield item
