"""Presence updates for 1,000 present users on one playlist, over real WebSockets.

A ``chorus serve`` (``--profile embedded``: SQLite, in-process presence;
``full``: PostgreSQL, Redis, Kafka (Tansu) and ``--with-workers``: presence
in Redis) in a subprocess; one PRIVATE playlist with ``--users`` members.
Each member opens its own socket and subscribes to ``playlistEvents`` (so is
VIEWING); the owner watches ``playlistPresence`` on another socket. Once the
watcher lists every member, ``--changes`` members one after another declare
EDITING with ``setPresence`` over HTTP. A sample is the time from just before
the mutation is sent to the moment the watcher decoded the
``PresenceChanged`` naming that member EDITING (one clock, same machine).

Baseline, same run: a bare Redis pub/sub round trip (``PUBLISH`` on one
connection, the message read on a subscribed one, redis-py), a bare HTTP
round trip to the same server (``{ __typename }``) and a plain playlist read
(``title viewerRole``: the SQL reads ``setPresence`` also makes), so the table
shows what presence adds to what it cannot avoid.

    flock /work/bench.lock python bench/presence.py [--profile embedded|full]
        [--users 1000] [--changes 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as redis
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from chorus.auth import mint_token

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from tests.servers import (  # noqa: E402  # the test suite's way to start servers
    TEST_SECRET,
    ChorusServer,
    TansuServer,
    create_database,
    drop_database,
    postgres_url,
)

PROTOCOL = Subprotocol("graphql-transport-ws")
REDIS_URL = "redis://127.0.0.1:6379/0"
EVENTS = (
    "subscription($id: ID!) { playlistEvents(playlistId: $id, sinceVersion: 0) { __typename } }"
)
WATCH = """subscription($id: ID!) { playlistPresence(playlistId: $id) { __typename
  ... on PlaylistPresence { entries { user { id } state } }
  ... on PresenceChanged { entries { user { id } state } left { id } } } }"""
ROLE = "mutation($i: SetMemberRoleInput!) { setMemberRole(input: $i) { userErrors { code } } }"
READ = "query($id: ID!) { playlist(id: $id) { title viewerRole } }"
SET = (
    """mutation($input: SetPresenceInput!) { setPresence(input: $input) { userErrors { code } } }"""
)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Http:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=60)

    def data(self, user: str, query: str, **variables: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {mint_token(TEST_SECRET, user)}"}
        body = self.client.post(
            self.url, json={"query": query, "variables": variables}, headers=headers
        ).json()
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data


async def open_socket(
    server: ChorusServer, user: str, query: str, variables: dict[str, Any]
) -> ClientConnection:
    url = server.url.replace("http://", "ws://", 1)
    ws = await connect(url, subprotocols=[PROTOCOL], open_timeout=60)
    token = mint_token(TEST_SECRET, user)
    await ws.send(
        json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
    )
    assert json.loads(await ws.recv())["type"] == "connection_ack"
    payload = {"query": query, "variables": variables}
    await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
    return ws


def setup(http: Http, users: int) -> str:
    created = http.data(
        "owner",
        "mutation($i: CreatePlaylistInput!) { createPlaylist(input: $i) { playlist { id } } }",
        i={"operationId": "create", "title": "Presence bench"},
    )
    pid: str = created["createPlaylist"]["playlist"]["id"]
    for n in range(users):
        http.data(
            "owner",
            ROLE,
            i={
                "playlistId": pid,
                "operationId": f"m{n}",
                "baseVersion": 0,
                "userId": f"u{n}",
                "role": "EDITOR",
            },
        )
    return pid


async def measure(
    server: ChorusServer, users: int, changes: int
) -> tuple[list[float], list[float]]:
    http = Http(server.url)
    pid = await asyncio.to_thread(setup, http, users)
    watcher = await open_socket(server, "owner", WATCH, {"id": pid})
    listed: dict[str, str] = {}
    arrived: dict[str, float] = {}

    async def read() -> None:
        async for raw in watcher:
            message = json.loads(raw)
            if message.get("type") != "next":
                continue
            now = time.perf_counter()
            body = message["payload"]["data"]["playlistPresence"]
            for left in body.get("left", []):
                listed.pop(left["id"], None)
            for entry in body["entries"]:
                listed[entry["user"]["id"]] = entry["state"]
                if entry["state"] == "EDITING":
                    arrived.setdefault(entry["user"]["id"], now)

    reader = asyncio.create_task(read())
    sockets = []
    for start in range(0, users, 100):
        sockets += await asyncio.gather(
            *(
                open_socket(server, f"u{n}", EVENTS, {"id": pid, "since": users})
                for n in range(start, min(users, start + 100))
            )
        )
    deadline = time.monotonic() + 120
    while len(listed) < users:
        assert time.monotonic() < deadline, f"only {len(listed)} of {users} listed"
        await asyncio.sleep(0.05)
    print(f"{users} present; {changes} changes", file=sys.stderr)
    samples: list[float] = []
    answered: list[float] = []
    for n in range(changes):
        user = f"u{n % users}"
        arrived.pop(user, None)
        started = time.perf_counter()
        await asyncio.to_thread(http.data, user, SET, input={"playlistId": pid, "state": "EDITING"})
        answered.append((time.perf_counter() - started) * 1000)
        while user not in arrived:
            assert time.perf_counter() - started < 10, f"{user} EDITING never arrived"
            await asyncio.sleep(0.0005)
        samples.append((arrived[user] - started) * 1000)
        await asyncio.to_thread(http.data, user, SET, input={"playlistId": pid, "state": None})
    bare_http: list[float] = []
    reads: list[float] = []
    for _ in range(changes):
        started = time.perf_counter()
        await asyncio.to_thread(http.data, "owner", "{ __typename }")
        bare_http.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await asyncio.to_thread(http.data, "owner", READ, id=pid)
        reads.append((time.perf_counter() - started) * 1000)
    reader.cancel()
    for ws in [watcher, *sockets]:
        ws.transport.abort()
    http.client.close()
    return samples, answered, reads, bare_http


async def redis_round_trips(count: int) -> list[float]:
    publisher = redis.Redis.from_url(REDIS_URL)
    pubsub = publisher.pubsub()
    await pubsub.subscribe("chorus-bench-presence")
    await pubsub.get_message(timeout=1)
    samples = []
    for n in range(count):
        started = time.perf_counter()
        await publisher.publish("chorus-bench-presence", str(n))
        while (await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)) is None:
            pass
        samples.append((time.perf_counter() - started) * 1000)
    await pubsub.aclose()  # type: ignore[no-untyped-call]
    await publisher.aclose()
    return samples


@contextlib.asynccontextmanager
async def server_of(profile: str, base: Path, users: int) -> AsyncIterator[ChorusServer]:
    env = {
        "CHORUS_PRESENCE_TTL_S": "30",
        "CHORUS_RESPONSE_CACHE": "false",
        "CHORUS_MAX_CONNECTIONS": str(users + 200),
    }
    if profile == "embedded":
        server = ChorusServer(f"sqlite+aiosqlite:///{base / 'chorus.db'}", base, **env)
        server.start()
        try:
            yield server
        finally:
            server.stop()
        return
    tansu = TansuServer(base / "tansu.log")
    tansu.start()
    database = await asyncio.to_thread(create_database)
    suffix = str(int(time.time()))
    env |= {
        "CHORUS_KAFKA_BOOTSTRAP_SERVERS": tansu.bootstrap_servers,
        "CHORUS_KAFKA_TOPIC": f"chorus-bench-{suffix}",
        "CHORUS_KAFKA_IDEMPOTENT_PRODUCER": "false",
        "CHORUS_KAFKA_FANOUT_GROUP": f"fanout-{suffix}",
        "CHORUS_KAFKA_PROJECTOR_GROUP": f"projector-{suffix}",
        "CHORUS_KAFKA_FEED_GROUP": f"feed-{suffix}",
        "CHORUS_REDIS_URL": REDIS_URL,
    }
    server = ChorusServer(postgres_url(database), base, ("serve", "--with-workers"), **env)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        await asyncio.to_thread(drop_database, database)
        tansu.stop()


def row(name: str, samples: list[float]) -> str:
    return (
        f"| {name} | {len(samples)} | {statistics.median(samples):.2f} "
        f"| {percentile(samples, 0.99):.2f} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=("embedded", "full"), default="embedded")
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--changes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        async with server_of(args.profile, Path(tmp), args.users) as server:
            presence, answered, reads, bare_http = await measure(server, args.users, args.changes)
    bare_redis = await redis_round_trips(args.changes)
    print(f"\n{args.profile} profile, {args.users:,} present users, one watcher\n")
    print("| what | samples | p50 ms | p99 ms |\n|---|---|---|---|")
    print(row("setPresence → PresenceChanged at the watcher", presence))
    print(row("setPresence answered (HTTP)", answered))
    print(row("a playlist read (title, viewerRole) on the same server", reads))
    print(row("bare HTTP round trip to the same server", bare_http))
    print(row("bare Redis PUBLISH → subscriber", bare_redis))
    ratio = statistics.median(presence) / statistics.median(reads)
    print(f"\np50 presence delivery / playlist read: {ratio:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
