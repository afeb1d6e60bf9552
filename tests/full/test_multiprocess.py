"""The full profile as separate processes: two API servers, a relay, a fanout, a projector.

Writers edit through the first API process, subscribers follow on the
second: every event they receive went outbox → ``chorus relay`` → Kafka →
``chorus fanout`` → Redis pub/sub → the second process. The convergence test
of the embedded profile must pass unchanged across them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.e2e.test_subscriptions_convergence import converge
from tests.full.conftest import REDIS_URL
from tests.full.helpers import full_profile_env
from tests.servers import ChorusServer, TansuServer

ENTRIES_TOTAL = (
    """query($id: ID!) { playlist(id: $id) { version entries(first: 5) { totalCount } } }"""
)


class Cluster:
    """The processes of one full-profile deployment over one database, topic and Redis."""

    def __init__(self, database_url: str, data_dir: Path, bootstrap_servers: str) -> None:
        env = full_profile_env(bootstrap_servers, REDIS_URL)
        self.writers = ChorusServer(database_url, data_dir, **env)
        self.readers = ChorusServer(database_url, data_dir, **env)
        self.workers = [
            ChorusServer(database_url, data_dir, command=(name,), **env)
            for name in ("relay", "fanout", "project-cache")
        ]

    def start(self) -> None:
        self.writers.start()  # migrates the database first
        for process in [self.readers, *self.workers]:
            process.start()

    def stop(self) -> None:
        for process in [*self.workers, self.readers, self.writers]:
            process.stop()


@pytest.fixture(scope="module")
def cluster(
    postgres_template: str, tansu: TansuServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    from tests.servers import create_database, drop_database, postgres_url

    name = create_database()
    running = Cluster(
        postgres_url(name), tmp_path_factory.mktemp("cluster"), tansu.bootstrap_servers
    )
    running.start()
    yield running
    running.stop()
    drop_database(name)


async def test_writers_on_one_process_and_subscribers_on_another_converge(
    cluster: Cluster,
) -> None:
    writing, following = Api(cluster.writers), Api(cluster.readers)
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


def test_each_process_is_ready_and_reports_metrics(cluster: Cluster) -> None:
    api = Api(cluster.writers)
    try:
        before = _commits(cluster.writers), _commits(cluster.readers)
        playlist_id = create_playlist(api, visibility="PUBLIC")
        add(api, playlist_id, [track(1), track(2)], 0)
        for server in (cluster.writers, cluster.readers):
            ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
            assert ready.status_code == 200, ready.text
            assert set(ready.json()["checks"]) == {"postgresql", "redis", "kafka"}
            metrics = httpx.get(f"{server.base_url}/metrics", timeout=5).text
            assert "chorus_outbox_backlog" in metrics
            assert "chorus_live_subscribers" in metrics
        assert 'operation_type="mutation"' in httpx.get(f"{cluster.writers.base_url}/metrics").text
        # Each process counts its own commits: two on the writers' side, none on the readers'.
        assert (_commits(cluster.writers), _commits(cluster.readers)) == (before[0] + 2, before[1])
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


def test_each_worker_answers_its_probes_and_counts_its_work(cluster: Cluster) -> None:
    before = {w.command[0]: _sample(w, WORKER_COUNTERS[w.command[0]][0]) for w in cluster.workers}
    api = Api(cluster.writers)
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
