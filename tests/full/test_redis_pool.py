"""The composition root's Redis pool under a burst: commands wait for a connection.

redis-py's default asyncio pool raises ``ConnectionError("Too many
connections")`` at once when its bound is reached; thousands of subscribes
(each a presence write) on one gateway reached it. With a pool of two
connections on the machine's Redis, many concurrent presence sessions and
commands all succeed: they queue for a connection instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from chorus.caches.cluster_store import SlotGenerations
from chorus.caches.generation import Generation
from chorus.domain.presence import PresenceState, Session
from chorus.settings import Settings
from chorus.subscriptions.presence import Presence
from chorus.subscriptions.redis_presence import RedisPresenceStore, presence_keys
from chorus.wiring import redis_client
from tests.full.conftest import REDIS_URL

BURST = 200


def _settings(max_connections: int) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        redis_url=REDIS_URL,
        kafka_bootstrap_servers="127.0.0.1:9",
        redis_max_connections=max_connections,
    )


async def test_a_burst_of_commands_waits_for_the_two_pooled_connections() -> None:
    client = redis_client(_settings(2), Generation())
    prefix = f"test-pool:{uuid.uuid4().hex}"
    try:
        results = await asyncio.gather(
            *(client.set(f"{prefix}:{i}", i, ex=60) for i in range(BURST)),
            return_exceptions=True,
        )
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert await client.get(f"{prefix}:{BURST - 1}") == str(BURST - 1).encode()
    finally:
        await client.delete(*(f"{prefix}:{i}" for i in range(BURST)))
        await client.aclose()


async def test_a_burst_of_subscribers_is_all_present_on_a_pool_of_two() -> None:
    client = redis_client(_settings(2), Generation())
    presence = Presence(RedisPresenceStore(client), ttl_s=30.0)
    playlist_id = f"pool-{uuid.uuid4().hex}"
    entered = asyncio.Event()
    release = asyncio.Event()
    count = 0

    async def subscriber(i: int) -> None:
        nonlocal count
        async with presence.hold(playlist_id, f"user-{i}"):
            count += 1
            if count == BURST:
                entered.set()
            await release.wait()

    tasks = [asyncio.create_task(subscriber(i)) for i in range(BURST)]
    try:
        await entered.wait()
        # Every session reached Redis: none was lost to "Too many connections".
        assert len(await presence.store.read(playlist_id)) == BURST
    finally:
        release.set()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks)
        await presence.aclose()
        await client.delete(*presence_keys(playlist_id)[:2])
        await client.aclose()


async def test_a_cluster_heartbeat_of_many_sessions_fits_two_connections_a_node(
    redis_cluster: dict[str, str],
) -> None:
    # The cluster client cannot wait for a connection: the store must not
    # send every session's script at once.
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        redis_url=redis_cluster["CHORUS_REDIS_URL"],
        redis_cluster=True,
        kafka_bootstrap_servers="127.0.0.1:9",
        redis_max_connections=2,
    )
    client = redis_client(settings, SlotGenerations())
    store = RedisPresenceStore(client, max_connections=settings.redis_max_connections)
    playlists = [f"pool-{uuid.uuid4().hex}" for _ in range(BURST)]
    session = Session("ann", PresenceState.VIEWING, 0.0)
    try:
        await store.refresh([(p, f"s:{p}", session) for p in playlists], 30.0)
        assert all([len(await store.read(p)) == 1 for p in playlists])
    finally:
        for p in playlists:
            await client.delete(*presence_keys(p)[:2])
        await store.aclose()
        await client.aclose()


async def test_a_heartbeat_read_before_a_session_ended_does_not_bring_it_back() -> None:
    """The race behind a flaky presence test: the heartbeat reads the held sessions, the
    socket closes and its session is removed, then the heartbeat's write reaches Redis
    (another connection, after a ``SCRIPT EXISTS`` round trip). The session stays gone
    and nobody is told it came back; a declaration under the same id still works."""
    client = redis_client(_settings(4), Generation())
    store = RedisPresenceStore(client)
    playlist_id = f"race-{uuid.uuid4().hex}"
    told: list[tuple[str, str, Session | None]] = []
    store.on_change(lambda p, s, session: told.append((p, s, session)))
    alice = Session("alice", PresenceState.VIEWING, 1.0)
    try:
        await store.listen(playlist_id)
        await store.refresh([(playlist_id, "s:alice", alice)], 30.0)  # joined
        held = [(playlist_id, "s:alice", alice)]  # what a heartbeat read
        await store.remove(playlist_id, "s:alice", 30.0)  # the socket closed
        await store.refresh(held, 30.0)  # the heartbeat's late write
        assert await store.read(playlist_id) == {}
        # A declaration is not a heartbeat: withdrawn, then declared again, it is kept.
        editing = Session("alice", PresenceState.EDITING, 2.0)
        await store.put(playlist_id, "d:alice", editing, 30.0)
        await store.remove(playlist_id, "d:alice", 30.0)
        await store.put(playlist_id, "d:alice", editing, 30.0)
        assert await store.read(playlist_id) == {"d:alice": editing}
        await asyncio.sleep(0.3)  # the channel's messages are heard
        assert [(s, v) for _, s, v in told if s == "s:alice"] == [
            ("s:alice", alice),
            ("s:alice", None),
        ]
    finally:
        await store.aclose()
        await client.delete(*presence_keys(playlist_id))
        await client.aclose()
