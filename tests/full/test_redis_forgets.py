"""When Redis forgets, no head goes back: two API processes, a Redis of the test's own.

Each test makes a PUBLIC playlist with three entries (version 3) that carol
reads on both processes (answers cached, a snapshot filled), makes it PRIVATE
(version 4), then has Redis forget the version-4 head one way — a restart
from an older RDB, ``FLUSHALL``, a failover to a replica that lagged, the
head evicted under ``maxmemory`` — and checks that carol never again gets
the playlist from either process, by the query she had sent or by one she
never sent (docs/caching.md "When Redis forgets").

``FLUSHALL`` and eviction leave no head at all, which reads already took as
unknown; what brought the old head back was a read that began before the
loss and raised the head to what it saw once it ended. Such a read is held
here in the catalog (an HTTP catalog of the test's own, held while asked).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import redis

from chorus.caches.keys import GENERATION_KEY, head_key, snapshot_key
from chorus.graphql.schema.common import ids
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, committed, create_playlist, mutate, track
from tests.e2e.test_response_cache import PAGE, post
from tests.full.helpers import full_profile_env
from tests.http_stub import QuietHandler
from tests.servers import ChorusServer, RedisServer, TansuServer, TcpProxy

WAIT_S = patience(30.0)
"""The longest wait for a background write (a head raise, a snapshot fill) or a held read."""
READS_AFTER = 20
"""Reads of each process after Redis forgot, every one of which must refuse carol."""

NEVER_SENT = "query Never($id: ID!) { playlist(id: $id) { title visibility version } }"
HELD = """query Held($id: ID!) { playlist(id: $id) { version visibility
  entries(first: 10) { edges { node { media { title artists } } } } } }"""


class Catalog:
    """An HTTP catalog that knows every media id and answers only while not held."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.waiting = 0
        catalog = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                asked = parse_qs(urlparse(self.path).query).get("id", [])
                catalog.waiting += 1
                catalog.open.wait(WAIT_S * 2)
                catalog.waiting -= 1
                media = [{"id": i, "title": f"T {i}", "artists": ["A"]} for i in asked]
                self.reply(json.dumps({"media": media}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Deployment:
    """Two API processes (no workers) on one PostgreSQL database and one Redis URL."""

    def __init__(self, pg_url: str, data_dir: Path, servers: str, redis_url: str) -> None:
        self.catalog = Catalog()
        env = full_profile_env(servers, redis_url)
        env |= {"CHORUS_CATALOG_URL": self.catalog.url, "CHORUS_CATALOG_TIMEOUT_MS": "120000"}
        self.servers = [ChorusServer(pg_url, data_dir, **env) for _ in range(2)]
        for server in self.servers:
            server.start()
        self.apis = [Api(server) for server in self.servers]

    def close(self) -> None:
        for api in self.apis:
            api.http.close()
        for server in self.servers:
            server.stop()
        self.catalog.server.shutdown()
        self.catalog.server.server_close()


@pytest.fixture
def primary(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "primary" / "redis.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def proxy(primary: RedisServer) -> Iterator[TcpProxy]:
    """What the API processes know as Redis: the primary, until a failover."""
    forwarder = TcpProxy(primary.port)
    yield forwarder
    forwarder.close()


@pytest.fixture
def deployment(
    pg_url: str, tansu: TansuServer, proxy: TcpProxy, tmp_path: Path
) -> Iterator[Deployment]:
    running = Deployment(
        pg_url, tmp_path, tansu.bootstrap_servers, f"redis://127.0.0.1:{proxy.port}/0"
    )
    yield running
    running.close()


def carol_sees(api: Api, pid: str, query: str = PAGE) -> Any:
    body = post(api, query, "carol", variables={"id": pid}).json()
    assert "errors" not in body, body
    return body["data"]["playlist"]


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def public_then_private(
    deployment: Deployment, client: redis.Redis, before_private: Callable[[str], None]
) -> str:
    """A PUBLIC playlist at version 3 read by carol on both processes, then made PRIVATE (4).

    ``before_private`` is handed the playlist's id once the snapshot of
    version 3 is in Redis.
    """
    one, two = deployment.apis
    pid = create_playlist(one, visibility="PUBLIC")
    for n in range(3):
        add(one, pid, [track(n + 1)], n)
    raw = ids.playlist_id(pid)
    for api in (one, two, one, two):  # the second read of each process is a hit
        assert carol_sees(api, pid)["version"] == 3

    def filled() -> bool:
        doc = client.get(snapshot_key(raw))
        return doc is not None and json.loads(doc)["version"] == 3

    wait_until(filled, "the snapshot of version 3")
    before_private(pid)
    hidden = mutate(two, "updatePlaylist", playlistId=pid, baseVersion=3, visibility="PRIVATE")
    assert committed(hidden)["version"] == 4
    wait_until(lambda: int(client.get(head_key(raw)) or -1) == 4, "the head of version 4")
    return pid


def assert_refused_everywhere(deployment: Deployment, pid: str) -> None:
    """Carol gets nothing from either process, by the query she sent or another; alice gets 4."""
    for _ in range(READS_AFTER):
        for api in deployment.apis:
            assert carol_sees(api, pid) is None
            assert carol_sees(api, pid, NEVER_SENT) is None
    for api in deployment.apis:
        assert post(api, PAGE, variables={"id": pid}).json()["data"]["playlist"]["version"] == 4


def test_a_restart_from_an_older_rdb_serves_no_version_3(
    deployment: Deployment, primary: RedisServer
) -> None:
    client = redis.Redis(port=primary.port)
    pid = public_then_private(deployment, client, lambda _: client.save())
    for api in deployment.apis:
        assert carol_sees(api, pid) is None
    client.close()
    primary.kill()  # -9: what it took since the dump is lost
    primary.start()  # and it loads the dump: version 3, PUBLIC
    assert_refused_everywhere(deployment, pid)


def test_a_failover_to_a_replica_that_lagged_serves_no_version_3(
    deployment: Deployment, primary: RedisServer, proxy: TcpProxy, tmp_path: Path
) -> None:
    replica = RedisServer(
        tmp_path / "replica" / "redis.log", "--replicaof", "127.0.0.1", str(primary.port)
    )
    replica.start()
    client, lagging = redis.Redis(port=primary.port), redis.Redis(port=replica.port)
    try:

        def stop_replicating(pid: str) -> None:
            key = snapshot_key(ids.playlist_id(pid))
            wait_until(lambda: lagging.get(key) is not None, "the replica to hold version 3")
            lagging.replicaof("NO", "ONE")  # promoted: it lags from here on

        pid = public_then_private(deployment, client, stop_replicating)
        for api in deployment.apis:
            assert carol_sees(api, pid) is None
        primary.kill()
        proxy.switch(replica.port)  # the clients now reach the promoted replica
        assert_refused_everywhere(deployment, pid)
    finally:
        client.close()
        lagging.close()
        replica.kill()


class HeldRead:
    """carol's read of version 3 on the first process, held in the catalog after reading SQL."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.answers: list[Any] = []
        self.thread: threading.Thread | None = None

    def begin(self, pid: str) -> None:
        catalog = self.deployment.catalog
        catalog.open.clear()
        api = self.deployment.apis[0]
        self.thread = threading.Thread(
            target=lambda: self.answers.append(carol_sees(api, pid, HELD)), daemon=True
        )
        self.thread.start()
        wait_until(lambda: catalog.waiting > 0, "the held read to reach the catalog")

    def end(self) -> None:
        """Let it finish: it answers version 3 (it began before version 4) and keeps it."""
        assert self.thread is not None
        self.deployment.catalog.open.set()
        self.thread.join(WAIT_S)
        assert [a["version"] for a in self.answers] == [3]


def test_flushall_then_a_read_that_began_before_brings_back_no_version_3(
    deployment: Deployment, primary: RedisServer
) -> None:
    client = redis.Redis(port=primary.port)
    held = HeldRead(deployment)
    pid = public_then_private(deployment, client, held.begin)
    client.flushall()
    held.end()
    client.close()
    assert_refused_everywhere(deployment, pid)


def test_eviction_of_the_head_then_a_read_that_began_before_brings_back_no_version_3(
    deployment: Deployment, primary: RedisServer
) -> None:
    client = redis.Redis(port=primary.port)
    held = HeldRead(deployment)
    pid = public_then_private(deployment, client, held.begin)
    head = head_key(ids.playlist_id(pid))
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.config_set("maxmemory", used + 4_000_000)
    filler = 0
    while client.exists(head):  # EXISTS does not touch a key's LRU clock
        with client.pipeline(transaction=False) as pipe:
            for _ in range(200):
                pipe.set(f"filler:{filler}", b"x" * 1000)
                filler += 1
            pipe.get(GENERATION_KEY)  # the keys every read touches stay recent
            pipe.execute()
        assert filler < 200_000, "the head was never evicted"
    client.config_set("maxmemory", 0)  # nothing more is evicted
    held.end()
    client.close()
    assert_refused_everywhere(deployment, pid)
