"""Follows in SQL: follow, unfollow (idempotent), counts, the viewer's follows.

``follow_count`` moves with every follow and unfollow in the same transaction,
so the feed's push-or-pull decision and ``followerCount`` read one row. The
target's fan-out moves with it (:func:`chorus.db.switches.move_fan_out`, with
hysteresis): to pull at the threshold, back to push below 90 % of it. Either
costs the request a statement or two, never work that grows with the target's
followers or history: the backfill of a switch back to push is done by a
worker in batches (:func:`chorus.db.switches.switch_batch`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    ColumnElement,
    and_,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.switches import dialect_insert, followed_counts, move_fan_out
from chorus.db.tables import (
    UTCDateTime,
    feed_item,
    follow,
    follow_count,
    playlist,
)
from chorus.domain.access import readable
from chorus.domain.errors import InvalidInput, NotFound
from chorus.domain.follows import (
    DEFAULT_FEED_LIMITS,
    FanOut,
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
            await self._add_to_count(conn, target, +1)
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
            await self._add_to_count(conn, target, -1)
            # What was pushed from this target no longer shows (the read joins
            # the follows); deleting it keeps the table to what can show.
            await _drop_pushed(conn, follower_id, target)
        return FollowResult(existing, changed=True)

    async def _add_to_count(self, conn: AsyncConnection, target: Target, delta: int) -> None:
        """Move the target's follower count by ``delta``, and its fan-out with it."""
        # A new row starts where its first follower puts it; an existing one keeps its fan-out.
        first = self.limits.next_fan_out(FanOut.PUSH, max(delta, 0))
        stmt = dialect_insert(conn, follow_count).values(
            target_kind=target.kind.value,
            target_id=target.id,
            follower_count=max(delta, 0),
            fan_out=first,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[follow_count.c.target_kind, follow_count.c.target_id],
            set_={"follower_count": follow_count.c.follower_count + delta},
        )
        await conn.execute(stmt)
        row = (
            await conn.execute(
                select(follow_count.c.follower_count, follow_count.c.fan_out).where(
                    follow_count.c.target_kind == target.kind.value,
                    follow_count.c.target_id == target.id,
                )
            )
        ).one()
        count = int(row.follower_count)
        # Untouched since migration 0010 (NULL): it was on the side its count before put it.
        before = self.limits.fan_out(count - delta, FanOut(row.fan_out) if row.fan_out else None)
        if self.limits.next_fan_out(before, count) is not before or row.fan_out is None:
            await move_fan_out(conn, target, before, count, self.limits, self._clock())


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
    rows = await followed_counts(conn, targets)
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
