"""The full profile's bus on a Redis Cluster: sharded pub/sub, one connection per primary.

Fanout ``SPUBLISH``\\ es each event on its playlist's channel, which Redis
Cluster delivers only on the primary owning the channel's slot (the
playlist's: :mod:`chorus.caches.keys`), so an API process keeps one pub/sub
connection per primary that owns a channel it wants: a
:class:`ShardedNodeBus` (:class:`~chorus.subscriptions.redis_bus.RedisBus`
with ``SSUBSCRIBE``), found from the cluster client's slot map.

A slot that moves away (``CLUSTER SETSLOT … NODE``, a failover) ends its
channels' subscriptions: the old primary sends ``sunsubscribe`` for each, or
its connection is lost, or it answers ``MOVED``. Every one of them is a gap
like any other: :class:`ClusterBus` reads the slot map again, subscribes each
channel on its new owner, waits for the confirmations, and only then reports
the gap, so streams read SQL while new events already flow (docs/live-updates.md).

Why not redis-py's ``ClusterPubSub``: it re-subscribes on its own, and the
bus must know when a subscription became live again (the reason
:class:`~chorus.subscriptions.redis_bus.RedisBus` drives its own connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from chorus.caches.keys import playlist_slot, slot_of
from chorus.domain.changes import PlaylistEvent
from chorus.events.wire import encode_event, events_channel, follows_channel
from chorus.resilience.tasks import cancel_and_wait
from chorus.subscriptions.bus import Deliver, GapHandler, Notice
from chorus.subscriptions.redis_bus import RedisBus

log = logging.getLogger("chorus.cluster_bus")

CHECK_S = 1.0
"""How often the slot map is read again while a wanted primary is unreachable (seconds)."""
DROP_RETRIES = 20
"""Reads of the slot map, 0.1 s apart, that may still give a dropped channel's old owner."""


class ShardedNodeBus(RedisBus):
    """A :class:`RedisBus` on one primary of a cluster, with sharded pub/sub.

    Args:
        dropped: called when the node unsubscribes a wanted channel on its own.
    """

    SUBSCRIBE, UNSUBSCRIBE = "SSUBSCRIBE", "SUNSUBSCRIBE"
    KINDS = (b"smessage", b"ssubscribe", b"sunsubscribe")

    def __init__(self, url: str, dropped: Callable[[str], None], **options: float) -> None:
        super().__init__(url, **options)
        self._on_dropped = dropped

    def forget(self, playlist_id: str) -> None:
        """Stop delivering ``playlist_id`` here without a ``SUNSUBSCRIBE``: its slot
        left this node, which dropped the subscription itself (and would answer
        ``MOVED``, which ends the connection)."""
        self._delivers.pop(playlist_id, None)

    def forget_follows(self, user_id: str) -> None:
        """:meth:`forget` for a user's follows channel."""
        self._notices.pop(follows_channel(user_id), None)

    def _batches(self, channels: set[str]) -> list[list[str]]:
        return [[channel] for channel in sorted(channels)]  # one slot per command

    def _dropped(self, channel: str) -> None:
        super()._dropped(channel)
        self._on_dropped(channel)


