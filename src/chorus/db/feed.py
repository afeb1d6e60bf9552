"""The feed in SQL: the push sink, and the pages a feed read merges.

**Push** (:func:`push`): for each committed version, the followers of its
playlist — and, for version 0, of its owner — get one ``feed_item`` row each,
by one ``INSERT … SELECT … ON CONFLICT DO NOTHING`` per target, when that
target is pushed (or switching back to push: :mod:`chorus.db.switches`). Delivery to the sink is
at least once (the relay and Kafka may repeat a version); the key
``(follower, playlist, version)`` makes a repeat write nothing.

**Pull** (:func:`pulled_statement`): a pulled target (or one switching back
to push, until its backfill is done) is read from the mutation log at read
time, one bounded read per target (retention, the page size), each the same
statement built once per process with every value a bound parameter.

Both sides keep to the same rule, so they give the same items for the same
history: an item shows when it happened after the follow began and within
retention, while the follow lasts and the viewer may read the playlist
(PUBLIC, or a member; not deleted; not a system playlist).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.engine import Database
from chorus.db.follows import follows_of
from chorus.db.switches import fan_outs
from chorus.db.tables import (
    UTCDateTime,
    feed_item,
    follow,
    playlist,
    playlist_member,
    playlist_mutation,
)
from chorus.domain.changes import Change, decode_change
from chorus.domain.follows import (
    FeedItem,
    FeedKey,
    FeedLimits,
    Follow,
    Target,
    TargetKind,
    merge,
)
from chorus.domain.model import PlaylistKind, Visibility


@dataclass(frozen=True, slots=True)
class Committed:
    """What the sink needs of one committed version (from its event)."""

    playlist_id: str
    version: int
    actor_id: str
    committed_at: datetime
    owner_id: str | None = None
    """Set on version 0 (the creation names its owner): the owner's followers hear it."""


def _targets(c: Committed) -> list[Target]:
    targets = [Target(TargetKind.PLAYLIST, c.playlist_id)]
    if c.version == 0 and c.owner_id is not None:
        targets.append(Target(TargetKind.USER, c.owner_id))
    return targets


async def anyone_to_push(
    conn: AsyncConnection, versions: Sequence[Committed], limits: FeedLimits
) -> bool:
    """Whether :func:`push` may write a row for ``versions``: a target of theirs has
    followers and is pushed, or switching to push (one ``SELECT`` of the follow counts)."""
    targets = {t for c in versions for t in _targets(c)}
    return any(f.pushes for f in (await fan_outs(conn, targets, limits)).values())


async def push(conn: AsyncConnection, versions: Sequence[Committed], limits: FeedLimits) -> int:
    """Write the feed rows of ``versions`` for the followers of their pushed targets.

    Returns the rows written (a repeat writes none). Pulled targets write
    nothing: that is what keeps a commit's cost from growing with its
    followers. A target switching back to push is pushed already: the
    switch's backfill may have passed its followers.
    """
    targets = {t for c in versions for t in _targets(c)}
    modes = await fan_outs(conn, targets, limits)
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    written = 0
    for c in versions:
        for target in _targets(c):
            mode = modes.get(target)
            if mode is None or not mode.pushes:
                continue
            rows = select(
                follow.c.follower_id,
                literal(c.playlist_id),
                literal(c.version),
                literal(c.actor_id),
                literal(c.committed_at, UTCDateTime()),
            ).where(
                follow.c.target_kind == target.kind.value,
                follow.c.target_id == target.id,
                # A follow made after the version never shows it; not writing it saves a row.
                follow.c.created_at <= literal(c.committed_at, UTCDateTime()),
            )
            stmt = (
                dialect.insert(feed_item)
                .from_select(
                    ["follower_id", "playlist_id", "version", "actor_id", "happened_at"], rows
                )
                .on_conflict_do_nothing()
            )
            result = await conn.execute(stmt)
            written += max(int(result.rowcount or 0), 0)
    return written


