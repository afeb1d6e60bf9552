"""``chorus serve --with-workers``: the full profile on one node, one process.

The relay, fanout and cache projector run inside the API process; a
subscriber still gets its live events through Kafka and Redis pub/sub, and
PUBLIC reads come from the projected snapshot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.e2e.test_subscriptions import receive, socket, subscribe
from tests.full.conftest import REDIS_URL
from tests.full.helpers import full_profile_env
from tests.servers import ChorusServer, TansuServer

READ = "query($id: ID!) { playlist(id: $id) { version entries(first: 10) { totalCount } } }"


@pytest.fixture
def node(pg_url: str, tansu: TansuServer, tmp_path: Path) -> Iterator[ChorusServer]:
    env = full_profile_env(tansu.bootstrap_servers, REDIS_URL)
    server = ChorusServer(pg_url, tmp_path, ("serve", "--with-workers"), **env)
    server.start()
    yield server
    server.stop()


def _snapshot_hits(server: ChorusServer) -> float:
    for line in httpx.get(f"{server.base_url}/metrics", timeout=5).text.splitlines():
        if line.startswith('chorus_snapshot_reads_total{result="hit"}'):
            return float(line.split()[1])
    return 0.0


async def test_one_process_relays_fans_out_and_projects(node: ChorusServer) -> None:
    api = Api(node)
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        async with socket(node, api.token("bob")) as ws:
            await subscribe(ws, "1", playlist_id, 0)
            head = 0
            for n in range(1, 4):
                head = add(api, playlist_id, [track(n)], head)["version"]
            events = [await receive(ws) for _ in range(3)]
        versions = [e["payload"]["data"]["playlistEvents"]["version"] for e in events]
        assert versions == [1, 2, 3]

        # The projector catches up; then a PUBLIC read is a snapshot hit.
        before = _snapshot_hits(node)
        deadline = time.monotonic() + patience(20)
        while _snapshot_hits(node) == before:
            assert time.monotonic() < deadline, "no read was served from the snapshot"
            data = api.data(READ, "bob", id=playlist_id)
            assert data["playlist"]["version"] == head
            assert data["playlist"]["entries"]["totalCount"] == 3
            await asyncio.sleep(0.1)
    finally:
        api.http.close()
