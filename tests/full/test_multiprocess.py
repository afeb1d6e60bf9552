"""The full profile as separate processes: two API servers, a relay, a fanout, a projector.

Writers edit through the first API process, subscribers follow on the
second: every event they receive went outbox → ``chorus relay`` → Kafka →
``chorus fanout`` → Redis pub/sub → the second process. The convergence test
of the embedded profile must pass unchanged across them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.e2e.test_subscriptions_convergence import converge
from tests.full.helpers import Deployment, full_deployment
from tests.servers import ChorusServer, TansuServer

ENTRIES_TOTAL = (
    """query($id: ID!) { playlist(id: $id) { version entries(first: 5) { totalCount } } }"""
)


@pytest.fixture(scope="module")
def cluster(
    postgres_template: str, tansu: TansuServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """Two API servers (writers, readers) and a relay, a fanout and a projector."""
    data_dir = tmp_path_factory.mktemp("cluster")
    workers = ("relay", "fanout", "project-cache")
    with full_deployment(tansu, data_dir, (None, None), workers) as running:
        yield running


async def test_writers_on_one_process_and_subscribers_on_another_converge(
    cluster: Deployment,
) -> None:
    writing, following = Api(cluster.servers[0]), Api(cluster.servers[1])
    try:
        await converge(writing, following)
    finally:
        writing.http.close()
        following.http.close()


def _sample(server: ChorusServer, name: str) -> float:
    for line in httpx.get(f"{server.base_url}/metrics", timeout=5).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics of {server.command}")


def _commits(server: ChorusServer) -> float:
    return _sample(server, "chorus_commits_total")


def test_each_process_is_ready_and_reports_metrics(cluster: Deployment) -> None:
    writers, readers = cluster.servers
    api = Api(writers)
    try:
        before = _commits(writers), _commits(readers)
        playlist_id = create_playlist(api, visibility="PUBLIC")
        add(api, playlist_id, [track(1), track(2)], 0)
        for server in (writers, readers):
            ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
            assert ready.status_code == 200, ready.text
            assert set(ready.json()["checks"]) == {"postgresql", "redis", "kafka"}
            metrics = httpx.get(f"{server.base_url}/metrics", timeout=5).text
            assert "chorus_outbox_backlog" in metrics
            assert "chorus_live_subscribers" in metrics
        assert 'operation_type="mutation"' in httpx.get(f"{writers.base_url}/metrics").text
        # Each process counts its own commits: two on the writers' side, none on the readers'.
        assert (_commits(writers), _commits(readers)) == (before[0] + 2, before[1])
    finally:
        api.http.close()


WORKER_CHECKS = {
    "relay": {"postgresql", "kafka"},
    "fanout": {"kafka", "redis"},
    "project-cache": {"postgresql", "kafka", "redis"},
}
WORKER_COUNTERS = {  # what each counts, and how many of the test's two versions at least
    "relay": ("chorus_relay_published_total", 2),
    "fanout": ("chorus_fanout_published_total", 2),
    "project-cache": ("chorus_projector_snapshots_total", 1),  # may write the last only
}


def test_each_worker_answers_its_probes_and_counts_its_work(cluster: Deployment) -> None:
    before = {w.command[0]: _sample(w, WORKER_COUNTERS[w.command[0]][0]) for w in cluster.workers}
    api = Api(cluster.servers[0])
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        add(api, playlist_id, [track(1)], 0)
    finally:
        api.http.close()
    for worker in cluster.workers:
        name = worker.command[0]
        alive = httpx.get(f"{worker.base_url}/healthz", timeout=5)
        assert alive.json() == {"status": "alive", "workers": [name]}
        ready = httpx.get(f"{worker.base_url}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        assert set(ready.json()["checks"]) == WORKER_CHECKS[name]
        counter, least = WORKER_COUNTERS[name]
        deadline = time.monotonic() + patience(20)
        while _sample(worker, counter) < before[name] + least:
            assert time.monotonic() < deadline, f"{name}: {counter} did not grow by {least}"
            time.sleep(0.1)