def node_url(url: str, host: str, port: int) -> str:
    """``url`` pointed at another node (same scheme, credentials and options)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc, path=""))


class ClusterBus:
    """The :class:`~chorus.subscriptions.bus.Bus` of an API process over a Redis Cluster.

    Args:
        url: one node of the cluster, ``redis://[user:password@]host:port`` (or ``rediss://``).
        reconnect_max_s, health_check_s, timeout_s: as :class:`RedisBus`'s, per node.

    Guarantees are :class:`RedisBus`'s: at least once per connection, and
    every loss — a node's connection, a moved slot — reported to the gap handlers.
    """

    def __init__(
        self,
        url: str,
        *,
        reconnect_max_s: float = 2.0,
        health_check_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self._options = {
            "reconnect_max_s": reconnect_max_s,
            "health_check_s": health_check_s,
            "timeout_s": timeout_s,
        }
        self._cluster = RedisCluster.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1),
        )
        self._nodes: dict[str, ShardedNodeBus] = {}
        self._delivers: dict[str, list[Deliver]] = {}
        self._notices: dict[str, list[Notice]] = {}
        """User id → who hears that user's follows changing."""
        self._home: dict[str, str] = {}
        """A wanted playlist → the node (``host:port``) it is subscribed on."""
        self._follows_home: dict[str, str] = {}
        """A watched user's follows → the node it is subscribed on."""
        self._gap_handlers: list[GapHandler] = []
        self._moved = asyncio.Event()
        self._drops: set[str] = set()
        """Channels a node dropped (``sunsubscribe``) not yet moved."""
        self._tries = 0
        self._watcher: asyncio.Task[None] | None = None
        self.moves = 0
        """Subscriptions moved to another primary (for tests and logs)."""

    # --- the Bus protocol --------------------------------------------------------

    async def start(self) -> None:
        """Start watching the slot map (idempotent); returns whether Redis answers or not."""
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="chorus-cluster-bus")

    async def publish(self, event: PlaylistEvent) -> None:
        """``SPUBLISH`` ``event`` as JSON on its playlist's channel (on the slot's primary).

        Raises:
            redis.exceptions.RedisError: the cluster cannot be reached or did not answer.
        """
        await self._cluster.spublish(events_channel(event["playlist_id"]), encode_event(event))

    async def subscribe(self, playlist_id: str, deliver: Deliver) -> None:
        """As :meth:`RedisBus.subscribe`, on the primary owning the playlist's slot."""
        await self.start()
        self._delivers.setdefault(playlist_id, []).append(deliver)
        home = self._home.setdefault(playlist_id, await self._owner(playlist_slot(playlist_id)))
        await (await self._ready(home)).subscribe(playlist_id, deliver)

    async def unsubscribe(self, playlist_id: str, deliver: Deliver) -> None:
        delivers = self._delivers.get(playlist_id)
        if delivers is None or deliver not in delivers:
            return
        delivers.remove(deliver)
        if not delivers:
            del self._delivers[playlist_id]
        home = self._home.get(playlist_id)
        if home is not None:
            await self._node(home).unsubscribe(playlist_id, deliver)
        if not delivers:
            self._home.pop(playlist_id, None)

    async def announce_follows(self, user_id: str) -> None:
        """``SPUBLISH`` that ``user_id``'s follows changed; a failure is only logged."""
        try:
            await self._cluster.spublish(follows_channel(user_id), b"")
        except (RedisError, OSError) as error:
            log.warning("redis: could not announce a follow change: %s", error)

    async def watch_follows(self, user_id: str, notice: Notice) -> None:
        await self.start()
        self._notices.setdefault(user_id, []).append(notice)
        home = self._follows_home.setdefault(user_id, await self._owner(slot_of(user_id)))
        await (await self._ready(home)).watch_follows(user_id, notice)

    async def unwatch_follows(self, user_id: str, notice: Notice) -> None:
        notices = self._notices.get(user_id)
        if notices is None or notice not in notices:
            return
        notices.remove(notice)
        if not notices:
            del self._notices[user_id]
        home = self._follows_home.get(user_id)
        if home is not None:
            await self._node(home).unwatch_follows(user_id, notice)
        if not notices:
            self._follows_home.pop(user_id, None)

    def on_gap(self, handler: GapHandler) -> None:
        """As :meth:`RedisBus.on_gap`: any node's reconnect, and any moved subscription."""
        self._gap_handlers.append(handler)

    async def aclose(self) -> None:
        if self._watcher is not None:
            await cancel_and_wait(self._watcher)
            self._watcher = None
        for node in list(self._nodes.values()):
            await node.aclose()
        self._nodes.clear()
        self._delivers.clear()
        self._notices.clear()
        self._home.clear()
        self._follows_home.clear()
        await self._cluster.aclose()

    @property
    def connected(self) -> bool:
        """Whether every primary holding a wanted channel is connected (for ``/readyz``)."""
        return all(self._nodes[n].connected for n in self._homes() if n in self._nodes)

    @property
    def subscription_count(self) -> int:
        return len(self._delivers)

    # --- moving subscriptions ----------------------------------------------------

    def _node(self, name: str) -> ShardedNodeBus:
        node = self._nodes.get(name)
        if node is None:
            host, _, port = name.rpartition(":")
            node = ShardedNodeBus(
                node_url(self._url, host, int(port)), self._dropped, **self._options
            )
            node.on_gap(self._report_gap)
            self._nodes[name] = node
        return node

    async def _ready(self, name: str) -> ShardedNodeBus:
        """The bus of node ``name``; a new one is started and given ``timeout_s`` to
        connect, so that its first subscriber is confirmed before an SQL read."""
        if name in self._nodes:
            return self._nodes[name]
        node = self._node(name)
        connected = asyncio.Event()
        node.on_gap(connected.set)  # reported once connected, every wanted channel confirmed
        await node.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._timeout_s):
                await connected.wait()
        return node

    async def _owner(self, slot: int) -> str:
        """The ``host:port`` of the primary owning ``slot`` in the client's slot map."""
        if not self._cluster.nodes_manager.slots_cache:
            await self._cluster.initialize()
        return str(self._cluster.nodes_manager.get_node_from_slot(slot).name)

    def _dropped(self, channel: str) -> None:
        self._drops.add(channel)
        self._moved.set()

    async def _watch(self) -> None:
        """Move subscriptions whenever a slot left its primary; until cancelled."""
        while True:
            try:
                async with asyncio.timeout(CHECK_S):
                    await self._moved.wait()
            except TimeoutError:
                if self.connected:
                    continue
            self._moved.clear()
            try:
                await self._cluster.nodes_manager.initialize()
                await self._move()
                await self._unmoved()
            except (RedisError, OSError) as error:
                log.warning("redis cluster: could not read the slot map: %s", error)
            except Exception:
                log.exception("redis cluster: moving subscriptions failed")

    async def _move(self) -> None:
        """Subscribe every channel whose slot moved on its new owner, then report the gap."""
        moved = 0
        for playlist_id, home in list(self._home.items()):
            owner = await self._owner(playlist_slot(playlist_id))
            if owner != home and playlist_id in self._delivers:
                self._node(home).forget(playlist_id)
                for deliver in list(self._delivers[playlist_id]):
                    await (await self._ready(owner)).subscribe(playlist_id, deliver)
                self._home[playlist_id] = owner
                self._drops.discard(events_channel(playlist_id))
                moved += 1
        for user_id, home in list(self._follows_home.items()):
            owner = await self._owner(slot_of(user_id))
            if owner != home and user_id in self._notices:
                self._node(home).forget_follows(user_id)
                for notice in list(self._notices[user_id]):
                    await (await self._ready(owner)).watch_follows(user_id, notice)
                self._follows_home[user_id] = owner
                self._drops.discard(follows_channel(user_id))
                moved += 1
        for name in [n for n in self._nodes if n not in self._homes()]:
            await self._nodes.pop(name).aclose()
        if moved:
            self.moves += moved
            log.info("redis cluster: %d subscriptions moved to their slots' new primaries", moved)
        self._report_gap()

    async def _unmoved(self) -> None:
        """Channels a node dropped whose slot the map still gives it: the map may lag
        the move (the old owner learns first), so read it again shortly; after
        :data:`DROP_RETRIES`, subscribe them there again (a wrong owner answers
        ``MOVED``, its connection is lost, and the map is read every ``CHECK_S``)."""
        if not self._drops:
            self._tries = 0
            return
        self._tries += 1
        if self._tries < DROP_RETRIES:
            await asyncio.sleep(0.1)
            self._moved.set()
            return
        self._tries = 0
        drops, self._drops = self._drops, set()
        for playlist_id, home in list(self._home.items()):
            if events_channel(playlist_id) in drops and playlist_id in self._delivers:
                self._node(home).forget(playlist_id)
                for deliver in list(self._delivers[playlist_id]):
                    await self._node(home).subscribe(playlist_id, deliver)
        for user_id, home in list(self._follows_home.items()):
            if follows_channel(user_id) in drops and user_id in self._notices:
                self._node(home).forget_follows(user_id)
                for notice in list(self._notices[user_id]):
                    await self._node(home).watch_follows(user_id, notice)

    def _homes(self) -> set[str]:
        return set(self._home.values()) | set(self._follows_home.values())

    def _report_gap(self) -> None:
        for handler in list(self._gap_handlers):
            try:
                handler()
            except Exception:
                log.exception("a gap handler failed")


__all__ = ["ClusterBus", "ShardedNodeBus", "node_url"]
