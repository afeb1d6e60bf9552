"""``/readyz`` and ``/metrics`` against real servers, stopped and started again.

The handlers of :mod:`chorus.health` run in a small Starlette app here, so
each dependency can be stopped on its own; the served app (``chorus serve``)
is checked at the end with the same endpoints.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.routing import Route
from strawberry.schema.exceptions import CannotGetOperationTypeError

from chorus import health, settings
from chorus.auth import mint_token
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import CreatePlaylist
from chorus.graphql.execution.operation_metrics import OPERATION_NAME, OperationNames
from chorus.graphql.schema.build import build_schema
from chorus.resolvers.context import Services
from chorus.subscriptions.bus import InProcessBus
from chorus.subscriptions.hub import Hub
from tests.full.conftest import REDIS_URL
from tests.full.helpers import full_profile_env
from tests.servers import TEST_SECRET, ChorusServer, RedisServer, TansuServer, free_port


def _app(checks: list[health.Check], services: Any = None) -> Starlette:
    app = Starlette(routes=[Route("/readyz", health.readyz), Route("/metrics", health.metrics)])
    app.state.readiness = checks
    if services is not None:
        app.state.services = services
    return app


@pytest.fixture
async def client_for() -> AsyncIterator[Any]:
    clients: list[httpx.AsyncClient] = []

    def make(app: Starlette) -> httpx.AsyncClient:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


async def _readyz(client: httpx.AsyncClient) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    response = await client.get("/readyz")
    body: dict[str, Any] = response.json()
    return response.status_code, body, time.monotonic() - started


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_readyz_names_the_dependency_that_is_down(
    pg_database: Database,
    private_redis: RedisServer,
    private_tansu: TansuServer,
    client_for: Any,
) -> None:
    redis_client = redis.Redis.from_url(
        private_redis.url, socket_timeout=1.0, socket_connect_timeout=1.0
    )
    checks = [
        health.database_check(pg_database),
        health.redis_check(redis_client),
        health.kafka_check(private_tansu.bootstrap_servers),
    ]
    client = client_for(_app(checks))
    try:
        status, body, _ = await _readyz(client)
        assert status == 200, body
        assert body == {
            "status": "ready",
            "checks": {"postgresql": "ok", "redis": "ok", "kafka": "ok"},
        }

        await asyncio.to_thread(private_redis.kill)
        status, body, took = await _readyz(client)
        assert status == 503, body
        assert body["status"] == "unavailable"
        assert body["checks"]["redis"].startswith("down: "), body
        assert body["checks"]["postgresql"] == body["checks"]["kafka"] == "ok"
        assert took < 2 * health.PROBE_TIMEOUT_S + 1  # bounded by the probe timeout, not hung

        await asyncio.to_thread(private_tansu.kill)
        status, body, took = await _readyz(client)
        assert status == 503
        assert body["checks"]["kafka"].startswith("down: "), body
        assert body["checks"]["redis"].startswith("down: ")
        assert took < 2 * health.PROBE_TIMEOUT_S + 1  # bounded by the probe timeout, not hung
        reason = body["checks"]["kafka"].removeprefix("down: ")
        kind = reason.split(":")[0]
        assert not reason.startswith(f"{kind}: {kind}"), "the error's name said twice"

        # Both back on their ports: the same checks (and Kafka client) recover.
        await asyncio.to_thread(private_redis.start)
        await asyncio.to_thread(private_tansu.start)
        status, body, _ = await _readyz(client)
        assert status == 200, body
    finally:
        await health.close_checks(checks)
        await redis_client.aclose()


async def test_readyz_bounds_a_dependency_that_hangs(client_for: Any) -> None:
    async def hangs() -> None:
        await asyncio.sleep(30)

    async def fine() -> None:
        return None

    hanging = [health.Check(name, hangs) for name in ("slow", "x", "y")]
    checks = [hanging[0], health.Check("other", fine), *hanging[1:]]
    status, body, took = await _readyz(client_for(_app(checks)))
    assert status == 503
    assert body["checks"] == {
        "slow": "down: no answer within 1s",
        "other": "ok",
        "x": "down: no answer within 1s",
        "y": "down: no answer within 1s",
    }
    # One after another, three probes that each wait out the timeout take 3 s.
    assert took < len(hanging) * health.PROBE_TIMEOUT_S


async def test_readyz_answers_without_waiting_for_a_late_probe_to_clean_up() -> None:
    """A probe cancelled at its timeout may take long to finish (closing a connection to a
    server that stopped answering): the answer is known, and does not wait for it."""
    cleaned_up = asyncio.Event()

    async def slow_to_let_go() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)  # shielded from nothing: a clean-up that awaits
            cleaned_up.set()
            raise

    ready, checks = await health.run_checks([health.Check("db", slow_to_let_go)], timeout_s=0.05)

    assert (ready, checks) == (False, {"db": "down: no answer within 0.05s"})
    assert not cleaned_up.is_set()  # answered while the probe was still letting go
    await asyncio.wait_for(cleaned_up.wait(), timeout=10)  # and it does finish
    await asyncio.sleep(0)
    assert not health._ABANDONED


async def test_readyz_database_down_names_it(client_for: Any) -> None:
    db = Database(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/postgres")
    try:
        status, body, took = await _readyz(client_for(_app([health.database_check(db)])))
    finally:
        await db.dispose()
    assert status == 503
    assert body["checks"]["postgresql"].startswith("down: DatabaseUnavailable: "), body
    assert took < 2 * health.PROBE_TIMEOUT_S + 1  # bounded by the probe timeout, not hung


async def test_metrics_sets_backlog_and_subscriber_gauges(
    pg_database: Database, client_for: Any
) -> None:
    store = PlaylistStore(pg_database)  # no relay: the outbox keeps its event
    await store.create(CreatePlaylist(operation_id="op-metrics", title="Backlog"), "alice")
    hub = Hub(InProcessBus())
    member = await hub.join("some-playlist")
    services = Services(db=pg_database, store=store, catalog=None, limits=store.limits, hub=hub)  # type: ignore[arg-type]
    client = client_for(_app([], services))

    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    assert _sample("chorus_outbox_backlog") == 1.0
    assert _sample("chorus_outbox_oldest_unpublished_age_seconds") >= 0.0
    assert _sample("chorus_live_subscribers") == 1.0
    assert "chorus_outbox_backlog 1.0" in response.text

    await hub.leave(member)
    await client.get("/metrics")
    assert _sample("chorus_live_subscribers") == 0.0


async def test_metrics_answers_while_the_database_is_away(client_for: Any) -> None:
    db = Database(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/postgres")
    services = Services(db=db, store=None, catalog=None, limits=None, hub=None)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        response = await client_for(_app([], services)).get("/metrics")
    finally:
        await db.dispose()
    assert response.status_code == 200
    assert "chorus_outbox_backlog" in response.text
    assert time.monotonic() - started < 2.0


async def test_operations_are_timed_by_type_and_name() -> None:
    schema = build_schema(operation_names=OperationNames(["HealthProbe"]))

    def count(operation_type: str, name: str) -> float:
        return _sample(
            "chorus_graphql_request_seconds_count",
            operation_type=operation_type,
            operation_name=name,
        )

    before = {
        key: count(*key)
        for key in [("query", "HealthProbe"), ("query", "anonymous"), ("unknown", "unknown")]
    }
    await schema.execute("query HealthProbe { __typename }")
    await schema.execute("query HealthProbe { __typename }")
    await schema.execute("{ __typename }")
    await schema.execute("query {")  # a syntax error: no operation to name
    with pytest.raises(CannotGetOperationTypeError):  # the view answers 400
        await schema.execute("query A { __typename }", operation_name="Missing")
    assert count("query", "HealthProbe") == before["query", "HealthProbe"] + 2
    assert count("query", "anonymous") == before["query", "anonymous"] + 1
    assert count("unknown", "unknown") == before["unknown", "unknown"] + 2


async def test_subscriptions_are_counted_not_timed() -> None:
    schema = build_schema(operation_names=OperationNames(["WatchHealth"]))
    labels = {"operation_name": "WatchHealth"}
    before = _sample("chorus_graphql_subscriptions_total", **labels)
    stream = await schema.subscribe(
        'subscription WatchHealth { playlistEvents(playlistId: "x", sinceVersion: 0) '
        "{ __typename } }",
        context_value=None,
    )
    assert hasattr(stream, "__aiter__")
    async for _ in stream:  # no context: the stream fails at once, after it started
        break
    await stream.aclose()
    assert _sample("chorus_graphql_subscriptions_total", **labels) == before + 1
    timed = _sample(
        "chorus_graphql_request_seconds_count",
        operation_type="subscription",
        operation_name="WatchHealth",
    )
    assert timed == 0.0


def test_operation_names_are_learned_only_from_authenticated_callers_and_bounded() -> None:
    names = OperationNames(["Configured"], limit=3, per_user=2)
    assert names.label("Made1") == "other"  # no authenticated caller: nothing learned
    assert names.label("Configured") == "Configured"
    assert [names.label(n, "alice") for n in ["A", "B", "C", "A", None, ""]] == [
        "A",
        "B",
        "other",  # alice taught two names already
        "A",
        "anonymous",
        "anonymous",
    ]
    assert names.label("A") == "A"  # once learned, anyone's operation of that name counts
    assert names.label("C", "bob") == "C"
    assert names.label("D", "carol") == "other"  # three learned in all
    assert names.label("Configured", "carol") == "Configured"
    assert OperationNames().label("not a name!", "alice") == "other"
    assert OperationNames().label("x" * 101, "alice") == "other"


def test_settings_accept_the_operation_names_the_label_accepts() -> None:
    assert settings.OPERATION_NAME.pattern == OPERATION_NAME.pattern


@pytest.fixture
def embedded_server(tmp_path: Path) -> Iterator[ChorusServer]:
    server = ChorusServer(f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}", tmp_path)
    server.start()
    yield server
    server.stop()


def test_served_app_has_readyz_and_metrics(embedded_server: ChorusServer) -> None:
    base = embedded_server.base_url
    ready = httpx.get(f"{base}/readyz", timeout=5)
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"sqlite": "ok"}, "role": "all"}

    token = mint_token(TEST_SECRET, "alice")
    body = {"query": "query WhoAmI { viewer { user { id } } }"}
    answer = httpx.post(
        embedded_server.url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=5
    )
    assert "errors" not in answer.json(), answer.text
    assert answer.json()["data"] == {"viewer": {"user": {"id": "alice"}}}

    scraped = httpx.get(f"{base}/metrics", timeout=5)
    assert scraped.status_code == 200
    assert (
        'chorus_graphql_request_seconds_count{operation_name="WhoAmI",operation_type="query"} 1.0'
        in scraped.text
    )
    assert "chorus_live_subscribers 0.0" in scraped.text
    assert "chorus_outbox_backlog 0.0" in scraped.text


def test_served_full_profile_names_redis_and_kafka(
    pg_url: str, private_redis: RedisServer, private_tansu: TansuServer, tmp_path: Path
) -> None:
    server = ChorusServer(
        pg_url,
        tmp_path,
        CHORUS_REDIS_URL=private_redis.url,
        CHORUS_KAFKA_BOOTSTRAP_SERVERS=private_tansu.bootstrap_servers,
        CHORUS_KAFKA_IDEMPOTENT_PRODUCER="false",
    )
    server.start()
    try:
        ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"] == {"postgresql": "ok", "redis": "ok", "kafka": "ok"}

        private_redis.kill()
        private_tansu.kill()
        ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
        assert ready.status_code == 503
        checks = ready.json()["checks"]
        assert checks["postgresql"] == "ok"
        assert checks["redis"].startswith("down: "), checks
        assert checks["kafka"].startswith("down: "), checks

        private_redis.start()
        private_tansu.start()
        ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
    finally:
        server.stop()


def test_a_worker_names_the_server_it_waits_for_and_stops_on_sigterm(
    pg_url: str, private_tansu: TansuServer, tmp_path: Path
) -> None:
    env = full_profile_env(private_tansu.bootstrap_servers, REDIS_URL)
    worker = ChorusServer(pg_url, tmp_path, command=("fanout",), **env)
    worker.start()
    try:
        ready = httpx.get(f"{worker.base_url}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"] == {"kafka": "ok", "redis": "ok"}

        private_tansu.kill()
        ready = httpx.get(f"{worker.base_url}/readyz", timeout=5)
        assert ready.status_code == 503
        assert ready.json()["checks"]["kafka"].startswith("down: ")
        alive = httpx.get(f"{worker.base_url}/healthz", timeout=5)
        assert alive.json() == {"status": "alive", "workers": ["fanout"]}

        private_tansu.start()
        ready = httpx.get(f"{worker.base_url}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text

        # uvicorn holds SIGTERM while it serves the probes, then hands it on.
        assert worker.process is not None
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(timeout=10) == 0, worker.log.read_text()[-2000:]
    finally:
        worker.stop()
