"""Follows and the feed (issue 14): one follows relation, discriminated by the target's kind.

A user follows PLAYLISTs and USERs. The feed of a user is what happened in
what they follow, since they followed it: every version of a followed
playlist, and version 0 of playlists created by a followed user, newest first,
kept :attr:`FeedLimits.retention_days` days. What the viewer may not read
(a PRIVATE playlist they are no member of, a deleted one) is left out when
the feed is read, so losing access ends a follow's effect at once.

The feed is *thin*: an item is ``(playlist id, version, actor, time)``; titles
and names are read when the feed is read, never copied into it.

Hybrid fan-out: a target with fewer than :attr:`FeedLimits.push_max_followers`
followers is *pushed* (the feed consumer writes one row per follower, at least
once, idempotent on ``(follower, playlist, version)``); a larger one is
*pulled* (reading a feed reads that target's recent log). Both give the same
items for the same history (each from when the follow began, within retention),
so a target crossing the threshold in either direction loses and repeats nothing.

Which side a target is on is its :class:`FanOut`, kept per target and moved
by :meth:`FeedLimits.next_fan_out` with hysteresis: to pull at the threshold,
back to push only below :attr:`FeedLimits.push_again_below`. Going back to
push is a *switch* (:attr:`FanOut.TO_PUSH`): a worker backfills the followers'
rows in batches while the target is still read as pulled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from chorus.domain.errors import InvalidInput, LimitExceeded
from chorus.domain.limits import MAX_ID_LENGTH
from chorus.domain.validation import is_user_id


class TargetKind(StrEnum):
    """What a follow points at."""

    PLAYLIST = "PLAYLIST"
    """Every version of the playlist reaches the follower's feed."""
    USER = "USER"
    """Playlists the user creates reach the follower's feed."""


@dataclass(frozen=True, slots=True)
class Target:
    kind: TargetKind
    id: str


@dataclass(frozen=True, slots=True)
class Follow:
    """``follower_id`` follows ``target`` since ``created_at``."""

    follower_id: str
    target: Target
    created_at: datetime


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One version of one playlist in a feed: ids and a time, nothing to display."""

    playlist_id: str
    version: int
    actor_id: str
    happened_at: datetime

    @property
    def sort_key(self) -> FeedKey:
        """Newest first: the feed is ordered by this key, descending."""
        return (self.happened_at, self.playlist_id, self.version)


FeedKey = tuple[datetime, str, int]
"""``(happened_at, playlist_id, version)``: the keyset of feed pages, descending."""


class FanOut(StrEnum):
    """How a target's versions reach its followers' feeds (stored with its follower count)."""

    PUSH = "PUSH"
    """One feed row per follower and version, written by the feed consumer."""
    PULL = "PULL"
    """Nothing written; a feed read reads the target's log."""
    TO_PUSH = "TO_PUSH"
    """Switching back to push: read as pulled until a worker has backfilled every
    follower's rows (in batches), while new versions are already pushed."""

    @property
    def read_from_log(self) -> bool:
        """Whether a feed read reads this target's log (else its pushed rows suffice)."""
        return self is not FanOut.PUSH

    @property
    def pushes(self) -> bool:
        """Whether the feed consumer writes rows for this target's new versions."""
        return self is not FanOut.PULL


@dataclass(frozen=True, slots=True)
class FeedLimits:
    """The feed's settings (``CHORUS_FEED_*``, ``CHORUS_MAX_FOLLOWS_PER_USER``)."""

    push_max_followers: int = 10_000
    """Targets with fewer followers are pushed; the others are pulled."""
    max_follows: int = 1_000
    """Targets one user may follow."""
    page_size_default: int = 20
    page_size_max: int = 50
    retention_days: int = 30
    """Pushed rows are deleted after this; pulled targets are read back this far."""
    live_weight_max: int = 20_000
    """What one user's ``feedEvents`` subscriptions may weigh in one process: each weighs
    the playlists the user follows (at least 1)."""
    switch_batch_rows: int = 2_000
    """Feed rows one batch of a switch back to push writes, at most (one transaction)."""

    def pushed(self, follower_count: int) -> bool:
        """Whether ``follower_count`` is below the threshold (the rule before hysteresis)."""
        return follower_count < self.push_max_followers

    @property
    def push_again_below(self) -> int:
        """A pulled target is pushed again only with fewer followers than this.

        90 % of the threshold (rounded up), so a target hovering at the threshold
        does not switch back and forth; the threshold itself below 10.
        """
        return self.push_max_followers - self.push_max_followers // 10

    def fan_out(self, follower_count: int, stored: FanOut | None) -> FanOut:
        """A target's fan-out: the stored one, else (a target untouched since
        migration 0010) by its count against the threshold, as before it."""
        if stored is not None:
            return stored
        return FanOut.PUSH if self.pushed(follower_count) else FanOut.PULL

    def next_fan_out(self, current: FanOut, follower_count: int) -> FanOut:
        """The fan-out of a target that was ``current`` and now has ``follower_count``.

        To pull at :attr:`push_max_followers` or more (free: pushed rows stay,
        the pull adds the rest; a switch under way is abandoned); a pulled
        target back to push below :attr:`push_again_below`, through
        :attr:`FanOut.TO_PUSH` unless nobody is left to backfill.
        """
        if not self.pushed(follower_count):
            return FanOut.PULL
        if current is FanOut.PULL and follower_count < self.push_again_below:
            return FanOut.TO_PUSH if follower_count > 0 else FanOut.PUSH
        return current

    def horizon(self, now: datetime) -> datetime:
        """The oldest time a feed still shows."""
        return now - timedelta(days=self.retention_days)


DEFAULT_FEED_LIMITS = FeedLimits()


def check_target(follower_id: str, target: Target) -> None:
    """Raises for a target that can never be followed.

    Raises:
        InvalidInput: a malformed user id, or the follower themself (field ``targetId``).
    """
    if target.kind is TargetKind.USER:
        if not is_user_id(target.id, MAX_ID_LENGTH):
            raise InvalidInput("not a user id", field=("targetId",))
        if target.id == follower_id:
            raise InvalidInput("you cannot follow yourself", field=("targetId",))


def check_follow_limit(following: int, limits: FeedLimits) -> None:
    """Raises :class:`LimitExceeded` when a user following ``following`` targets may not add one."""
    if following >= limits.max_follows:
        raise LimitExceeded(
            f"a user follows at most {limits.max_follows} playlists and users",
            field=("targetId",),
        )


def merge(pages: Iterable[Sequence[FeedItem]], size: int) -> tuple[list[FeedItem], bool]:
    """One feed page from the pushed page and each pulled target's page.

    Each page is newest first and holds up to ``size + 1`` items older than the
    cursor, so the first ``size`` of their union, deduplicated by ``(playlist,
    version)`` (a target that moved from push to pull has both), is the page.

    Returns:
        ``(items, has_next)``: up to ``size`` items, newest first, and whether
        more follow.
    """
    seen: dict[tuple[str, int], FeedItem] = {}
    for page in pages:
        for item in page:
            seen.setdefault((item.playlist_id, item.version), item)
    ordered = sorted(seen.values(), key=lambda i: i.sort_key, reverse=True)
    return ordered[:size], len(ordered) > size
