"""Redis snapshots of PUBLIC playlists: the format, idempotent writes, and the reader.

A snapshot is the playlist header and its first page of live entries, read in
one SQL transaction at ``version`` (DESIGN §8). Under
:func:`~chorus.subscriptions.wire.snapshot_key` it is compact JSON::

    {"v": 1, "version": 7, "playlist": {header fields}, "entries": [entry wire], "has_more": true}

``"v"`` and ``"version"`` always come first: the Lua scripts read the stored
version with a pattern instead of decoding the whole document.
:func:`~chorus.subscriptions.wire.head_key` holds the newest version known to
be committed; API processes raise it after each commit, the cache projector
after each write. A reader serves a snapshot only when its version *is* the
head, so a snapshot older than the last commit is never served, whether or
not Kafka and the projector keep up.

Every write is a Lua script and idempotent by version: replaying an old or a
duplicate event never moves a snapshot or a head backwards.

:class:`SnapshotStore` is the writer (the projector's; errors propagate).
:class:`SnapshotCache` is the API's reader: one round trip per read, concurrent
reads of one playlist coalesced into one Redis call, a circuit breaker and a
short timeout in front of Redis; it never raises because of Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict, cast

from redis.asyncio import Redis

from chorus.domain.changes import EntryWire, entry_from_wire, entry_to_wire
from chorus.domain.model import Entry, Playlist, Visibility
from chorus.metrics import REDIS_BREAKER_OPEN, SNAPSHOT_READS
from chorus.subscriptions.breaker import BreakerState, CircuitBreaker
from chorus.subscriptions.tasks import cancel_and_wait
from chorus.subscriptions.wire import head_key, snapshot_key

log = logging.getLogger("chorus.snapshots")

SNAPSHOT_FORMAT = 1
"""The ``"v"`` of the snapshot JSON; bump it (and the key prefix) on any format change."""
FLUSH_BATCH = 500
"""Head bumps written per pipeline when several are pending (Redis came back)."""
FLUSH_RETRY_S = 0.5
"""How often head raises that Redis refused are tried again (seconds)."""


class PlaylistHeaderWire(TypedDict):
    """Every field of :class:`~chorus.domain.model.Playlist`; times are ISO 8601."""

    id: str
    owner_id: str
    title: str
    description: str | None
    visibility: str
    collaborative: bool
    version: int
    membership_epoch: int
    entry_count: int
    created_at: str
    updated_at: str
    deleted_at: str | None


class SnapshotWire(TypedDict):
    v: Literal[1]
    version: int
    playlist: PlaylistHeaderWire
    entries: list[EntryWire]
    has_more: bool


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A playlist's header and its first live entries, as of ``version``.

    Attributes:
        version: the playlist version everything here was read at.
        playlist: the header (``playlist.version == version``).
        entries: the first live entries in list order.
        has_more: live entries follow the last of ``entries``.
    """

    version: int
    playlist: Playlist
    entries: tuple[Entry, ...]
    has_more: bool

    @classmethod
    def read(cls, playlist: Playlist, first_entries: Sequence[Entry], page_size: int) -> Snapshot:
        """The snapshot of a header and the first ``page_size + 1`` live entries read with it."""
        return cls(
            version=playlist.version,
            playlist=playlist,
            entries=tuple(first_entries[:page_size]),
            has_more=len(first_entries) > page_size,
        )

    def first_page(self, size: int) -> tuple[Sequence[Entry], bool] | None:
        """The first ``size`` live entries and whether more follow, or ``None``.

        ``None`` when the snapshot does not hold that many entries and more exist.
        """
        if size > len(self.entries) and self.has_more:
            return None
        return self.entries[:size], len(self.entries) > size or self.has_more

    def to_json(self) -> bytes:
        p = self.playlist
        wire: SnapshotWire = {
            "v": 1,
            "version": self.version,
            "playlist": {
                "id": p.id,
                "owner_id": p.owner_id,
                "title": p.title,
                "description": p.description,
                "visibility": p.visibility.value,
                "collaborative": p.collaborative,
                "version": p.version,
                "membership_epoch": p.membership_epoch,
                "entry_count": p.entry_count,
                "created_at": p.created_at.isoformat(),
                "updated_at": p.updated_at.isoformat(),
                "deleted_at": p.deleted_at.isoformat() if p.deleted_at else None,
            },
            "entries": [entry_to_wire(e) for e in self.entries],
            "has_more": self.has_more,
        }
        return json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Snapshot:
        """The snapshot :meth:`to_json` wrote.

        Raises:
            ValueError: not a version-1 snapshot.
        """
        try:
            wire = cast(SnapshotWire, json.loads(data))
            if wire["v"] != SNAPSHOT_FORMAT:
                raise ValueError(f"snapshot format {wire['v']!r}")
            h = wire["playlist"]
            playlist = Playlist(
                id=h["id"],
                owner_id=h["owner_id"],
                title=h["title"],
                description=h["description"],
                visibility=Visibility(h["visibility"]),
                collaborative=h["collaborative"],
                version=h["version"],
                membership_epoch=h["membership_epoch"],
                entry_count=h["entry_count"],
                created_at=datetime.fromisoformat(h["created_at"]),
                updated_at=datetime.fromisoformat(h["updated_at"]),
                deleted_at=datetime.fromisoformat(h["deleted_at"]) if h["deleted_at"] else None,
            )
            entries = tuple(entry_from_wire(e) for e in wire["entries"])
            snapshot = cls(wire["version"], playlist, entries, bool(wire["has_more"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a snapshot: {exc!r}") from None
        if snapshot.version != playlist.version:
            raise ValueError("snapshot and header versions differ")
        return snapshot


# --- Lua: every write idempotent by version ---------------------------------

_STORED_VERSION = """
local function stored_version(key)
  local doc = redis.call('GET', key)
  if not doc then return -1 end
  return tonumber(string.match(doc, '^{"v":1,"version":(%d+)')) or -1
end
local function raise_head(key, version)
  local head = tonumber(redis.call('GET', key)) or -1
  if version > head then redis.call('SET', key, version) end
  return head
end
"""

# KEYS: snapshot, head. ARGV: version, json. 1 when written.
# A version below the head can never be served (reads need version == head),
# and refusing it keeps a late write from resurrecting a removed snapshot.
_PUT = (
    _STORED_VERSION
    + """
local version = tonumber(ARGV[1])
local head = raise_head(KEYS[2], version)
if version < head or version <= stored_version(KEYS[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS: snapshot, head. ARGV: version. 1 when a snapshot was deleted.
# A newer snapshot (public again since) stays.
_REMOVE = (
    _STORED_VERSION
    + """
local version = tonumber(ARGV[1])
raise_head(KEYS[2], version)
local stored = stored_version(KEYS[1])
if stored < 0 and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if stored > version then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""
)

# KEYS: head. ARGV: version.
_BUMP = (
    _STORED_VERSION
    + """
raise_head(KEYS[1], tonumber(ARGV[1]))
return 0
"""
)

# KEYS: snapshots. The stored versions (-1: none).
_VERSIONS = (
    _STORED_VERSION
    + """
local out = {}
for i, key in ipairs(KEYS) do out[i] = stored_version(key) end
return out
"""
)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


class SnapshotStore:
    """Writes snapshots and head versions; every write is idempotent by version.

    Errors of the Redis client (``redis.RedisError``, ``OSError``) propagate:
    the cache projector retries them.
    """

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._put = redis.register_script(_PUT)
        self._remove = redis.register_script(_REMOVE)
        self._bump = redis.register_script(_BUMP)
        self._versions = redis.register_script(_VERSIONS)

    async def put(self, snapshot: Snapshot) -> bool:
        """Store ``snapshot`` unless the stored one or the head is newer; raise the head.

        Returns:
            whether the snapshot was written.
        """
        return await self.write([snapshot], {}) == 1

    async def remove(self, playlist_id: str, version: int) -> bool:
        """Drop the snapshot (not PUBLIC at ``version``, or deleted) unless a newer one is stored.

        Returns:
            whether a snapshot was deleted. The head is raised to ``version`` either way.
        """
        return await self.write([], {playlist_id: version}) == 1

    async def write(self, puts: Sequence[Snapshot], removes: dict[str, int]) -> int:
        """:meth:`put` and :meth:`remove` for many playlists in one pipeline.

        Args:
            puts: snapshots to store.
            removes: playlist id → the version at which it stopped being PUBLIC.

        Returns:
            how many snapshots were written or deleted.
        """
        async with self._redis.pipeline(transaction=False) as pipe:
            for snapshot in puts:
                pid = snapshot.playlist.id
                await self._put(
                    [snapshot_key(pid), head_key(pid)],
                    [snapshot.version, snapshot.to_json()],
                    client=pipe,
                )
            for pid, version in removes.items():
                await self._remove([snapshot_key(pid), head_key(pid)], [version], client=pipe)
            results = await pipe.execute()
        return sum(1 for r in results if r)

    async def bump_head(self, playlist_id: str, version: int) -> None:
        """Raise the head to ``version`` (a commit happened); never lowers it."""
        await self._bump([head_key(playlist_id)], [version])

    async def bump_heads(self, versions: dict[str, int]) -> None:
        """:meth:`bump_head` for many playlists in one pipeline."""
        if len(versions) == 1:
            await self.bump_head(*next(iter(versions.items())))
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for playlist_id, version in versions.items():
                await self._bump([head_key(playlist_id)], [version], client=pipe)
            await pipe.execute()

    async def versions(self, playlist_ids: Collection[str]) -> dict[str, int]:
        """The versions of the stored snapshots (playlists without one are absent)."""
        ids = list(playlist_ids)
        if not ids:
            return {}
        found = await self._versions([snapshot_key(i) for i in ids], [])
        return {i: int(v) for i, v in zip(ids, found, strict=True) if int(v) >= 0}

    async def read(self, playlist_id: str) -> tuple[int | None, Snapshot | None]:
        """``(head, snapshot)`` as stored, in one round trip.

        Raises:
            ValueError: the stored snapshot is not one.
        """
        head, doc = await self._redis.mget(head_key(playlist_id), snapshot_key(playlist_id))
        return _int(head), Snapshot.from_json(doc) if doc is not None else None


_Read = tuple[int | None, Snapshot | None]


class SnapshotCache:
    """The API's reader of snapshots, and its best-effort head bumps.

    Args:
        redis: the client (its own connection pool; shared with nothing slow).
        breaker: in front of every Redis call; while open, reads go to SQL at once.
        page_size: the largest first page served from a snapshot (the
            projector's page size); larger first pages read SQL unless the
            snapshot holds the whole playlist.
        timeout_s: how long one Redis call may take before it counts as a failure.
        max_pending: how many unconfirmed head bumps are remembered (the
            oldest are forgotten beyond that).

    Attributes:
        redis_calls: Redis round trips made by reads (coalesced reads count once).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        breaker: CircuitBreaker,
        page_size: int = 50,
        timeout_s: float = 0.25,
        max_pending: int = 100_000,
    ) -> None:
        self.page_size = page_size
        self.redis_calls = 0
        self._store = SnapshotStore(redis)
        self._redis = redis
        self._breaker = breaker
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._inflight: dict[str, asyncio.Future[_Read | None]] = {}
        self._pending: dict[str, int] = {}
        """Heads this process committed but could not write yet: reads below them miss."""
        self._flusher: asyncio.Task[None] | None = None
        REDIS_BREAKER_OPEN.set(0 if breaker.state is BreakerState.CLOSED else 1)

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    async def get(self, playlist_id: str, min_version: int | None = None) -> Snapshot | None:
        """The current snapshot of a playlist, or ``None`` (read SQL instead).

        A snapshot is returned only when its version equals the head version
        and is ``>= min_version``. Concurrent calls for one playlist share one
        Redis round trip. Never raises because of Redis: a failure, a timeout
        or an open breaker gives ``None``.
        """
        read = self._inflight.get(playlist_id)
        if read is None:
            if not self._breaker.allow():
                SNAPSHOT_READS.labels(result="bypass").inc()
                return None
            read = asyncio.ensure_future(self._read(playlist_id))
            self._inflight[playlist_id] = read
            read.add_done_callback(lambda done: self._done(playlist_id, done))
        # Shielded: one caller's cancellation must not cancel the others' read.
        result = await asyncio.shield(read)
        if result is None:
            SNAPSHOT_READS.labels(result="bypass").inc()
            return None
        head, snapshot = result
        if (
            snapshot is None
            or snapshot.version != head
            or snapshot.version < self._pending.get(playlist_id, -1)
            or (min_version is not None and snapshot.version < min_version)
        ):
            SNAPSHOT_READS.labels(result="miss").inc()
            return None
        SNAPSHOT_READS.labels(result="hit").inc()
        return snapshot

    def committed(self, playlist_id: str, version: int) -> None:
        """A commit of this process (a store's ``on_commit``): raise the head in the background.

        Until the head is written, this process's own reads of the playlist
        miss any older snapshot. Needs a running event loop.
        """
        self._remember(playlist_id, version)
        self._keep_flushing()

    async def bump_head(self, playlist_id: str, version: int) -> None:
        """Raise the head after a commit, through the breaker; never raises.

        A bump that cannot be written now is remembered and retried in the
        background every :data:`FLUSH_RETRY_S` until Redis takes it.
        """
        self._remember(playlist_id, version)
        while self._pending and await self._flush():
            pass
        if self._pending:
            self._keep_flushing()

    @property
    def pending_heads(self) -> int:
        """Head raises of this process's commits that Redis has not taken yet."""
        return len(self._pending)

    async def aclose(self) -> None:
        """Send what is pending if Redis answers now, then stop retrying.

        The caller closes the Redis client.
        """
        if self._flusher is not None:
            with contextlib.suppress(Exception):  # it logged its own failures
                await cancel_and_wait(self._flusher)
        while self._pending and await self._flush():
            pass

    def _keep_flushing(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_all())

    def _done(self, playlist_id: str, read: asyncio.Future[_Read | None]) -> None:
        if self._inflight.get(playlist_id) is read:
            del self._inflight[playlist_id]

    async def _read(self, playlist_id: str) -> _Read | None:
        self.redis_calls += 1
        try:
            async with asyncio.timeout(self._timeout_s):
                head, doc = await self._redis.mget(head_key(playlist_id), snapshot_key(playlist_id))
        except Exception as exc:
            self._failed(exc)
            return None
        self._succeeded()
        try:
            return _int(head), Snapshot.from_json(doc) if doc is not None else None
        except ValueError:
            log.warning("unreadable snapshot of playlist %s; reading SQL", playlist_id)
            return _int(head), None

    def _remember(self, playlist_id: str, version: int) -> None:
        if version > self._pending.get(playlist_id, -1):
            self._pending.pop(playlist_id, None)  # re-insert: the dict keeps age order
            self._pending[playlist_id] = version
        while len(self._pending) > self._max_pending:
            del self._pending[next(iter(self._pending))]

    async def _flush_all(self) -> None:
        """Send remembered heads until none is left, retrying while Redis fails.

        Until then other API processes could serve a snapshot older than a
        commit of this one — even one that made the playlist PRIVATE — so
        this does not give up (docs/full-profile.md).
        """
        while self._pending:
            if not await self._flush():
                await asyncio.sleep(FLUSH_RETRY_S)

    async def _flush(self) -> bool:
        """Write up to :data:`FLUSH_BATCH` remembered heads; whether that worked."""
        if not self._pending or not self._breaker.allow():
            return False
        sent = dict(itertools.islice(self._pending.items(), FLUSH_BATCH))
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._store.bump_heads(sent)
        except Exception as exc:
            self._failed(exc)
            return False
        self._succeeded()
        for playlist_id, version in sent.items():
            if self._pending.get(playlist_id) == version:
                del self._pending[playlist_id]
        return True

    def _failed(self, exc: Exception) -> None:
        was = self._breaker.state
        self._breaker.record_failure()
        if self._breaker.state is not was and self._breaker.state is BreakerState.OPEN:
            log.warning("Redis failing (%r): snapshot reads go to SQL for now", exc)
        self._track()

    def _succeeded(self) -> None:
        if self._breaker.state is not BreakerState.CLOSED:
            log.info("Redis answers again: snapshot reads resume")
        self._breaker.record_success()
        self._track()

    def _track(self) -> None:
        REDIS_BREAKER_OPEN.set(0 if self._breaker.state is BreakerState.CLOSED else 1)
