"""The full profile's bus in an API process: one Redis pub/sub connection, many playlists.

Fanout ``PUBLISH``\\ es each event on its playlist's channel
(:func:`~chorus.events.wire.events_channel`); every API process keeps
**one** pub/sub connection, subscribed to the channels of the playlists its
local streams watch (the :class:`~chorus.subscriptions.hub.Hub` asks for each
playlist once), and a reader task hands the decoded events to the subscribers.

Redis pub/sub keeps nothing for a client that is away, so the rule that keeps
streams whole is **reconnect, re-subscribe, then report the gap**: after the
connection is lost (``CLIENT KILL``, server killed or stopped, a socket that
stopped answering) the reader reconnects with backoff, subscribes every
wanted channel again, waits for Redis to confirm them, and only then calls
every :meth:`RedisBus.on_gap` handler. Streams then read SQL while new events
already flow, so nothing falls between (DESIGN §6, the failure table of
issue 5). Redis being down never blocks or fails a subscriber: the channel is
recorded and subscribed when Redis is back.

The connection is driven directly (``redis.asyncio.Connection``), not through
``PubSub``, which re-subscribes on its own: a caller could not tell when the
subscription became live again, exactly when the gap must be reported. On a
Redis Cluster, :mod:`chorus.subscriptions.cluster_bus` keeps one per primary.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from chorus.domain.changes import PlaylistEvent
from chorus.events.wire import (
    channel_playlist,
    decode_event,
    encode_event,
    events_channel,
    follows_channel,
)
from chorus.resilience.backoff import Backoff
from chorus.resilience.tasks import cancel_and_wait
from chorus.subscriptions.bus import Deliver, GapHandler, Notice
from chorus.subscriptions.pubsub_connection import connection_factory, open_connection

log = logging.getLogger("chorus.redis_bus")


RECONNECT_MIN_S = 0.05
"""The first wait before reconnecting; it doubles up to ``reconnect_max_s``."""


class RedisBus:
    """The :class:`~chorus.subscriptions.bus.Bus` of an API process over Redis pub/sub.

    Args:
        url: ``redis://[user:password@]host:port/db`` (also ``rediss://``, ``unix://``).
        reconnect_max_s: the longest wait between reconnect attempts, seconds;
            waits start at 0.05 s and double.
        health_check_s: after this many seconds without a byte from Redis the
            reader sends ``PING``; no answer within as long again and the
            connection counts as dead (a half-open socket is noticed within
            about twice this).
        timeout_s: seconds allowed to connect, to write a command, for Redis to
            confirm a ``SUBSCRIBE``, and for one ``PUBLISH``.

    Delivery is at least once per connection and may skip events while the
    connection is away; the gap handlers report every such loss. Deliver and
    gap callbacks run in the reader task, must not block, and an exception
    from one is logged, never raised.
    """

    SUBSCRIBE, UNSUBSCRIBE = "SUBSCRIBE", "UNSUBSCRIBE"
    """The commands (a subclass may use ``SSUBSCRIBE``/``SUNSUBSCRIBE``: sharded pub/sub)."""
    KINDS = (b"message", b"subscribe", b"unsubscribe")
    """The replies of those commands: a message, a confirmation, an unsubscription."""

    def __init__(
        self,
        url: str,
        *,
        reconnect_max_s: float = 2.0,
        health_check_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        if min(reconnect_max_s, health_check_s, timeout_s) <= 0:
            raise ValueError("reconnect_max_s, health_check_s and timeout_s must be positive")
        self._new_connection = connection_factory(url, timeout_s=timeout_s)
        self._reconnect_max_s = reconnect_max_s
        self._health_check_s = health_check_s
        self._timeout_s = timeout_s
        # One retry: the first command after Redis restarted finds the
        # pooled connection dead and must reconnect once.
        self._publisher = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1),
        )
        self._delivers: dict[str, list[Deliver]] = {}
        self._notices: dict[str, list[Notice]] = {}
        """Channel → who hears a user's follows changing (:meth:`watch_follows`)."""
        self._gap_handlers: list[GapHandler] = []
        self._live: AbstractConnection | None = None
        self._server_channels: set[str] = set()
        self._confirmations: dict[str, asyncio.Future[None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self.reconnects = 0
        """Times the connection was re-established after the first (for tests and logs)."""

    # --- the Bus protocol --------------------------------------------------------

    async def start(self) -> None:
        """Start the reader task (idempotent; :meth:`subscribe` also starts it).

        Returns at once, whether Redis is reachable or not.
        """
        if self._reader is None:
            self._reader = asyncio.create_task(self._run(), name="chorus-redis-bus")

    async def publish(self, event: PlaylistEvent) -> None:
        """``PUBLISH`` ``event`` as JSON on its playlist's channel.

        Raises:
            redis.exceptions.ConnectionError: Redis cannot be reached.
            redis.exceptions.TimeoutError: Redis did not answer within ``timeout_s``.
        """
        await self._publisher.publish(events_channel(event["playlist_id"]), encode_event(event))

    async def subscribe(self, playlist_id: str, deliver: Deliver) -> None:
        """Call ``deliver`` with each event published for ``playlist_id`` from now on.

        The first subscriber of a playlist subscribes its channel and waits (up
        to ``timeout_s``) until Redis confirms it, so an SQL read that follows
        misses nothing. When Redis is down or does not confirm in time this
        returns anyway: the channel is subscribed on reconnect, and the gap
        handlers then report the loss. Never raises for Redis failures.
        """
        delivers = self._delivers.setdefault(playlist_id, [])
        delivers.append(deliver)
        await self._want(events_channel(playlist_id), first=len(delivers) == 1)

    async def _want(self, channel: str, *, first: bool) -> None:
        """Subscribe ``channel`` if ``first`` (its first listener); wait for Redis to confirm."""
        await self.start()
        if first and self._live is not None:
            self._confirmations[channel] = asyncio.get_running_loop().create_future()
            if not await self._send(self._live, self.SUBSCRIBE, channel):
                self._resolve(channel)
        if (confirmation := self._confirmations.get(channel)) is not None:
            await asyncio.wait([confirmation], timeout=self._timeout_s)

    async def unsubscribe(self, playlist_id: str, deliver: Deliver) -> None:
        """Stop calling ``deliver``; the last one out unsubscribes the channel.

        Never raises for Redis failures (a dropped connection holds no
        subscriptions, and a reconnect subscribes only wanted channels).
        """
        delivers = self._delivers.get(playlist_id)
        if delivers is None or deliver not in delivers:
            return
        delivers.remove(deliver)
        if delivers:
            return
        del self._delivers[playlist_id]
        if self._live is not None:
            await self._send(self._live, self.UNSUBSCRIBE, events_channel(playlist_id))

    async def announce_follows(self, user_id: str) -> None:
        """``PUBLISH`` that ``user_id``'s follows changed; a failure is only logged.

        A process that misses it lost its connection, and reports a gap on reconnect.
        """
        try:
            await self._publisher.publish(follows_channel(user_id), b"")
        except (RedisError, OSError) as error:
            log.warning("redis: could not announce a follow change: %s", error)

    async def watch_follows(self, user_id: str, notice: Notice) -> None:
        """Call ``notice`` for each announcement of ``user_id``'s follows changing."""
        channel = follows_channel(user_id)
        notices = self._notices.setdefault(channel, [])
        notices.append(notice)
        await self._want(channel, first=len(notices) == 1)

    async def unwatch_follows(self, user_id: str, notice: Notice) -> None:
        """Stop calling ``notice``; the last one out unsubscribes the channel."""
        channel = follows_channel(user_id)
        notices = self._notices.get(channel)
        if notices is None or notice not in notices:
            return
        notices.remove(notice)
        if not notices:
            del self._notices[channel]
            if self._live is not None:
                await self._send(self._live, self.UNSUBSCRIBE, channel)

    def on_gap(self, handler: GapHandler) -> None:
        """Call ``handler`` whenever events may have been lost.

        That is: each time the connection is (re-)established, after every
        wanted channel is confirmed subscribed again, and when a message on a
        subscribed channel cannot be decoded.
        """
        self._gap_handlers.append(handler)

    async def aclose(self) -> None:
        """Stop the reader, close both connections and forget every subscriber."""
        if self._reader is not None:
            await cancel_and_wait(self._reader)
            self._reader = None
        self._delivers.clear()
        self._notices.clear()
        await self._publisher.aclose()

    @property
    def connected(self) -> bool:
        """Whether the pub/sub connection is up with every wanted channel (for ``/readyz``)."""
        return self._live is not None

    @property
    def subscription_count(self) -> int:
        """Playlists with at least one subscriber (for tests and metrics)."""
        return len(self._delivers)

    # --- the reader --------------------------------------------------------------

    async def _run(self) -> None:
        """Connect, read until the connection is lost, wait, again; until cancelled."""
        backoff = Backoff(RECONNECT_MIN_S, self._reconnect_max_s)
        failed_before = False
        first = True
        while True:
            conn = self._new_connection()
            try:
                await self._connect(conn)
                self._live = conn
                if first:
                    first = False
                else:
                    self.reconnects += 1
                    log.info("redis pub/sub reconnected: %d channels", len(self._delivers))
                backoff.reset()
                failed_before = False
                # Only now: every wanted channel is subscribed again.
                self._report_gap()
                await self._sync_unwanted(conn)
                await self._read(conn)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as error:
                # One warning per outage; the retries after it log at debug level.
                level = (
                    logging.WARNING
                    if self._live is not None or not failed_before
                    else logging.DEBUG
                )
                log.log(level, "redis pub/sub connection lost or refused: %s", error)
            except Exception:
                log.exception("redis pub/sub reader failed")
            finally:
                self._live = None
                self._server_channels.clear()
                for channel in list(self._confirmations):
                    self._resolve(channel)
                await conn.disconnect(nowait=True)
            failed_before = True
            await backoff.sleep()

    async def _connect(self, conn: AbstractConnection) -> None:
        """Open ``conn`` and subscribe every wanted channel, confirmed by Redis.

        Raises:
            RedisError, OSError: the connection failed or Redis did not confirm
                within ``timeout_s``.
        """
        await open_connection(conn)
        confirmed: set[str] = set()
        # Subscribers may arrive while we wait for confirmations; loop until
        # none is missing, with no await between the last check and going live.
        while missing := self._wanted() - confirmed:
            for batch in self._batches(missing):
                await conn.send_command(self.SUBSCRIBE, *batch, check_health=False)
            async with asyncio.timeout(self._timeout_s):
                while not missing <= self._server_channels:
                    self._handle(await conn.read_response(timeout=self._timeout_s))
            confirmed |= missing

    async def _sync_unwanted(self, conn: AbstractConnection) -> None:
        """Unsubscribe channels whose last subscriber left while we reconnected."""
        if unwanted := self._server_channels - self._wanted():
            for batch in self._batches(unwanted):
                await conn.send_command(self.UNSUBSCRIBE, *batch, check_health=False)

    def _wanted(self) -> set[str]:
        """Every channel some local listener wants."""
        return {events_channel(p) for p in self._delivers} | set(self._notices)

    async def _read(self, conn: AbstractConnection) -> None:
        """Handle replies until the connection fails.

        Raises:
            RedisError, OSError: the connection was closed, or did not answer a
                ``PING`` within ``health_check_s``.
        """
        pinged = False
        while True:
            reply = await conn.read_response(timeout=self._health_check_s)
            if reply is not None:
                pinged = False
                self._handle(reply)
            elif pinged:
                raise TimeoutError(f"no answer to PING within {self._health_check_s}s")
            else:
                await conn.send_command("PING", check_health=False)
                pinged = True

    def _handle(self, reply: Any) -> None:
        """One RESP2 pub/sub reply: a message, a (un)subscribe confirmation or a pong."""
        if reply is None or reply == b"PONG":  # PONG: the answer while nothing is subscribed
            return
        kind, (message, subscribed, unsubscribed) = reply[0], self.KINDS
        if kind == message:
            self._dispatch(reply[1], reply[2])
        elif kind == subscribed:
            channel = reply[1].decode()
            self._server_channels.add(channel)
            self._resolve(channel)
        elif kind == unsubscribed:
            self._server_channels.discard(channel := reply[1].decode())
            if channel in self._wanted():
                self._dropped(channel)
        elif kind != b"pong":
            log.warning("unexpected redis pub/sub reply %r", reply[:2])

    def _dispatch(self, channel: bytes, data: bytes) -> None:
        notices = self._notices.get(channel.decode())
        if notices is not None:
            for notice in list(notices):
                try:
                    notice()
                except Exception:
                    log.exception("a follows listener failed")
            return
        playlist_id = channel_playlist(channel)
        delivers = self._delivers.get(playlist_id)
        if not delivers:
            return  # unsubscribed while the message was on its way
        try:
            event = decode_event(data)
            if event["playlist_id"] != playlist_id:
                raise ValueError(f"an event of playlist {event['playlist_id']!r}")
        except ValueError:
            log.exception("undecodable event on %s; streams read SQL instead", channel.decode())
            self._report_gap()
            return
        for deliver in list(delivers):
            try:
                deliver(event)
            except Exception:
                log.exception("a subscriber of playlist %s failed", playlist_id)

    def _batches(self, channels: set[str]) -> list[list[str]]:
        """The channels in (UN)SUBSCRIBE commands (sharded ones take one slot each)."""
        return [sorted(channels)]

    def _dropped(self, channel: str) -> None:
        """Redis unsubscribed a wanted channel on its own (a cluster slot moved away)."""
        log.info("redis dropped the subscription of %s", channel)

    def _report_gap(self) -> None:
        for handler in list(self._gap_handlers):
            try:
                handler()
            except Exception:
                log.exception("a gap handler failed")

    def _resolve(self, channel: str) -> None:
        confirmation = self._confirmations.pop(channel, None)
        if confirmation is not None and not confirmation.done():
            confirmation.set_result(None)

    async def _send(self, conn: AbstractConnection, *args: str) -> bool:
        """Write one command on the live connection; whether it was written.

        A failure is only logged: the reader notices the broken connection,
        reconnects and reports the gap.
        """
        if conn is not self._live or not conn.is_connected:
            return False  # never let redis-py reconnect this socket behind the reader
        try:
            await conn.send_command(*args, check_health=False)
        except Exception as error:
            log.warning("redis pub/sub %s failed: %s", args[0], error)
            return False
        return True
