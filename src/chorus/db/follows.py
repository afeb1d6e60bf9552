"""Follows in SQL: follow, unfollow (idempotent), counts, the viewer's follows.

``follow_count`` moves with every follow and unfollow in the same transaction,
so the feed's push-or-pull decision and ``followerCount`` read one row. An
unfollow that brings a target below the push threshold *backfills*: the
target was pulled until now, so nothing was pushed for it, and its remaining
followers get rows for its versions within retention (one ``INSERT … SELECT``,
``ON CONFLICT DO NOTHING``) — what the pull side showed them stays in their
feed. Following a target up to the threshold needs nothing: the rows pushed
so far stay, the pull side adds the rest, and the read merges the two by
``(playlist, version)``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.tables import (
    UTCDateTime,
    feed_item,
    follow,
    follow_count,
    playlist,
    playlist_mutation,
)
from chorus.domain.access import readable
from chorus.domain.errors import InvalidInput, NotFound
from chorus.domain.follows import (
    DEFAULT_FEED_LIMITS,
    FeedLimits,
    Follow,
    Target,
    TargetKind,
    check_follow_limit,
    check_target,
)


def _now() -> datetime:
    return datetime.now(UTC)


def follow_from_row(row: object) -> Follow:
    r = row
    return Follow(
        follower_id=r.follower_id,  # type: ignore[attr-defined]
        target=Target(TargetKind(r.target_kind), r.target_id),  # type: ignore[attr-defined]
        created_at=r.created_at,  # type: ignore[attr-defined]
    )


def _is(target: Target) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    return follow.c.target_kind == target.kind.value, follow.c.target_id == target.id


@dataclass(frozen=True, slots=True)
class FollowResult:
    """What a follow or unfollow did: ``changed`` is false for a no-op (already so)."""

    follow: Follow | None
    changed: bool


class FollowStore:
    """Follows and unfollows, each in one write transaction.

    Args:
        db: the database.
        limits: the follow limit, the push threshold and retention.
        clock: the time source (UTC).
    """

    def __init__(
        self,
        db: Database,
        limits: FeedLimits = DEFAULT_FEED_LIMITS,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.db = db
        self.limits = limits
        self._clock = clock

    async def follow(self, follower_id: str, target: Target) -> FollowResult:
        """Follow ``target``; following again changes nothing.

        Raises:
            InvalidInput: following yourself, a malformed user id, or a system playlist.
            NotFound: a playlist the follower may not read (or none).
            LimitExceeded: the follower already follows the most targets allowed.
        """
        check_target(follower_id, target)
        async with self.db.write() as conn:
            await _check_readable(conn, follower_id, target)
            existing = await _get(conn, follower_id, target)
            if existing is not None:
                return FollowResult(existing, changed=False)
            count = await conn.scalar(
                select(func.count()).select_from(follow).where(follow.c.follower_id == follower_id)
            )
            check_follow_limit(int(count or 0), self.limits)
            made = Follow(follower_id, target, self._clock())
            await conn.execute(
                insert(follow).values(
                    follower_id=follower_id,
                    target_kind=target.kind.value,
                    target_id=target.id,
                    created_at=made.created_at,
                )
            )
            await _add_to_count(conn, target, +1)
        return FollowResult(made, changed=True)

    async def unfollow(self, follower_id: str, target: Target) -> FollowResult:
        """Stop following ``target``; unfollowing what one does not follow changes nothing.

        Raises:
            InvalidInput: a malformed user id.
        """
        check_target(follower_id, target)
        async with self.db.write() as conn:
            existing = await _get(conn, follower_id, target)
            if existing is None:
                return FollowResult(None, changed=False)
            await conn.execute(
                delete(follow).where(follow.c.follower_id == follower_id, *_is(target))
            )
            after = await _add_to_count(conn, target, -1)
            if after == self.limits.push_max_followers - 1:
                await backfill(conn, target, self.limits.horizon(self._clock()))
            # What was pushed from this target no longer shows (the read joins
            # the follows); deleting it keeps the table to what can show.
            await _drop_pushed(conn, follower_id, target)
        return FollowResult(existing, changed=True)


async def _check_readable(conn: AsyncConnection, follower_id: str, target: Target) -> None:
    if target.kind is not TargetKind.PLAYLIST:
        return
    header = await repository.get_playlist(conn, target.id)
    role = await repository.get_role(conn, target.id, follower_id) if header else None
    try:
        found = readable(header, role)
    except NotFound:
        raise NotFound("playlist not found", field=("targetId",)) from None
    if found.system:
        raise InvalidInput(f"{found.title} cannot be followed", field=("targetId",))


async def _get(conn: AsyncConnection, follower_id: str, target: Target) -> Follow | None:
    row = (
        await conn.execute(select(follow).where(follow.c.follower_id == follower_id, *_is(target)))
    ).first()
    return follow_from_row(row) if row else None


def dialect_insert(conn: AsyncConnection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT with the dialect's ``ON CONFLICT`` clauses."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


async def _add_to_count(conn: AsyncConnection, target: Target, delta: int) -> int:
    """Move the target's follower count by ``delta``; the count after it."""
    stmt = dialect_insert(conn, follow_count).values(
        target_kind=target.kind.value, target_id=target.id, follower_count=max(delta, 0)
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[follow_count.c.target_kind, follow_count.c.target_id],
        set_={"follower_count": follow_count.c.follower_count + delta},
    )
    await conn.execute(stmt)
    count = await conn.scalar(
        select(follow_count.c.follower_count).where(
            follow_count.c.target_kind == target.kind.value,
            follow_count.c.target_id == target.id,
        )
    )
    return int(count or 0)


