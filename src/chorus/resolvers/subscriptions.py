"""The live stream of a playlist for the viewer (``playlistEvents``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Hashable

from chorus.domain.errors import InvalidInput
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import BadUserInput, ServiceUnavailable
from chorus.subscriptions.delivery_groups import DirectSink
from chorus.subscriptions.stream import StreamItem, playlist_stream


async def playlist_events(
    ctx: RequestContext,
    playlist_id: str,
    since_version: int,
    *,
    group: Hashable | None = None,
    sink: DirectSink | None = None,
) -> AsyncGenerator[StreamItem, None]:
    """Versions after ``since_version``, then live; see :func:`playlist_stream`.

    ``group`` and ``sink``: the subscription's delivery group and its socket,
    which the hub may write the group's versions to without this generator.

    Each version is executed in a fresh request context of its own (fresh
    DataLoaders: media and playlists as they are now), once for its delivery
    group (:mod:`chorus.graphql.execution.delivery`), not in this subscriber's context.

    Raises:
        Unauthenticated: no valid token.
        BadUserInput: ``since_version`` is negative or in the future.
        DomainError: NOT_FOUND (not visible), FORBIDDEN (access lost).
    """
    viewer = ctx.viewer()
    services = ctx.services
    if services.hub is None:
        raise ServiceUnavailable("live updates are not enabled in this process")
    stream = playlist_stream(
        services.db,
        services.hub,
        viewer,
        playlist_id,
        since_version,
        max_lag=services.limits.max_subscriber_lag,
        presence=services.presence,
        group=group,
        sink=sink,
    )
    # Closed with this generator: `async for` alone would leave the stream in
    # the hub until the garbage collector finalizes it.
    async with contextlib.aclosing(stream):
        try:
            async for item in stream:
                yield item
        except InvalidInput as error:
            # A sinceVersion out of range is a bad argument, as in Playlist.changes
            # and playlist(minVersion): BAD_USER_INPUT (docs/api.md).
            raise BadUserInput(error.message) from None
