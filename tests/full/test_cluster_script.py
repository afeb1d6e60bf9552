"""``scripts/cluster``: the whole topology on one machine, used through HAProxy.

One ``scripts/cluster up --api 2`` on free ports starts the primary's database,
a streaming replica, PgBouncer, Redis (a Redis Cluster when
``scripts/redis-cluster`` is there), the Tansu broker, two API processes, two
gateways, the four workers and HAProxy; the tests then talk only to HAProxy,
and ``scripts/cluster down`` must leave none of it running. The deploy/
configuration is checked here too: ``compose.yaml`` parses, and HAProxy
accepts ``deploy/haproxy/haproxy.cfg``.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient

from chorus.auth import mint_token
from chorus.events.wire import DEFAULT_TOPIC
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track, version
from tests.e2e.test_subscriptions import close_socket, open_socket
from tests.full.conftest import cluster_port
from tests.full.test_gateways import _subscribe, _versions
from tests.servers import TEST_SECRET, ChorusServer, drop_database, free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster"
EDITS = 6


class Cluster:
    """A topology started by ``scripts/cluster up``: its environment and HAProxy's URL."""

    def __init__(self, state: Path) -> None:
        ports = [free_port() for _ in range(13)]
        # Never the script's default 7101-7103: another checkout's cluster may be there.
        self.redis_ports = [cluster_port() for _ in range(3)]
        self.api_ports = ports[5:7]
        self.gateway_ports = ports[7:9]
        self.worker_ports = ports[9:13]
        self.kafka_port = ports[3]
        self.database = f"chorus_test_cluster_{os.getpid()}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CHORUS_", "CLUSTER_"))},
            "CLUSTER_DIR": str(state),
            "CLUSTER_PORT": str(ports[0]),
            "CLUSTER_REPLICA_PORT": str(ports[1]),
            "CLUSTER_PGBOUNCER_PORT": str(ports[2]),
            "CLUSTER_KAFKA_PORT": str(ports[3]),
            "CLUSTER_API_PORTS": ",".join(map(str, self.api_ports)),
            "CLUSTER_GATEWAY_PORTS": ",".join(map(str, self.gateway_ports)),
            "CLUSTER_WORKER_PORTS": ",".join(map(str, self.worker_ports)),
            "CLUSTER_DATABASE": self.database,
            "CLUSTER_WAIT_S": str(int(patience(120))),
            "CLUSTER_REDIS_ARGS": "--ports " + ",".join(map(str, self.redis_ports)),
        }
        self.ports = ports + self.redis_ports
        self.url = ""
        # The processes mint with the tests' secret: Api signs its tokens with it.
        (state / "data").mkdir()
        (state / "data" / "jwt-secret").write_text(TEST_SECRET + "\n")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=patience(600),
            check=False,
        )

    def endpoint(self) -> ChorusServer:
        """HAProxy, as the e2e helpers take a server (they read ``url`` only)."""
        return cast(ChorusServer, _Endpoint(self.url))


class _Endpoint:
    def __init__(self, url: str) -> None:
        self.url = url


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Not under pytest's 0700 folder: the replica and PgBouncer run as the postgres user.
    state = Path(tempfile.mkdtemp(prefix="chorus-cluster-"))
    state.chmod(0o755)
    running = Cluster(state)
    try:
        up = running.run("up", "--api", "2")
        assert up.returncode == 0, up.stderr[-3000:]
        found = re.search(r"^CHORUS_URL=(\S+)$", up.stdout, re.MULTILINE)
        assert found, up.stdout
        running.url = found.group(1)
        yield running
    finally:
        down = running.run("down")
        assert down.returncode == 0, down.stderr[-3000:]
        drop_database(running.database)
        shutil.rmtree(state)


