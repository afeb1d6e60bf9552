"""The feed in SQL: the push sink, and the pages a feed read merges.

**Push** (:func:`push`): for each committed version, the followers of its
playlist — and, for version 0, of its owner — get one ``feed_item`` row each,
by one ``INSERT … SELECT … ON CONFLICT DO NOTHING`` per target, when that
target is pushed (or switching back to push: :mod:`chorus.db.switches`). Delivery to the sink is
at least once (the relay and Kafka may repeat a version); the key
``(follower, playlist, version)`` makes a repeat write nothing.

**Pull** (:func:`pulled_query`): a pulled target (or one switching back to
push, until its backfill is done) is read from the mutation log at read time,
one subquery per target, bounded by retention and the page size.

Both sides keep to the same rule, so they give the same items for the same
history: an item shows when it happened after the follow began and within
retention, while the follow lasts and the viewer may read the playlist
(PUBLIC, or a member; not deleted; not a system playlist).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    delete,
    exists,
    literal,
    or_,
    select,
    tuple_,
    union_all,
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


def _readable_by(viewer_id: str) -> ColumnElement[bool]:
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


def pulled_query(
    viewer_id: str, followed: Follow, *, horizon: datetime, before: FeedKey | None, limit: int
) -> Select[Any]:
    """Up to ``limit`` items a pulled target brings, older than ``before``, newest first.

    One bounded read of the mutation log (``ix_playlist_mutation_committed`` for a
    playlist, ``ix_playlist_owner_id`` for a user's creations).
    """
    m = playlist_mutation
    since = max(followed.created_at, horizon)
    target = followed.target
    where: list[ColumnElement[bool]] = [m.c.committed_at >= literal(since, UTCDateTime())]
    if target.kind is TargetKind.PLAYLIST:
        where.append(m.c.playlist_id == target.id)
    else:
        where += [playlist.c.owner_id == target.id, m.c.version == 0]
    return (
        select(
            m.c.playlist_id,
            m.c.version,
            m.c.actor_id,
            m.c.committed_at.label("happened_at"),
        )
        .join(playlist, playlist.c.id == m.c.playlist_id)
        .where(
            *where,
            *_before(before, m.c.committed_at, m.c.playlist_id, m.c.version),
            _readable_by(viewer_id),
        )
        .order_by(m.c.committed_at.desc(), m.c.playlist_id.desc(), m.c.version.desc())
        .limit(limit)
    )


async def prune(conn: AsyncConnection, older_than: datetime) -> int:
    """Delete pushed rows that happened before ``older_than`` (retention); how many."""
    result = await conn.execute(
        delete(feed_item).where(feed_item.c.happened_at < literal(older_than, UTCDateTime()))
    )
    return int(result.rowcount or 0)


PARTS_PER_STATEMENT = 200
"""Subqueries in one ``UNION ALL`` of a feed read. SQLite refuses a compound
SELECT of more than 500 (``SQLITE_MAX_COMPOUND_SELECT``: "too many terms in
compound SELECT"); a user may follow 1,000 pulled targets."""


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
    r"""A page of the viewer's feed, newest first, in one read transaction.

    The viewer's follows, their targets' fan-outs, then ``UNION ALL``\ s of the
    pushed rows and one bounded read (``size + 1`` rows) per pulled target,
    :data:`PARTS_PER_STATEMENT` parts a statement — never one per follower or
    per item: one round trip up to 199 pulled targets, 6 at the most follows
    (1,000).
    """
    horizon = limits.horizon(now)
    async with db.read() as conn:
        follows = await follows_of(conn, viewer_id)
        modes = await fan_outs(conn, [f.target for f in follows], limits)
        pulled = [f for f in follows if f.target in modes and modes[f.target].read_from_log]
        parts = [pushed_query(viewer_id, horizon=horizon, before=before, limit=size + 1)]
        parts += [
            pulled_query(viewer_id, f, horizon=horizon, before=before, limit=size + 1)
            for f in pulled
        ]
        items: list[FeedItem] = []
        for start in range(0, len(parts), PARTS_PER_STATEMENT):
            # Each part keeps its own ORDER BY … LIMIT inside a subquery (SQLite
            # allows neither on a bare member of a compound SELECT).
            chunk = [part.subquery() for part in parts[start : start + PARTS_PER_STATEMENT]]
            rows = await conn.execute(union_all(*(select(*sub.c) for sub in chunk)))
            items += [_item(r) for r in rows]
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
