"""``feedEvents``: the viewer's feed, live.

The stream joins the hub for every playlist the viewer follows when it
starts (at most the follow limit), so it hears their versions from the same
bus as ``playlistEvents``, pushed and pulled targets alike — live delivery
does not depend on how the feed stores a target. Each version is offered
once per playlist (a repeat or an older version is dropped) and only while
the viewer may still read the playlist and still follows it.

It is a notification, not the record: ``viewer.feed`` is. Versions missed
while the stream was away, or dropped for a slow consumer, are in the feed;
playlists created by followed users, and follows made after the stream
started, show in ``viewer.feed`` (a new subscription hears them live).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

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


async def feed_stream(db: Database, hub: Hub, viewer_id: str) -> AsyncGenerator[FeedItem, None]:
    """Feed items of the viewer's followed playlists as they are committed, until closed."""
    async with db.read() as conn:
        followed = [
            f.target.id
            for f in await follow_rows.follows_of(conn, viewer_id)
            if f.target.kind is TargetKind.PLAYLIST
        ]
    wakeup = asyncio.Event()
    members: list[Membership] = []
    last: dict[str, int] = {}
    try:
        for playlist_id in followed:
            members.append(await hub.join(playlist_id, wakeup))
        while True:
            await wakeup.wait()
            wakeup.clear()
            for member in members:
                member.overflowed = False  # missed versions are in viewer.feed
                while not member.queue.empty():
                    v = member.queue.get_nowait()
                    if v.version <= last.get(v.playlist_id, -1):
                        continue
                    last[v.playlist_id] = v.version
                    if await _still_brought(db, viewer_id, v.playlist_id):
                        yield FeedItem(v.playlist_id, v.version, v.actor_id, v.committed_at)
    finally:
        for member in members:
            await hub.leave(member)