def _metric(port: int, name: str) -> float:
    """The sum of every sample of ``name`` on one process's ``/metrics``."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def test_status_shows_every_part_ready(cluster: Cluster) -> None:
    status = cluster.run("status")
    assert status.returncode == 0, status.stdout + status.stderr
    for part in ("haproxy", "api-1", "api-2", "gateway-1", "gateway-2", "relay", "feed"):
        assert re.search(rf"^{part} .* running, ready$", status.stdout, re.MULTILINE), status.stdout
    # A Redis Cluster on the ports asked for, which `status` found without being told again.
    for port in cluster.redis_ports:
        line = rf"^redis-\d +127\.0\.0\.1:{port} +running, cluster_state ok$"
        assert re.search(line, status.stdout, re.MULTILINE), status.stdout


async def test_a_write_through_haproxy_reaches_a_subscriber_on_a_gateway(
    cluster: Cluster,
) -> None:
    proxy = cluster.endpoint()
    api = Api(proxy)
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        since = version(api, playlist_id)
        # A socket HAProxy handed to an API process would be refused with 421.
        ws = await open_socket(proxy, mint_token(TEST_SECRET, "bob"))
        try:
            await _subscribe(ws, playlist_id, since)
            base = since
            for n in range(EDITS):
                base = add(api, playlist_id, [track(n + 1)], base)["version"]
            received = await _versions(ws, EDITS)
        finally:
            await close_socket(ws)
        assert received == list(range(since + 1, since + EDITS + 1))
    finally:
        api.http.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster.kafka_port}")
    await admin.start()
    try:
        (described,) = await admin.describe_topics([DEFAULT_TOPIC])
    finally:
        await admin.close()
    assert len(described["partitions"]) == 12


def test_http_goes_to_every_api_process_and_never_to_a_gateway(cluster: Cluster) -> None:
    api = Api(cluster.endpoint())
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        before = [_metric(p, "chorus_graphql_request_seconds_count") for p in cluster.api_ports]
        for _ in range(8):
            assert version(api, playlist_id) == 0  # a gateway would answer 421
        after = [_metric(p, "chorus_graphql_request_seconds_count") for p in cluster.api_ports]
        assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)
        for port in cluster.gateway_ports:
            assert _metric(port, "chorus_graphql_request_seconds_count") == 0
    finally:
        api.http.close()


def test_down_leaves_nothing_running(cluster: Cluster) -> None:
    state = Path(cluster.env["CLUSTER_DIR"])
    pids = [int(p.read_text()) for p in (state / "pids").glob("*.pid")]
    assert len(pids) == 10  # haproxy, kafka, 2 api, 2 gateways, 4 workers
    down = cluster.run("down")
    assert down.returncode == 0, down.stderr[-3000:]
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"pid {pid} still runs"
    still = [port for port in cluster.ports if _listening(port)]
    assert still == [], f"still listening: {still}"
    status = cluster.run("status")
    assert status.returncode == 3, status.stdout
    assert "running" not in status.stdout


def test_compose_file_parses_and_runs_the_topology() -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    for name in ("db-primary", "db-replica", "pgbouncer", "kafka", "haproxy", "migrate"):
        assert name in services, sorted(services)
    assert {"redis-1", "redis-2", "redis-3"} <= set(services)
    commands = {name: service.get("command") for name, service in services.items()}
    for name in ("api-1", "api-2"):
        assert commands[name] == ["chorus", "serve", "--role", "api"]
    for name in ("gateway-1", "gateway-2"):
        assert commands[name] == ["chorus", "serve", "--role", "gateway"]
    for worker in ("relay", "fanout", "project-cache", "feed"):
        assert commands[worker] == ["chorus", worker, "--port", "8000"]
    # HAProxy names exactly the API processes and gateways the compose file runs.
    haproxy = (ROOT / "deploy" / "haproxy" / "haproxy.cfg").read_text()
    servers = re.findall(r"^\s+server (\S+) (\S+):8000$", haproxy, re.MULTILINE)
    assert sorted(name for name, host in servers if name == host) == sorted(
        name for name in services if name.startswith(("api-", "gateway-"))
    )


def test_haproxy_accepts_the_deploy_configuration(tmp_path: Path) -> None:
    installed = subprocess.run([str(SCRIPT), "install"], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    checked = subprocess.run(
        ["haproxy", "-c", "-f", str(ROOT / "deploy" / "haproxy" / "haproxy.cfg")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
