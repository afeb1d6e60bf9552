"""A Redis Cluster primary failed over while streams run: a gap like any other.

A cluster of this module's own (``scripts/redis-cluster start --replicas 1``:
3 primaries, one replica each), so that failing a primary harms no other
test. A full-profile deployment runs on it; subscribers watch playlists whose
slots live on the primary that fails. Then the replica of that primary takes
over, either gracefully (``CLUSTER FAILOVER`` while the primary runs: it
becomes a replica and sends ``sunsubscribe``) or after the primary was killed
(SIGKILL, then ``CLUSTER FAILOVER TAKEOVER``: the connection is lost), while
and after edits commit. Every subscriber must still receive every version
once, in order (what pub/sub lost is read from SQL); reads over HTTP must show
the newest version (the promoted replica's heads and snapshots are another
generation's, never served); and the new primary must hold the playlists'
keys, their channels' subscriptions and a generation of its own for their slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from websockets.asyncio.client import ClientConnection

from chorus.auth import mint_token
from chorus.caches.keys import head_key, playlist_slot, slot_generation_key
from chorus.events.wire import events_channel, fanout_version_key
from chorus.graphql.schema.common.ids import from_global_id
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, state, track
from tests.e2e.test_subscriptions import close_socket, open_socket
from tests.full.conftest import REDIS_CLUSTER_SCRIPT, cluster_port
from tests.full.helpers import (
    Deployment,
    eventually,
    full_deployment,
    subscribe_by_id,
    versions_by_playlist,
)
from tests.servers import TEST_SECRET, TansuServer

ON_VICTIM = 3
"""Playlists whose slot is on the primary that fails (and one elsewhere, unaffected)."""
EDITS = 4
"""Edits of each playlist before, during and after the failover."""
QUIET_S = 0.5
"""How long nothing more may arrive once every version did (not a deadline)."""


class Cluster:
    """The module's cluster: its settings, ports (primaries first) and state directory."""

    def __init__(self, settings: dict[str, str], ports: list[int], folder: Path) -> None:
        self.settings = settings
        self.ports = ports
        self.folder = folder

    def pid(self, port: int) -> int:
        return int((self.folder / str(port) / "redis.pid").read_text())


@pytest.fixture(scope="module")
def failover_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """3 primaries and a replica of each, removed at the end (a killed node is already gone)."""
    ports: list[int] = []
    while len(ports) < 6:
        port = cluster_port()
        if port not in ports and port + 10_000 not in ports and port - 10_000 not in ports:
            ports.append(port)
    folder = tmp_path_factory.mktemp("redis-failover")
    command = [str(REDIS_CLUSTER_SCRIPT)]
    where = ["--ports", ",".join(map(str, ports)), "--dir", str(folder)]
    try:
        out = subprocess.run(
            [*command, "start", "--replicas", "1", *where],
            check=True,
            capture_output=True,
            text=True,
            timeout=patience(60),
        ).stdout
        settings = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        yield Cluster(settings, ports, folder)
    finally:
        subprocess.run([*command, "remove", *where], capture_output=True, timeout=patience(60))


