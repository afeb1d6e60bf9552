"""Follows and the feed: follow, unfollow, ``viewer.following``, ``viewer.feed``.

Follows are not versioned playlist commands: they change no playlist, so they
carry no operation id; both are idempotent by what they ask (following twice
leaves one follow). Domain failures come back as the result's ``error``
(``userErrors``); a missing token raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime

from chorus.db import feed, pages
from chorus.db.follows import FollowStore
from chorus.db.pages import Page
from chorus.domain.changes import Change, entries_in
from chorus.domain.errors import DomainError
from chorus.domain.follows import FeedKey, Follow, Target, TargetKind
from chorus.resolvers.admission import MutationOutcome, admit
from chorus.resolvers.context import RequestContext
from chorus.resolvers.queries import charge_history
from chorus.resolvers.request_errors import ServiceUnavailable, TooMuchHistory
from chorus.subscriptions.feed import FeedEvent, feed_stream, feeds_of


@dataclass(frozen=True, slots=True)
class FollowState:
    """Whether the viewer follows ``target`` now, and whether this mutation changed it."""

    target: Target
    following: bool
    changed: bool = False


FollowOutcome = MutationOutcome[FollowState]
"""What a follow or unfollow did, or (``error``) why it did not."""


def _store(ctx: RequestContext) -> FollowStore:
    if ctx.services.follows is None:
        raise ServiceUnavailable("follows are not enabled in this process")
    return ctx.services.follows


async def follow(ctx: RequestContext, target: Target, *, on: bool) -> FollowOutcome:
    """Follow (``on=True``) or unfollow ``target`` as the viewer.

    A follow is a mutation like any other (``CHORUS_RATE_LIMIT_PER_MINUTE``):
    it is admitted by :func:`~chorus.resolvers.admission.admit`, without an
    operation id, so there is no stored result to replay.

    Raises:
        Unauthenticated: no valid token.
    """
    viewer = ctx.viewer()
    store = _store(ctx)
    unchanged = FollowState(target, following=not on)
    refused = (await admit(ctx)).answer
    if refused is not None:
        assert isinstance(refused, DomainError)  # nothing to replay
        return MutationOutcome(unchanged, refused)
    try:
        if on:
            done = await store.follow(viewer, target)
        else:
            done = await store.unfollow(viewer, target)
    except DomainError as error:
        return MutationOutcome(unchanged, error)
    with contextlib.suppress(KeyError):  # strawberry raises for a key never loaded
        ctx.reads.loaders.follower_count.clear(target)
    hub = ctx.services.hub
    if done.changed and hub is not None:
        feeds_of(hub).follows_changed(viewer)  # this viewer's live feed here, at once
        await hub.bus.announce_follows(viewer)  # and in the other API processes
    return MutationOutcome(FollowState(target, following=on, changed=done.changed))


async def following(
    ctx: RequestContext,
    kind: TargetKind | None,
    *,
    size: int,
    after: tuple[datetime, str, str] | None,
) -> Page[Follow]:
    """The viewer's follows of ``kind`` (all: ``None``), newest first."""
    return await pages.following_page(ctx.services.db, ctx.viewer(), kind, after=after, size=size)


async def feed_page(ctx: RequestContext, *, size: int, before: FeedKey | None) -> feed.FeedPage:
    """A page of the viewer's feed, newest first (:func:`chorus.db.feed.read_feed`)."""
    return await feed.read_feed(
        ctx.services.db,
        ctx.viewer(),
        ctx.services.feed_limits,
        now=datetime.now(UTC),
        before=before,
        size=size,
    )


async def feed_item_changes(
    ctx: RequestContext, playlist_id: str, version: int
) -> tuple[Change, ...]:
    """The changes of a feed item's version, from the log, charged as ``changes`` charges them.

    Raises:
        TooMuchHistory: the request already read its budget of history
            (:func:`chorus.resolvers.queries.charge_history`).
    """
    found = await ctx.reads.loaders.feed_changes.load((playlist_id, version))
    if not charge_history(ctx, entries_in(found)):
        raise TooMuchHistory(
            "this request read its budget of history; read this version's changes in "
            f"another request (Playlist.changes(sinceVersion: {version - 1}, first: 1))"
        )
    return found


async def feed_events(ctx: RequestContext) -> AsyncGenerator[FeedEvent, None]:
    """The viewer's feed, live (:func:`chorus.subscriptions.feed.feed_stream`).

    Raises:
        Unauthenticated: no valid token.
        ServiceUnavailable: a process without live updates.
        LimitExceeded: the viewer's live feeds in this process weigh too much.
    """
    viewer = ctx.viewer()
    if ctx.services.hub is None:
        raise ServiceUnavailable("live updates are not enabled in this process")
    stream = feed_stream(ctx.services.db, ctx.services.hub, viewer, ctx.services.feed_limits)
    async with contextlib.aclosing(stream):
        async for item in stream:
            ctx.renew_reads()
            yield item