def _readable_by(viewer_id: str | BindParameter[str]) -> ColumnElement[bool]:
    """The playlist (``playlist``, joined) is one the viewer may read in a feed."""
    member = exists().where(
        playlist_member.c.playlist_id == playlist.c.id, playlist_member.c.user_id == viewer_id
    )
    return and_(
        playlist.c.deleted_at.is_(None),
        playlist.c.kind == PlaylistKind.PLAYLIST.value,
        or_(playlist.c.visibility == Visibility.PUBLIC.value, member),
    )


def _before(
    key: FeedKey | None, at: ColumnElement[Any], pid: ColumnElement[Any], v: ColumnElement[Any]
) -> list[ColumnElement[bool]]:
    if key is None:
        return []
    happened_at, playlist_id, version = key
    return [
        tuple_(at, pid, v)
        < tuple_(literal(happened_at, UTCDateTime()), literal(playlist_id), literal(version))
    ]


def _item(row: object) -> FeedItem:
    return FeedItem(
        playlist_id=row.playlist_id,  # type: ignore[attr-defined]
        version=row.version,  # type: ignore[attr-defined]
        actor_id=row.actor_id,  # type: ignore[attr-defined]
        happened_at=row.happened_at,  # type: ignore[attr-defined]
    )


def pushed_query(
    viewer_id: str, *, horizon: datetime, before: FeedKey | None, limit: int
) -> Select[Any]:
    """Up to ``limit`` of the viewer's pushed rows older than ``before``, newest first.

    Only rows a follow still brings (followed since before the item; the
    playlist itself, or version 0 of a followed owner's) and that the viewer
    may read.
    """
    f = follow
    brought = exists().where(
        f.c.follower_id == viewer_id,
        f.c.created_at <= feed_item.c.happened_at,
        or_(
            and_(f.c.target_kind == TargetKind.PLAYLIST.value, f.c.target_id == playlist.c.id),
            and_(
                f.c.target_kind == TargetKind.USER.value,
                f.c.target_id == playlist.c.owner_id,
                feed_item.c.version == 0,
            ),
        ),
    )
    return (
        select(
            feed_item.c.playlist_id,
            feed_item.c.version,
            feed_item.c.actor_id,
            feed_item.c.happened_at,
        )
        .join(playlist, playlist.c.id == feed_item.c.playlist_id)
        .where(
            feed_item.c.follower_id == viewer_id,
            feed_item.c.happened_at >= literal(horizon, UTCDateTime()),
            *_before(before, feed_item.c.happened_at, feed_item.c.playlist_id, feed_item.c.version),
            _readable_by(viewer_id),
            brought,
        )
        .order_by(
            feed_item.c.happened_at.desc(),
            feed_item.c.playlist_id.desc(),
            feed_item.c.version.desc(),
        )
        .limit(limit)
    )


@functools.cache
def pulled_statement(kind: TargetKind, paged: bool) -> Select[Any]:
    """The bounded read of one pulled target, newest first, built once per process.

    Up to ``:limit`` items the target ``:target`` (a playlist, or a user's
    creations: version 0 of their playlists) brings since ``:since`` (the
    follow's start or the retention horizon, the later), readable by
    ``:viewer``; with ``paged``, older than ``(:before_at, :before_playlist,
    :before_version)``. One index range (``ix_playlist_mutation_committed``
    for a playlist, ``ix_playlist_owner_id`` for a user's creations).

    Every value is a bound parameter, so a feed read of 1,000 pulled targets
    builds no statement and compiles none (SQLAlchemy's cache holds the one
    compiled form): building 1,000 subqueries held the event loop for seconds.
    """
    m = playlist_mutation
    where: list[ColumnElement[bool]] = [m.c.committed_at >= bindparam("since", type_=UTCDateTime())]
    if kind is TargetKind.PLAYLIST:
        where.append(m.c.playlist_id == bindparam("target"))
    else:
        where += [playlist.c.owner_id == bindparam("target"), m.c.version == 0]
    if paged:
        where.append(
            tuple_(m.c.committed_at, m.c.playlist_id, m.c.version)
            < tuple_(
                bindparam("before_at", type_=UTCDateTime()),
                bindparam("before_playlist"),
                bindparam("before_version"),
            )
        )
    return (
        select(
            m.c.playlist_id,
            m.c.version,
            m.c.actor_id,
            m.c.committed_at.label("happened_at"),
        )
        .join(playlist, playlist.c.id == m.c.playlist_id)
        .where(*where, _readable_by(bindparam("viewer")))
        .order_by(m.c.committed_at.desc(), m.c.playlist_id.desc(), m.c.version.desc())
        .limit(bindparam("limit"))
    )


