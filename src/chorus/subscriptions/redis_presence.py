"""The full profile's presence store: Redis keys with an expiry, and a channel of changes.

Per playlist (names under :data:`chorus.caches.keys.KEY_PREFIX`):

* ``…:presence`` — a sorted set: member a session id, score the session's
  expiry in milliseconds of **Redis's clock** (``TIME`` in the scripts, so
  API processes with skewed clocks agree on what expired);
* ``…:presence:sessions`` — a hash: session id → ``{"u": user id, "s":
  state, "t": since in ms}``;
* ``…:presence:changes`` — a pub/sub channel: ``{"v": 1, "id": session id,
  "session": that JSON or null}`` for every join, state change and leave.

Both keys expire ``2 × ttl`` after their last write, so a playlist everyone
left (or whose API processes all died) leaves nothing in Redis. A session
whose process died is no longer refreshed; the first read after its
expiry drops it (every read removes what expired), and the watchers' sweep
reads every ``ttl / 3``: it is gone from what anyone sees within
``ttl + ttl / 3`` of its last heartbeat.

Changes are heard on one pub/sub connection per process (redis-py's
``PubSub`` on the composition root's client). A lost connection is a gap:
the reader reconnects and :class:`~chorus.subscriptions.presence.Presence`
reads every watched playlist again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis.asyncio as redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from chorus.caches.keys import playlist_key
from chorus.domain.presence import PresenceState, Session
from chorus.resilience.backoff import Backoff
from chorus.resilience.tasks import cancel_and_wait
from chorus.subscriptions.presence import Changed, Held


class _Closable(Protocol):
    """``PubSub.aclose`` as called here: redis-py types it from 8.2 on, not
    before, so a ``type: ignore`` would be right on one version and wrong on
    the next; the protocol is right on both."""

    async def aclose(self) -> None: ...


log = logging.getLogger("chorus.redis_presence")

WIRE_VERSION = 1

CLUSTER_IN_FLIGHT = 16
"""At most this many presence scripts a cluster refresh sends at once (and at
most half a node's connections): the cluster client's pool fails at once
when a node's connections are all busy, so a heartbeat of thousands of
sessions must not take one connection each."""

# KEYS: set, hash, channel, tombstones. ARGV: session id, session JSON, ttl ms,
# "1" for a heartbeat (not for a declaration). Same user and state as the live
# stored session: keep its since. Publishes only when the session is new, came
# back from expiry, or changed. A heartbeat does not write back a session that
# was removed (its tombstone): it may have been read before the session ended
# and reach Redis after the removal, on another connection.
_PUT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if ARGV[4] == '1' then
  local removed = redis.call('ZSCORE', KEYS[4], ARGV[1])
  if removed and tonumber(removed) > now then return 0 end
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local old = redis.call('HGET', KEYS[2], ARGV[1])
local new = cjson.decode(ARGV[2])
local live = score and tonumber(score) > now and old
local same = false
if live then
  local was = cjson.decode(old)
  same = was.u == new.u and was.s == new.s
  if same then new.t = was.t end
end
local value = cjson.encode(new)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], value)
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
if not same then
  redis.call('PUBLISH', KEYS[3], cjson.encode({v = 1, id = ARGV[1], session = value}))
end
return 1
"""

# KEYS: set, hash, channel, tombstones. ARGV: session id, ttl ms. The tombstone
# outlives any heartbeat read before the removal (two TTLs); spent ones go.
_REMOVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = 2 * tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZADD', KEYS[4], now + keep, ARGV[1])
redis.call('PEXPIRE', KEYS[4], keep)
local gone = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if gone == 1 then
  redis.call('PUBLISH', KEYS[3], '{"v":1,"id":' .. cjson.encode(ARGV[1]) .. ',"session":null}')
end
return gone
"""

# KEYS: set, hash. Drops what expired; returns {ids, values} of the live sessions.
_READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #dead, 500 do
  local chunk = {unpack(dead, i, math.min(i + 499, #dead))}
  redis.call('ZREM', KEYS[1], unpack(chunk))
  redis.call('HDEL', KEYS[2], unpack(chunk))
end
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local values = {}
for i = 1, #live, 500 do
  local chunk = {unpack(live, i, math.min(i + 499, #live))}
  local got = redis.call('HMGET', KEYS[2], unpack(chunk))
  for j = 1, #got do values[#values + 1] = got[j] end
end
return {live, values}
"""


def presence_keys(playlist_id: str) -> list[str]:
    """The sorted set, hash, channel and tombstones (sessions removed, a sorted set by
    when they may go) of a playlist's presence; one hash tag, one slot."""
    base = playlist_key(playlist_id, "presence")
    return [base, f"{base}:sessions", f"{base}:changes", f"{base}:removed"]


def _channel_playlist(channel: str) -> str:
    # chorus:v2:playlist:{<id>}:presence:changes
    return channel.split(":")[-3].removeprefix("{").removesuffix("}")


def encode_session(session: Session) -> str:
    since_ms = round(session.since * 1000)
    return json.dumps({"u": session.user_id, "s": session.state.value, "t": since_ms})


def decode_session(data: str | bytes) -> Session:
    """Raises ValueError (or KeyError/TypeError) on a malformed value."""
    raw: dict[str, Any] = json.loads(data)
    return Session(str(raw["u"]), PresenceState(raw["s"]), int(raw["t"]) / 1000)


class RedisPresenceStore:
    """:class:`~chorus.subscriptions.presence.PresenceStore` over Redis (full profile).

    Args:
        client: the composition root's Redis client (commands and the pub/sub connection).
        reconnect_max_s: the longest wait between pub/sub reconnects (seconds).
        timeout_s: how long Redis may take to confirm a channel's subscription (seconds).
        max_connections: the client's connections (per node on a cluster,
            ``CHORUS_REDIS_MAX_CONNECTIONS``): bounds a cluster refresh's scripts in flight.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        reconnect_max_s: float = 2.0,
        timeout_s: float = 2.0,
        max_connections: int = 100,
    ) -> None:
        self._client = client
        self._in_flight = max(1, min(CLUSTER_IN_FLIGHT, max_connections // 2))
        self._put = client.register_script(_PUT)
        self._remove = client.register_script(_REMOVE)
        self._read = client.register_script(_READ)
        self._handlers: list[Changed] = []
        self._gap_handlers: list[Callable[[], None]] = []
        self._channels: dict[str, int] = {}
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._reconnect_max_s = reconnect_max_s
        self._timeout_s = timeout_s
        self._confirmations: dict[str, asyncio.Future[None]] = {}
        self._wanted = asyncio.Event()
        self.reconnects = 0

    async def put(self, playlist_id: str, session_id: str, session: Session, ttl_s: float) -> None:
        args: list[str | int] = [
            session_id,
            encode_session(session),
            max(1, round(ttl_s * 1000)),
            "0",
        ]
        await self._put(keys=presence_keys(playlist_id), args=args)

    async def refresh(self, held: Sequence[Held], ttl_s: float) -> None:
        ttl_ms = max(1, round(ttl_s * 1000))
        if isinstance(self._client, RedisCluster):
            # A cluster pipeline sends EVALSHA without loading the script
            # (NOSCRIPT on a new primary): each call on its own, a few at once.
            gate = asyncio.Semaphore(self._in_flight)

            async def put(playlist_id: str, session_id: str, session: Session) -> None:
                async with gate:
                    args: list[str | int] = [session_id, encode_session(session), ttl_ms, "1"]
                    await self._put(keys=presence_keys(playlist_id), args=args)

            await asyncio.gather(*(put(p, s, v) for p, s, v in held))
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for playlist_id, session_id, session in held:
                args: list[str | int] = [session_id, encode_session(session), ttl_ms, "1"]
                await self._put(keys=presence_keys(playlist_id), args=args, client=pipe)
            await pipe.execute()

    async def remove(self, playlist_id: str, session_id: str, ttl_s: float) -> None:
        ttl_ms = max(1, round(ttl_s * 1000))
        await self._remove(keys=presence_keys(playlist_id), args=[session_id, ttl_ms])

    async def remove_many(self, ended: Sequence[tuple[str, str]], ttl_s: float) -> None:
        ttl_ms = max(1, round(ttl_s * 1000))
        if isinstance(self._client, RedisCluster):
            gate = asyncio.Semaphore(self._in_flight)  # as refresh: no pipeline on a cluster

            async def one(playlist_id: str, session_id: str) -> None:
                async with gate:
                    await self._remove(keys=presence_keys(playlist_id), args=[session_id, ttl_ms])

            await asyncio.gather(*(one(p, s) for p, s in ended))
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for playlist_id, session_id in ended:
                args: list[str | int] = [session_id, ttl_ms]
                await self._remove(keys=presence_keys(playlist_id), args=args, client=pipe)
            await pipe.execute()

    async def read(self, playlist_id: str) -> dict[str, Session]:
        ids, values = await self._read(keys=presence_keys(playlist_id)[:2])
        found: dict[str, Session] = {}
        for session_id, value in zip(ids, values, strict=True):
            if value is None:
                continue  # written by half a script on another node: not a session
            try:
                found[session_id.decode()] = decode_session(value)
            except (ValueError, KeyError, TypeError):
                log.warning("undecodable presence session in %s", playlist_id)
        return found

    async def listen(self, playlist_id: str) -> None:
        """Subscribe the playlist's channel (confirmed by Redis before this returns)."""
        count = self._channels.get(playlist_id, 0)
        self._channels[playlist_id] = count + 1
        if count == 0:
            self._start()
            channel = presence_keys(playlist_id)[2]
            confirmed = self._confirmations.setdefault(
                channel, asyncio.get_running_loop().create_future()
            )
            try:
                assert self._pubsub is not None
                await self._pubsub.subscribe(channel)
                self._wanted.set()
                async with asyncio.timeout(self._timeout_s):
                    await asyncio.shield(confirmed)
            except (RedisError, OSError, TimeoutError):
                self._channels.pop(playlist_id, None)
                self._confirmations.pop(channel, None)
                raise

    async def unlisten(self, playlist_id: str) -> None:
        count = self._channels.get(playlist_id, 0) - 1
        if count > 0:
            self._channels[playlist_id] = count
            return
        self._channels.pop(playlist_id, None)
        if self._pubsub is not None:
            try:
                await self._pubsub.unsubscribe(presence_keys(playlist_id)[2])
            except (RedisError, OSError) as error:
                log.warning("presence unsubscribe failed: %s", error)

    def on_change(self, handler: Changed) -> None:
        self._handlers.append(handler)

    def on_gap(self, handler: Callable[[], None]) -> None:
        self._gap_handlers.append(handler)

    def _start(self) -> None:
        if self._pubsub is None:
            self._pubsub = self._client.pubsub()
        if self._reader is None:
            self._reader = asyncio.create_task(self._run(), name="presence-pubsub")

    async def aclose(self) -> None:
        if self._reader is not None:
            await cancel_and_wait(self._reader)
            self._reader = None
        if self._pubsub is not None:
            closable: _Closable = self._pubsub
            await closable.aclose()
            self._pubsub = None

    async def _run(self) -> None:
        backoff = Backoff(0.05, self._reconnect_max_s)
        while True:
            pubsub = self._pubsub
            if pubsub is None:
                return
            try:
                if pubsub.connection is None:
                    if self._channels:
                        await pubsub.subscribe(*(presence_keys(p)[2] for p in self._channels))
                    else:
                        self._wanted.clear()
                        await self._wanted.wait()  # listen() subscribes the first channel
                        continue
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    backoff.reset()
                    if message is None:
                        continue
                    if message.get("type") == "message":
                        self._dispatch(message["channel"], message["data"])
                    elif message.get("type") == "subscribe":
                        confirmed = self._confirmations.pop(message["channel"].decode(), None)
                        if confirmed is not None and not confirmed.done():
                            confirmed.set_result(None)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as error:
                log.warning("presence pub/sub lost: %s", error)
            except Exception:
                log.exception("presence pub/sub reader failed")
            # A new connection: subscribe again, then everyone reads what was missed.
            self.reconnects += 1
            await pubsub.reset()
            await backoff.sleep()
            self._tell_gap()

    def _dispatch(self, channel: bytes, data: bytes) -> None:
        playlist_id = _channel_playlist(channel.decode())
        try:
            raw = json.loads(data)
            if raw.get("v") != WIRE_VERSION:
                raise ValueError(f"presence wire version {raw.get('v')!r}")
            value = raw["session"]
            session = None if value is None else decode_session(value)
            session_id = str(raw["id"])
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("undecodable presence change on %s", channel.decode())
            self._tell_gap()
            return
        for handler in list(self._handlers):
            try:
                handler(playlist_id, session_id, session)
            except Exception:
                log.exception("a presence handler failed")

    def _tell_gap(self) -> None:
        for handler in list(self._gap_handlers):
            handler()


__all__ = ["RedisPresenceStore", "decode_session", "encode_session", "presence_keys"]