def _versions_of(target: Target, horizon: datetime) -> ColumnElement[bool]:
    """The log rows a target brings to a feed since ``horizon`` (a SELECT's FROM and WHERE)."""
    since = playlist_mutation.c.committed_at >= literal(horizon, UTCDateTime())
    if target.kind is TargetKind.PLAYLIST:
        return and_(playlist_mutation.c.playlist_id == target.id, since)
    return and_(
        playlist_mutation.c.playlist_id.in_(
            select(playlist.c.id).where(playlist.c.owner_id == target.id)
        ),
        playlist_mutation.c.version == 0,
        since,
    )


async def backfill(conn: AsyncConnection, target: Target, horizon: datetime) -> int:
    """Push the target's versions since ``horizon`` to its followers (since they followed).

    Returns the rows written; rows already there are left alone.
    """
    rows = (
        select(
            follow.c.follower_id,
            playlist_mutation.c.playlist_id,
            playlist_mutation.c.version,
            playlist_mutation.c.actor_id,
            playlist_mutation.c.committed_at,
        )
        .select_from(follow.join(playlist_mutation, true()))
        .where(
            *_is(target),
            _versions_of(target, horizon),
            playlist_mutation.c.committed_at >= follow.c.created_at,
        )
    )
    stmt = (
        dialect_insert(conn, feed_item)
        .from_select(["follower_id", "playlist_id", "version", "actor_id", "happened_at"], rows)
        .on_conflict_do_nothing()
    )
    result = await conn.execute(stmt)
    return int(result.rowcount or 0)


async def _drop_pushed(conn: AsyncConnection, follower_id: str, target: Target) -> None:
    where = [feed_item.c.follower_id == follower_id]
    if target.kind is TargetKind.PLAYLIST:
        where.append(feed_item.c.playlist_id == target.id)
    else:
        where += [
            feed_item.c.version == 0,
            feed_item.c.playlist_id.in_(
                select(playlist.c.id).where(playlist.c.owner_id == target.id)
            ),
        ]
    await conn.execute(delete(feed_item).where(*where))


async def follower_counts(conn: AsyncConnection, targets: Collection[Target]) -> dict[Target, int]:
    """Followers of each target; targets nobody follows are absent."""
    if not targets:
        return {}
    keys = [(t.kind.value, t.id) for t in targets]
    rows = await conn.execute(
        select(follow_count).where(
            tuple_(follow_count.c.target_kind, follow_count.c.target_id).in_(keys),
            follow_count.c.follower_count > 0,
        )
    )
    return {Target(TargetKind(r.target_kind), r.target_id): r.follower_count for r in rows}


async def follows_of(conn: AsyncConnection, follower_id: str) -> list[Follow]:
    """Everything ``follower_id`` follows (at most the follow limit)."""
    rows = await conn.execute(select(follow).where(follow.c.follower_id == follower_id))
    return [follow_from_row(r) for r in rows]


async def following_page(
    conn: AsyncConnection,
    follower_id: str,
    kind: TargetKind | None,
    *,
    after: tuple[datetime, str, str] | None,
    limit: int,
) -> tuple[list[Follow], int]:
    """``(page, total)``: the follower's follows of ``kind`` (any: ``None``), newest first.

    Args:
        after: exclusive keyset ``(created_at, target_kind, target_id)`` of the last one shown.
    """
    where = [follow.c.follower_id == follower_id]
    if kind is not None:
        where.append(follow.c.target_kind == kind.value)
    query = select(follow).where(*where)
    if after is not None:
        at, after_kind, after_id = after
        query = query.where(
            or_(
                follow.c.created_at < literal(at, UTCDateTime()),
                and_(
                    follow.c.created_at == literal(at, UTCDateTime()),
                    tuple_(follow.c.target_kind, follow.c.target_id)
                    < tuple_(literal(after_kind), literal(after_id)),
                ),
            )
        )
    query = query.order_by(
        follow.c.created_at.desc(), follow.c.target_kind.desc(), follow.c.target_id.desc()
    ).limit(limit)
    page = [follow_from_row(r) for r in await conn.execute(query)]
    total = await conn.scalar(select(func.count()).select_from(follow).where(*where))
    return page, int(total or 0)


async def set_follower_count(conn: AsyncConnection, target: Target, count: int) -> None:
    """Set a target's count outright (the bench's bulk loads write follows directly)."""
    stmt = dialect_insert(conn, follow_count).values(
        target_kind=target.kind.value, target_id=target.id, follower_count=count
    )
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[follow_count.c.target_kind, follow_count.c.target_id],
            set_={"follower_count": count},
        )
    )
