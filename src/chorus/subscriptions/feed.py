"""``feedEvents``: the viewer's feed, live.

The stream joins the hub for every playlist the viewer follows (at most the
follow limit), so it hears their versions from the same bus as
``playlistEvents``, pushed and pulled targets alike — live delivery does not
depend on how the feed stores a target. Each version is offered once per
playlist (a repeat or an older version is dropped) and only while the viewer
may still read the playlist and still follows it.

Follows change while a stream runs: a follow or unfollow made in this
process re-reads the viewer's follows at once (:func:`follows_changed`); one
made through another API process is picked up within
:data:`FOLLOWS_REFRESH_S`, when every stream re-reads them.

It is a notification, not the record: ``viewer.feed`` is. Versions missed
while the stream was away, or dropped for a slow consumer, are in the feed,
and so are playlists created by followed users.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable

from chorus.db import follows as follow_rows
from chorus.db import pages
from chorus.db.engine import Database
from chorus.domain.follows import FeedItem, Target, TargetKind
from chorus.domain.model import role_can_read
from chorus.subscriptions.hub import Hub, Membership


async def _still_brought(db: Database, viewer_id: str, playlist_id: str) -> bool:
    """The viewer still follows the playlist and may read it."""
    target = Target(TargetKind.PLAYLIST, playlist_id)
    async with db.read() as conn:
        follows = await follow_rows.follows_of(conn, viewer_id)
    if not any(f.target == target for f in follows):
        return False
    found = await pages.playlists_by_id(db, [playlist_id])
    roles = await pages.roles_of(db, viewer_id, [playlist_id])
    header = found.get(playlist_id)
    return (
        header is not None and not header.system and role_can_read(roles.get(playlist_id), header)
    )


FOLLOWS_REFRESH_S = 5.0
"""How often a live feed re-reads its viewer's follows (seconds): the longest a
follow made through another API process goes unheard by a running stream."""

_listening: dict[str, set[Callable[[], None]]] = {}
"""Viewer id → how to tell each of its streams in this process that its follows changed."""


def follows_changed(viewer_id: str) -> None:
    """The viewer followed or unfollowed something: its streams here re-read their follows."""
    for tell in tuple(_listening.get(viewer_id, ())):
        tell()


async def _followed(db: Database, viewer_id: str) -> set[str]:
    async with db.read() as conn:
        return {
            f.target.id
            for f in await follow_rows.follows_of(conn, viewer_id)
            if f.target.kind is TargetKind.PLAYLIST
        }


async def feed_stream(
    db: Database, hub: Hub, viewer_id: str, *, refresh_s: float = FOLLOWS_REFRESH_S
) -> AsyncGenerator[FeedItem, None]:
    """Feed items of the viewer's followed playlists as they are committed, until closed.

    ``refresh_s``: how often the viewer's follows are read again (seconds).
    """
    wakeup = asyncio.Event()
    members: dict[str, Membership] = {}
    last: dict[str, int] = {}
    stale = True

    def tell() -> None:
        nonlocal stale
        stale = True
        wakeup.set()

    async def rejoin() -> None:
        followed = await _followed(db, viewer_id)
        for playlist_id in followed - members.keys():
            members[playlist_id] = await hub.join(playlist_id, wakeup)
        for playlist_id in members.keys() - followed:
            await hub.leave(members.pop(playlist_id))

    _listening.setdefault(viewer_id, set()).add(tell)
    try:
        refresh_at = 0.0
        while True:
            if stale or time.monotonic() >= refresh_at:
                stale = False
                refresh_at = time.monotonic() + refresh_s
                await rejoin()
            try:
                await asyncio.wait_for(wakeup.wait(), max(0.0, refresh_at - time.monotonic()))
            except TimeoutError:
                continue
            wakeup.clear()
            for member in tuple(members.values()):
                member.overflowed = False  # missed versions are in viewer.feed
                while not member.queue.empty():
                    v = member.take()
                    if v.version <= last.get(v.playlist_id, -1):
                        continue
                    last[v.playlist_id] = v.version
                    if await _still_brought(db, viewer_id, v.playlist_id):
                        yield FeedItem(v.playlist_id, v.version, v.actor_id, v.committed_at)
    finally:
        tells = _listening.get(viewer_id)
        if tells is not None:
            tells.discard(tell)
            if not tells:
                del _listening[viewer_id]
        for member in members.values():
            await hub.leave(member)
