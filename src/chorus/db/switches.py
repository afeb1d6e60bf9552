"""Each followed target's fan-out in SQL, and the switch from pull back to push in batches.

A target's :class:`~chorus.domain.follows.FanOut` is stored beside its follower
count (``follow_count.fan_out``) and moved in the follow's or unfollow's
transaction by :func:`move_fan_out`, which costs that request at most two
small statements: going to pull writes nothing (pushed rows stay, the pull
adds the rest), and going back to push only marks the target
:attr:`~chorus.domain.follows.FanOut.TO_PUSH` and inserts its ``feed_switch``
row.

The backfill — one ``feed_item`` row per remaining follower and version
within retention, so that what the pull showed them stays — is done later by
a worker (:class:`chorus.events.feed.FeedSwitcher`), one
:func:`switch_batch` at a time, each its own short write transaction of at
most :attr:`~chorus.domain.follows.FeedLimits.switch_batch_rows` rows. Until
the last batch marks the target PUSH, feeds read it as pulled (so no version
is missing, and the read's merge drops what is both pulled and pushed), and
the feed consumer already pushes its new versions (so none committed during
the switch is missed by a follower the walk has passed).

Locks (PostgreSQL): a batch locks the target's ``follow_count`` row, then its
``feed_switch`` row — the order a follow or unfollow takes them — so a follow
that abandons a switch waits for at most one batch, and never deadlocks it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    and_,
    bindparam,
    delete,
    literal,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.db.engine import Database
from chorus.db.tables import (
    UTCDateTime,
    feed_item,
    feed_switch,
    follow,
    follow_count,
    playlist,
    playlist_mutation,
)
from chorus.domain.follows import FanOut, FeedLimits, Target, TargetKind


def _of(table: Any, target: Target) -> list[ColumnElement[bool]]:
    return [table.c.target_kind == target.kind.value, table.c.target_id == target.id]


async def followed_counts(conn: AsyncConnection, targets: Collection[Target]) -> list[Any]:
    """The ``follow_count`` rows of those ``targets`` that have followers."""
    if not targets:
        return []
    keys = [(t.kind.value, t.id) for t in targets]
    return list(await conn.execute(_FOLLOWED, {"keys": keys}))


_FOLLOWED = select(follow_count).where(
    tuple_(follow_count.c.target_kind, follow_count.c.target_id).in_(
        bindparam("keys", expanding=True)
    ),
    follow_count.c.follower_count > 0,
)
"""Built once: the embedded relay asks it for every batch it publishes."""


async def fan_outs(
    conn: AsyncConnection, targets: Collection[Target], limits: FeedLimits
) -> dict[Target, FanOut]:
    """The fan-out of each target with followers; targets nobody follows are absent."""
    rows = await followed_counts(conn, targets)
    return {
        Target(TargetKind(r.target_kind), r.target_id): limits.fan_out(
            r.follower_count, FanOut(r.fan_out) if r.fan_out else None
        )
        for r in rows
    }


async def move_fan_out(
    conn: AsyncConnection,
    target: Target,
    before: FanOut,
    followers: int,
    limits: FeedLimits,
    now: datetime,
) -> FanOut:
    """Store the fan-out of a target that was ``before`` and now has ``followers``; it.

    Bounded whatever the target's followers and history: one ``UPDATE``, and
    one ``INSERT`` or ``DELETE`` of its ``feed_switch`` row when a switch
    starts or is abandoned.
    """
    after = limits.next_fan_out(before, followers)
    await conn.execute(update(follow_count).where(*_of(follow_count, target)).values(fan_out=after))
    if after is FanOut.TO_PUSH and before is not FanOut.TO_PUSH:
        await conn.execute(
            dialect_insert(conn, feed_switch)
            .values(target_kind=target.kind.value, target_id=target.id, started_at=now)
            .on_conflict_do_nothing()
        )
    elif before is FanOut.TO_PUSH and after is not FanOut.TO_PUSH:
        await conn.execute(delete(feed_switch).where(*_of(feed_switch, target)))
    return after


def dialect_insert(conn: AsyncConnection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT with the dialect's ``ON CONFLICT`` clauses."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def versions_of(target: Target, horizon: datetime) -> ColumnElement[bool]:
    """The log rows a target brings to a feed since ``horizon`` (a WHERE on the log)."""
    m = playlist_mutation
    since = m.c.committed_at >= literal(horizon, UTCDateTime())
    if target.kind is TargetKind.PLAYLIST:
        return and_(m.c.playlist_id == target.id, since)
    owned = select(playlist.c.id).where(playlist.c.owner_id == target.id)
    return and_(m.c.playlist_id.in_(owned), m.c.version == 0, since)


@dataclass(frozen=True, slots=True)
class SwitchBatch:
    """What one batch of a switch did."""

    target: Target
    rows: int
    """Feed rows written (at most ``switch_batch_rows``; rows already there count none)."""
    done: bool
    """The target is pushed now (or the switch was abandoned by a follow)."""


async def pending_switch(db: Database) -> Target | None:
    """The oldest target switching back to push, if any (one read statement)."""
    async with db.read_statement() as conn:
        row = (
            await conn.execute(
                select(feed_switch.c.target_kind, feed_switch.c.target_id)
                .order_by(feed_switch.c.started_at)
                .limit(1)
            )
        ).first()
    return Target(TargetKind(row.target_kind), row.target_id) if row else None


async def switch_batch(db: Database, limits: FeedLimits, now: datetime) -> SwitchBatch | None:
    """Run one batch of the oldest switch, in its own write transaction; None when none is.

    Raises:
        DatabaseUnavailable: the batch was rolled back; running it again is safe.
    """
    target = await pending_switch(db)
    if target is None:
        return None
    async with db.write() as conn:
        return await _batch(conn, target, limits, limits.horizon(now))


def _locked(conn: AsyncConnection, query: Select[Any]) -> Select[Any]:
    return query.with_for_update() if conn.dialect.name == "postgresql" else query


async def _batch(
    conn: AsyncConnection, target: Target, limits: FeedLimits, horizon: datetime
) -> SwitchBatch:
    stored = await conn.scalar(
        _locked(conn, select(follow_count.c.fan_out).where(*_of(follow_count, target)))
    )
    cursor = (
        await conn.execute(_locked(conn, select(feed_switch).where(*_of(feed_switch, target))))
    ).first()
    if cursor is None:
        return SwitchBatch(target, 0, done=True)  # finished or abandoned meanwhile
    if stored != FanOut.TO_PUSH.value:
        await conn.execute(delete(feed_switch).where(*_of(feed_switch, target)))
        return SwitchBatch(target, 0, done=True)
    m = playlist_mutation
    where = [versions_of(target, horizon)]
    if cursor.playlist_after is not None:
        where.append(
            tuple_(m.c.playlist_id, m.c.version)
            > tuple_(literal(cursor.playlist_after), literal(cursor.version_after))
        )
    size = limits.switch_batch_rows
    # One key more than a batch holds tells whether the versions end in this batch.
    keys = (
        await conn.execute(
            select(m.c.playlist_id, m.c.version)
            .where(*where)
            .order_by(m.c.playlist_id, m.c.version)
            .limit(size + 1)
        )
    ).all()
    more_versions = len(keys) > size
    keys = keys[:size]
    # Every version left for as many followers as fit; one follower at a time
    # (and its versions in slices) when its versions alone fill a batch.
    # Within one follower's versions (the cursor names a version) the batch stays with it.
    one = more_versions or cursor.playlist_after is not None
    per_batch = 1 if one else max(1, size // max(len(keys), 1))
    followers_after = (
        [follow.c.follower_id > cursor.follower_after] if cursor.follower_after else []
    )
    followers = (
        await conn.scalars(
            select(follow.c.follower_id)
            .where(*_of(follow, target), *followers_after)
            .order_by(follow.c.follower_id)
            .limit(per_batch)
        )
    ).all()
    written = 0
    if followers and keys:
        last_key = tuple_(literal(keys[-1].playlist_id), literal(keys[-1].version))
        rows = (
            select(
                follow.c.follower_id, m.c.playlist_id, m.c.version, m.c.actor_id, m.c.committed_at
            )
            .select_from(follow.join(m, true()))
            .where(
                *_of(follow, target),
                *followers_after,
                follow.c.follower_id <= followers[-1],
                *where,
                tuple_(m.c.playlist_id, m.c.version) <= last_key,
                m.c.committed_at >= follow.c.created_at,
            )
        )
        columns = ["follower_id", "playlist_id", "version", "actor_id", "happened_at"]
        stmt = dialect_insert(conn, feed_item).from_select(columns, rows).on_conflict_do_nothing()
        written = max(int((await conn.execute(stmt)).rowcount or 0), 0)
    nothing_left = not keys and cursor.playlist_after is None  # no version within retention
    if nothing_left or not followers or (not more_versions and len(followers) < per_batch):
        await conn.execute(
            update(follow_count).where(*_of(follow_count, target)).values(fan_out=FanOut.PUSH)
        )
        await conn.execute(delete(feed_switch).where(*_of(feed_switch, target)))
        return SwitchBatch(target, written, done=True)
    if more_versions:
        moved = {"playlist_after": keys[-1].playlist_id, "version_after": keys[-1].version}
    else:
        moved = {"follower_after": followers[-1], "playlist_after": None, "version_after": None}
    await conn.execute(update(feed_switch).where(*_of(feed_switch, target)).values(**moved))
    return SwitchBatch(target, written, done=False)