@pytest.fixture(scope="module")
def deployment(
    postgres_template: str,
    tansu: TansuServer,
    failover_cluster: Cluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """One API server and the relay, fanout and cache projector, on the module's cluster."""
    data_dir = tmp_path_factory.mktemp("redis-failover-deployment")
    workers = ("relay", "fanout", "project-cache")
    env = failover_cluster.settings
    with full_deployment(tansu, data_dir, (None,), workers, env) as running:
        yield running


@pytest.fixture
async def nodes(failover_cluster: Cluster) -> AsyncIterator[dict[int, redis.Redis]]:
    """A plain client of every node, by port."""
    clients = {
        port: redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        for port in failover_cluster.ports
    }
    yield clients
    for client in clients.values():
        await client.aclose()


def _raw_id(global_id: str) -> str:
    return from_global_id(global_id)[1][0]


def _slot(global_id: str) -> int:
    return playlist_slot(_raw_id(global_id))


async def _role(node: redis.Redis) -> list[Any]:
    """``ROLE``'s reply; ``[b"gone"]`` for a node killed by an earlier test."""
    try:
        role: list[Any] = await node.execute_command("ROLE")
    except RedisConnectionError:
        return [b"gone"]
    return role


async def _owner(node: redis.Redis, slot: int) -> int | None:
    """The port of the primary serving ``slot``, as ``node`` sees the cluster."""
    for first, last, primary, *_ in await node.execute_command("CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return int(primary[1])
    return None


async def _replica_of(nodes: dict[int, redis.Redis], primary: int) -> int:
    """The port of the replica of ``primary`` (the one, linked to it)."""
    for port, node in nodes.items():
        if port == primary:
            continue
        role = await _role(node)
        if role[0] == b"slave" and int(role[2]) == primary and role[3] == b"connected":
            return port
    raise AssertionError(f"no linked replica of {primary}")


async def _nothing_more(ws: ClientConnection) -> None:
    """Nothing but pings within :data:`QUIET_S`: no version came twice."""
    deadline = time.monotonic() + QUIET_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = json.loads(await asyncio.wait_for(ws.recv(), left))
        except TimeoutError:
            return
        assert message["type"] == "ping", message


def _edit_all(api: Api, heads: dict[str, int], added: dict[str, list[str]], n: int) -> None:
    """``n`` rounds of one ``addEntries`` on each playlist (in this thread)."""
    for _ in range(n):
        for playlist_id, base in heads.items():
            payload = add(api, playlist_id, [track(len(added[playlist_id]) + 1)], base)
            heads[playlist_id] = payload["version"]
            added[playlist_id] += [e["id"] for e in payload["entries"]]


async def _fail_over(
    cluster: Cluster,
    nodes: dict[int, redis.Redis],
    victim: int,
    replica: int,
    live: list[int],
    how: str,
) -> None:
    """Make ``replica`` the primary of ``victim``'s shard (``live``: the nodes running).

    ``failover``: ``CLUSTER FAILOVER`` (the replica caught up, the primary
    stays, as a replica). ``kill``: SIGKILL the primary, then ``CLUSTER
    FAILOVER TAKEOVER``. ``kill-lagging``: as ``kill``, of a replica stopped
    (SIGSTOP) with its link cut before the last writes, which it never got.
    """
    if how != "failover":
        live = [port for port in live if port != victim]
    if how == "failover":
        await nodes[replica].execute_command("CLUSTER", "FAILOVER")
    else:
        os.kill(cluster.pid(victim), signal.SIGKILL)
        os.kill(cluster.pid(replica), signal.SIGCONT)  # when stopped by _lag
        try:
            await nodes[replica].execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        except ResponseError as error:  # it took over by itself (cluster-node-timeout, 2 s)
            if "to a replica" not in str(error):
                raise

    async def promoted() -> bool:
        if (await _role(nodes[replica]))[0] != b"master":
            return False
        for port in live:  # no live node's slot map names the old primary
            ranges = await nodes[port].execute_command("CLUSTER", "SLOTS")
            if any(int(primary[1]) == victim for _, _, primary, *_ in ranges):
                return False
        return True

    await eventually(promoted, what=f"{replica} promoted in place of {victim}")


def _has(node: redis.Redis, playlist_id: str, version: int) -> Callable[[], Awaitable[bool]]:
    """Whether ``node`` holds ``version`` as the playlist's head and fanout's dedupe key."""
    raw = _raw_id(playlist_id)

    async def check() -> bool:
        found = [await node.get(head_key(raw)), await node.get(fanout_version_key(raw))]
        return found == [str(version).encode()] * 2

    return check


@contextlib.asynccontextmanager
async def _lag(
    cluster: Cluster, nodes: dict[int, redis.Redis], victim: int, replica: int
) -> AsyncIterator[None]:
    """Within: ``victim``'s replica is stopped (SIGSTOP) and its link cut, once it
    had caught up; what ``victim`` takes then never reaches it. Resumed at the
    end if :func:`_fail_over` did not resume it."""

    async def caught_up() -> bool:  # ROLE: master, its offset, [ip, port, offset] a replica
        _, offset, replicas = await _role(nodes[victim])
        return [(int(port), int(at) >= offset) for _, port, at in replicas] == [(replica, True)]

    await eventually(caught_up, what=f"{replica} caught up with {victim}")
    os.kill(cluster.pid(replica), signal.SIGSTOP)
    try:
        await nodes[victim].execute_command("CLIENT", "KILL", "TYPE", "replica")
        yield
    finally:
        os.kill(cluster.pid(replica), signal.SIGCONT)


@pytest.mark.parametrize("how", ["failover", "kill", "kill-lagging"])
async def test_a_primary_failed_over_during_streams_loses_and_repeats_nothing(
    how: str, failover_cluster: Cluster, deployment: Deployment, nodes: dict[int, redis.Redis]
) -> None:
    api = Api(deployment.servers[0])
    ws = await open_socket(deployment.servers[0], mint_token(TEST_SECRET, "alice"))
    try:
        # The primary to fail: the first with a replica. The graceful case may
        # fail the node CHORUS_REDIS_URL names (it stays up); a killed one is
        # never that node, which the processes would need to start again.
        victim, first = 0, failover_cluster.ports[0]
        for port in failover_cluster.ports:
            role = await _role(nodes[port])
            if role[0] == b"master" and role[2] and (how == "failover" or port != first):
                victim = port
                break
        assert victim, "no primary with a replica left"
        replica = await _replica_of(nodes, victim)
        live = [p for p, node in nodes.items() if (await _role(node))[0] != b"gone"]
        probe = nodes[victim]
        on_victim: list[str] = []
        elsewhere: list[str] = []
        for _ in range(60):
            playlist_id = create_playlist(api, visibility="PUBLIC")
            mine = await _owner(probe, _slot(playlist_id)) == victim
            if mine and len(on_victim) < ON_VICTIM:
                on_victim.append(playlist_id)
            elif not mine and not elsewhere:
                elsewhere.append(playlist_id)
            if len(on_victim) == ON_VICTIM and elsewhere:
                break
        assert len(on_victim) == ON_VICTIM
        assert elsewhere
        watched = on_victim + elsewhere
        for playlist_id in watched:
            await subscribe_by_id(ws, playlist_id, 0)
        heads = dict.fromkeys(watched, 0)
        added: dict[str, list[str]] = {p: [] for p in watched}

        # Before: delivered live, and read over HTTP (the caches are warm).
        await asyncio.to_thread(_edit_all, api, heads, added, EDITS)
        expected = {p: list(range(1, EDITS + 1)) for p in watched}
        assert await versions_by_playlist(ws, EDITS * len(watched)) == expected
        for playlist_id in watched:
            for _ in range(2):
                assert state(api, playlist_id) == (heads[playlist_id], added[playlist_id])

        async def channels_on(port: int) -> set[str]:
            names = await nodes[port].execute_command("PUBSUB", "SHARDCHANNELS", "chorus:v2:*")
            return {name.decode() for name in names}

        assert {events_channel(_raw_id(p)) for p in on_victim} <= await channels_on(victim)

        # During: edits go on while the replica takes over; then after.
        before = dict(heads)
        if how == "kill-lagging":  # the replica misses these edits' heads
            async with _lag(failover_cluster, nodes, victim, replica):
                await asyncio.to_thread(_edit_all, api, heads, added, EDITS)
                await eventually(
                    _has(nodes[victim], on_victim[0], heads[on_victim[0]]),
                    what="the head and fanout's dedupe key raised on the primary",
                )
                await _fail_over(failover_cluster, nodes, victim, replica, live, how)
            lost = await nodes[replica].get(fanout_version_key(_raw_id(on_victim[0])))
            assert lost is not None
            assert int(lost) == before[on_victim[0]]  # fanout's dedupe key went back too
        else:
            editing = asyncio.create_task(asyncio.to_thread(_edit_all, api, heads, added, EDITS))
            await asyncio.sleep(0.1)  # some edits commit before the failover, some during
            await _fail_over(failover_cluster, nodes, victim, replica, live, how)
            await editing
        # Right after: the newest version, never an answer cached before (nor a
        # head the promoted replica's older copy holds).
        for playlist_id in watched:
            assert state(api, playlist_id) == (heads[playlist_id], added[playlist_id])
        await asyncio.to_thread(_edit_all, api, heads, added, EDITS)

        got = await versions_by_playlist(ws, sum(heads[p] - before[p] for p in watched))
        assert got == {p: list(range(before[p] + 1, heads[p] + 1)) for p in watched}
        await _nothing_more(ws)

        # Reads show the newest version, never the old primary's cached answer.
        for playlist_id in watched:
            for _ in range(2):
                assert state(api, playlist_id) == (heads[playlist_id], added[playlist_id])

        # The new primary serves the slots, holds the keys and the subscriptions,
        # and a generation begun on it (its copy of the old one was dropped).
        run_id = (await nodes[replica].info("server"))["run_id"]
        for playlist_id in on_victim:
            slot = _slot(playlist_id)
            assert await _owner(nodes[replica], slot) == replica
            assert await nodes[replica].execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
        wanted = {events_channel(_raw_id(p)) for p in on_victim}

        async def settled() -> bool:
            for playlist_id in on_victim:
                generation = await nodes[replica].get(slot_generation_key(_slot(playlist_id)))
                if generation is None or not generation.decode().startswith(f"{run_id}:"):
                    return False
            return wanted <= await channels_on(replica)

        await eventually(settled, what="channels and a new generation on the new primary")
        if how == "failover":  # the old primary, now a replica, holds none of them
            assert not wanted & await channels_on(victim)
    finally:
        await close_socket(ws)
        api.http.close()
