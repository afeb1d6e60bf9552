"""The response cache and read-through snapshots in the full profile: two API processes, one Redis.

No projector runs: every snapshot here was written by a read (read-through).
Commits of one process raise the Redis head every process checks its cached
answers against, so an edit, a removed member or a visibility change on one
process ends the other's cached answers as soon as that head is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from chorus.caches.keys import head_key, snapshot_key
from chorus.graphql.schema.common import ids
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, committed, create_playlist, mutate, track
from tests.e2e.test_response_cache import PAGE, cache_counts, post
from tests.full.conftest import REDIS_URL
from tests.full.helpers import full_profile_env
from tests.servers import ChorusServer, TansuServer

WAIT_S = patience(30.0)
"""The longest wait for a background write (a head raise, a snapshot fill) to reach Redis."""


class Pair:
    """Two API processes of one full-profile deployment, without workers."""

    def __init__(self, database_url: str, data_dir: Path, bootstrap_servers: str) -> None:
        env = full_profile_env(bootstrap_servers, REDIS_URL)
        self.one = ChorusServer(database_url, data_dir, **env)
        self.two = ChorusServer(database_url, data_dir, **env)
        self.redis = redis.Redis.from_url(REDIS_URL)
        self.apis: tuple[Api, Api]
        """Clients of ``one`` and ``two``, once started."""

    def head(self, playlist_id: str) -> int | None:
        value = self.redis.get(head_key(playlist_id))
        return None if value is None else int(value)

    def wait_for_head(self, playlist_id: str, version: int) -> None:
        deadline = time.monotonic() + patience(WAIT_S)
        while (self.head(playlist_id) or -1) < version:
            assert time.monotonic() < deadline, f"head of {playlist_id} never reached {version}"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def pair(
    postgres_template: str, tansu: TansuServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    from tests.servers import create_database, drop_database, postgres_url

    name = create_database()
    running = Pair(postgres_url(name), tmp_path_factory.mktemp("pair"), tansu.bootstrap_servers)
    running.one.start()
    running.two.start()
    running.apis = (Api(running.one), Api(running.two))
    yield running
    for api in running.apis:
        api.http.close()
    running.two.stop()
    running.one.stop()
    running.redis.close()
    drop_database(name)


def stored_version(pair: Pair, playlist_id: str) -> int:
    doc = pair.redis.get(snapshot_key(playlist_id))
    return -1 if doc is None else int(json.loads(doc)["version"])


def snapshot_hits(server: ChorusServer) -> float:
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith('chorus_snapshot_reads_total{result="hit"}'):
            return float(line.split()[-1])
    return 0.0


def page(api: Api, pid: str, user: str = "bob") -> Any:
    return post(api, PAGE, user, variables={"id": pid}).json()["data"]["playlist"]


def test_a_snapshot_written_by_a_read_on_one_process_is_served_by_the_other(pair: Pair) -> None:
    one, two = pair.apis
    pid = create_playlist(one, visibility="PUBLIC")
    add(one, pid, [track(n) for n in range(1, 6)], 0)
    raw = ids.playlist_id(pid)
    # The mutations' payloads read the playlist too: a snapshot of an older
    # version may be there, never one of the current version.
    assert stored_version(pair, raw) < 1
    first = page(two, pid)  # a miss: read from SQL, the snapshot is filled behind it
    assert first["version"] == 1
    deadline = time.monotonic() + patience(WAIT_S)
    while stored_version(pair, raw) < 1:
        assert time.monotonic() < deadline, "the read never filled the snapshot"
        time.sleep(0.05)
    hits = snapshot_hits(pair.one)
    assert page(one, pid) == first
    assert snapshot_hits(pair.one) == hits + 1


def test_an_edit_on_one_process_ends_the_others_cached_answer(pair: Pair) -> None:
    one, two = pair.apis
    pid = create_playlist(one, visibility="PUBLIC")
    add(one, pid, [track(1)], 0)
    before = cache_counts(pair.two)
    assert page(two, pid) == page(two, pid)
    assert cache_counts(pair.two).get("hit", 0) == before.get("hit", 0) + 1
    done = add(one, pid, [track(2)], 1)
    pair.wait_for_head(ids.playlist_id(pid), done["version"])
    seen = page(two, pid)
    assert seen["version"] == done["version"]
    assert seen["entries"]["totalCount"] == 2


def test_a_member_removed_on_one_process_loses_the_others_cached_answer(pair: Pair) -> None:
    one, two = pair.apis
    pid = create_playlist(one, visibility="PRIVATE")
    committed(
        mutate(one, "setMemberRole", playlistId=pid, baseVersion=0, userId="bob", role="VIEWER")
    )
    assert page(two, pid) is not None
    assert page(two, pid) is not None
    removed = committed(mutate(one, "removeMember", playlistId=pid, baseVersion=1, userId="bob"))
    pair.wait_for_head(ids.playlist_id(pid), removed["version"])
    assert page(two, pid) is None


def test_a_playlist_made_private_on_one_process_is_not_served_by_the_other(pair: Pair) -> None:
    one, two = pair.apis
    pid = create_playlist(one, visibility="PUBLIC")
    for _ in range(2):  # the second is a hit
        assert page(two, pid, "carol") is not None
    hidden = committed(
        mutate(one, "updatePlaylist", playlistId=pid, baseVersion=0, visibility="PRIVATE")
    )
    pair.wait_for_head(ids.playlist_id(pid), hidden["version"])
    assert page(two, pid, "carol") is None


# --- chorus serve --workers N ------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def test_serve_workers_share_the_port_and_each_sees_the_others_commits(
    postgres_template: str, tansu: TansuServer, tmp_path: Path
) -> None:
    from tests.servers import create_database, drop_database, postgres_url

    name = create_database()
    env = full_profile_env(tansu.bootstrap_servers, REDIS_URL)
    server = ChorusServer(postgres_url(name), tmp_path, command=("serve", "--workers", "3"), **env)
    server.start()
    try:
        assert server.process is not None
        workers = children(server.process.pid)
        assert len(workers) == 3
        api = Api(server)
        pid = create_playlist(api, visibility="PUBLIC")
        done = add(api, pid, [track(1)], 0)
        pair_redis = redis.Redis.from_url(REDIS_URL)
        deadline = time.monotonic() + patience(WAIT_S)
        while int(pair_redis.get(head_key(ids.playlist_id(pid))) or -1) < done["version"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pair_redis.close()
        for _ in range(30):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client(timeout=30) as fresh:
                body = fresh.post(
                    server.url,
                    json={"query": PAGE, "variables": {"id": pid}},
                    headers={"Authorization": f"Bearer {api.token('bob')}"},
                ).json()
            assert body["data"]["playlist"]["version"] == done["version"]
        api.http.close()
    finally:
        server.stop()
        drop_database(name)
    assert all(not Path(f"/proc/{w}").exists() for w in workers)