def pulled_parameters(
    viewer_id: str, followed: Follow, *, horizon: datetime, before: FeedKey | None, limit: int
) -> dict[str, Any]:
    """The values :func:`pulled_statement` reads for one followed target."""
    values: dict[str, Any] = {
        "target": followed.target.id,
        "since": max(followed.created_at, horizon),
        "viewer": viewer_id,
        "limit": limit,
    }
    if before is not None:
        values["before_at"], values["before_playlist"], values["before_version"] = before
    return values


async def prune(conn: AsyncConnection, older_than: datetime) -> int:
    """Delete pushed rows that happened before ``older_than`` (retention); how many."""
    result = await conn.execute(
        delete(feed_item).where(feed_item.c.happened_at < literal(older_than, UTCDateTime()))
    )
    return int(result.rowcount or 0)


@dataclass(frozen=True, slots=True)
class FeedPage:
    items: list[FeedItem]
    has_next: bool
    pulled_targets: int
    """Targets read from the log for this page (one query each)."""


async def read_feed(
    db: Database,
    viewer_id: str,
    limits: FeedLimits,
    *,
    now: datetime,
    before: FeedKey | None,
    size: int,
) -> FeedPage:
    """A page of the viewer's feed, newest first, in one read transaction.

    The viewer's follows, their targets' fan-outs, the pushed rows (one
    statement), then one bounded read per pulled target (``size + 1`` rows,
    :func:`pulled_statement`) — never one per follower or per item. Each read
    is its own round trip, so the event loop is never held longer than one
    statement's work, however many targets are pulled (at most
    ``CHORUS_MAX_FOLLOWS_PER_USER``, 1,000).
    """
    horizon = limits.horizon(now)
    async with db.read() as conn:
        follows = await follows_of(conn, viewer_id)
        modes = await fan_outs(conn, [f.target for f in follows], limits)
        pulled = [f for f in follows if f.target in modes and modes[f.target].read_from_log]
        pushed = pushed_query(viewer_id, horizon=horizon, before=before, limit=size + 1)
        items = [_item(r) for r in await conn.execute(pushed)]
        for followed in pulled:
            statement = pulled_statement(followed.target.kind, before is not None)
            values = pulled_parameters(
                viewer_id, followed, horizon=horizon, before=before, limit=size + 1
            )
            items += [_item(r) for r in await conn.execute(statement, values)]
    page, has_next = merge([items], size)
    return FeedPage(page, has_next, len(pulled))


async def changes_at(
    db: Database, keys: Collection[tuple[str, int]]
) -> dict[tuple[str, int], tuple[Change, ...]]:
    """The changes of these ``(playlist, version)`` from the log; compacted ones are absent."""
    if not keys:
        return {}
    async with db.read() as conn:
        rows = await conn.execute(
            select(
                playlist_mutation.c.playlist_id,
                playlist_mutation.c.version,
                playlist_mutation.c.payload,
            ).where(
                tuple_(playlist_mutation.c.playlist_id, playlist_mutation.c.version).in_(list(keys))
            )
        )
        return {
            (r.playlist_id, r.version): tuple(decode_change(c) for c in r.payload["changes"])
            for r in rows
        }


async def prune_expired(db: Database, limits: FeedLimits, now: datetime) -> int:
    """Delete pushed rows past retention; how many (``chorus compact`` runs it)."""
    async with db.write() as conn:
        return await prune(conn, limits.horizon(now))
