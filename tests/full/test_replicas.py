"""Read replicas under the rule: never an answer older than the API knows (docs/deploying.md).

Each test makes a real streaming replica of the machine's PostgreSQL with
``scripts/replica`` (``pg_basebackup -R``, a port and directory of its own),
serves a migrated database of the primary with ``CHORUS_DATABASE_REPLICA_URLS``
pointing at the same database on the replica, and checks what clients see
while the replica is healthy, has its replay paused, and is stopped. The
response cache is off: every query reads the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from chorus.db import pages
from chorus.db import replicas as db_replicas
from chorus.db.engine import Database, postgres_engine
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Visibility
from chorus.resilience.breaker import CircuitBreaker
from chorus.resolvers.read_source import ReadSource
from chorus.resolvers.services import Services
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.full.conftest import REDIS_URL
from tests.full.helpers import full_profile_env
from tests.integration.test_read_source import Catalog
from tests.servers import ChorusServer, TansuServer, free_port

SCRIPT = Path(__file__).parents[2] / "scripts" / "replica"

READ = """
query($id: ID!, $min: Int) {
  playlist(id: $id, minVersion: $min) {
    version
    entries(first: 50) { totalCount version edges { node { media { id } } } }
  }
}
"""
LATER_PAGE = """
query($id: ID!, $after: String) {
  playlist(id: $id) { version entries(first: 1, after: $after) { totalCount version } }
}
"""


@dataclass
class Replica:
    port: int
    directory: Path

    def run(self, command: str) -> None:
        subprocess.run(
            [str(SCRIPT), command, "--port", str(self.port), "--dir", str(self.directory)],
            check=True,
            capture_output=True,
            timeout=patience(120),
        )

    def url(self, database_url: str) -> str:
        """``database_url`` (a database of the primary) as served by this replica."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    def sql(self, database_url: str, statement: str) -> Any:
        """One statement's value on the replica's copy of ``database_url``."""
        dsn = make_url(self.url(database_url)).set(drivername="postgresql")

        async def run() -> Any:
            conn = await asyncpg.connect(dsn.render_as_string(hide_password=False))
            try:
                return await conn.fetchval(statement)
            finally:
                await conn.close()

        return asyncio.run(run())


@pytest.fixture(scope="module")
def replica() -> Iterator[Replica]:
    """A streaming replica of the machine's PostgreSQL, for this module alone (a test that
    pauses or stops it resumes or restarts it)."""
    port = free_port()
    made = Replica(port, Path(f"/tmp/chorus-test-replica-{port}"))
    made.run("start")
    yield made
    made.run("remove")


@pytest.fixture
def server(pg_url: str, replica: Replica, tmp_path: Path) -> Iterator[ChorusServer]:
    """``chorus serve`` (PostgreSQL, embedded profile) reading through the replica."""
    served = ChorusServer(
        pg_url,
        tmp_path,
        CHORUS_DATABASE_REPLICA_URLS=replica.url(pg_url),
        CHORUS_DATABASE_REPLICA_BREAKER_S="0.5",
        CHORUS_RESPONSE_CACHE="false",
    )
    served.start()
    yield served
    served.stop()


@pytest.fixture
def api(server: ChorusServer) -> Iterator[Api]:
    client = Api(server)
    yield client
    client.http.close()


def metric(server: ChorusServer, name: str, label: str) -> float:
    """The value of ``name{label}`` on ``/metrics`` (0 when absent)."""
    for line in httpx.get(f"{server.base_url}/metrics", timeout=5).text.splitlines():
        if line.startswith(f"{name}{{{label}}}"):
            return float(line.split()[1])
    return 0.0


def replica_reads(server: ChorusServer) -> float:
    return metric(server, "chorus_db_reads_total", 'database="replica"')


def read(api: Api, playlist_id: str, user: str = "alice", **args: Any) -> tuple[int, int, int]:
    """``(header version, page version, totalCount)`` of one query."""
    found = api.data(READ, user, id=playlist_id, **args)["playlist"]
    entries = found["entries"]
    assert len(entries["edges"]) == entries["totalCount"]
    return found["version"], entries["version"], entries["totalCount"]


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + patience(20)
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def replica_answers(
    api: Api, server: ChorusServer, playlist_id: str, expected: tuple[int, int, int], what: str
) -> None:
    """Wait until a read through ``api`` is ``expected`` and the replica served one more read."""
    before = replica_reads(server)
    until(lambda: read(api, playlist_id) == expected and replica_reads(server) > before, what)


def one_version_on_the_replica(api: Api, server: ChorusServer) -> tuple[str, int]:
    """A new public playlist at its first version, once the replica served it."""
    playlist_id = create_playlist(api, visibility="PUBLIC")
    head = add(api, playlist_id, [track(1)], 0)["version"]
    replica_answers(api, server, playlist_id, (head, head, 1), "the replica never served a read")
    return playlist_id, head


@contextlib.contextmanager
def replay_paused(replica: Replica, pg_url: str) -> Iterator[None]:
    """The replica's WAL replay paused within, resumed afterwards."""
    replica.sql(pg_url, "SELECT pg_wal_replay_pause()")
    try:
        until(
            lambda: replica.sql(pg_url, "SELECT pg_get_wal_replay_pause_state() = 'paused'"),
            "replay did not pause",
        )
        yield
    finally:
        replica.sql(pg_url, "SELECT pg_wal_replay_resume()")


def test_a_client_reads_its_own_writes_and_the_replica_serves_the_rest(
    api: Api, server: ChorusServer
) -> None:
    playlist_id = create_playlist(api, visibility="PUBLIC")
    head = 0
    for n in range(1, 21):
        head = add(api, playlist_id, [track(n)], head)["version"]
        # Read at once, by the writer and by someone else: never older than the write.
        for user in ("alice", "bob"):
            assert read(api, playlist_id, user) == (head, head, n)
    # Once replay caught up, the replica answers (the rule is not "always the primary").
    replica_answers(api, server, playlist_id, (head, head, 20), "the replica never served a read")
    # A later page is a read of its own: also the replica's, also at the head.
    found = api.data(LATER_PAGE, "bob", id=playlist_id, after=None)["playlist"]
    assert found["entries"]["version"] == head


def test_a_paused_replica_changes_nothing_a_client_sees(
    api: Api, server: ChorusServer, replica: Replica, pg_url: str
) -> None:
    playlist_id, head = one_version_on_the_replica(api, server)
    with replay_paused(replica, pg_url):
        stale_before = metric(server, "chorus_db_replica_reads_discarded_total", 'reason="stale"')
        for n in range(2, 12):
            head = add(api, playlist_id, [track(n)], head)["version"]
            for user in ("alice", "bob"):
                assert read(api, playlist_id, user) == (head, head, n)
            # A client holding a version (minVersion) is answered at it or newer too.
            assert read(api, playlist_id, "bob", min=head)[0] == head
        # The replica was asked and its older answers thrown away, not served.
        assert metric(server, "chorus_db_replica_reads_discarded_total", 'reason="stale"') > (
            stale_before
        )
        ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
        assert ready.status_code == 200
        check = ready.json()["checks"][f"replica 127.0.0.1:{replica.port}"]
        assert check.startswith("ok: lag "), check
        assert not check.endswith(" 0 bytes"), check  # the WAL it has not replayed
    # Replay resumed: the replica catches up and answers again, at the head.
    again = "the replica did not answer again after replay resumed"
    replica_answers(api, server, playlist_id, (head, head, 11), again)


def test_a_stopped_replica_leaves_reads_to_the_primary(
    api: Api, server: ChorusServer, replica: Replica
) -> None:
    playlist_id, head = one_version_on_the_replica(api, server)
    replica.run("stop")
    try:
        for n in range(2, 8):
            head = add(api, playlist_id, [track(n)], head)["version"]
            assert read(api, playlist_id, "bob") == (head, head, n)
        failed = metric(server, "chorus_db_replica_reads_discarded_total", 'reason="unavailable"')
        assert failed > 0
        ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text  # a replica is not required
        assert ready.json()["checks"][f"replica 127.0.0.1:{replica.port}"].startswith("down")
        label = f'replica="127.0.0.1:{replica.port}"'
        assert metric(server, "chorus_db_replica_lag_seconds", label) == -1
    finally:
        replica.run("start")
    # Back: after its breaker's half a second, the replica answers again, at the head.
    again = "the replica did not answer again after it restarted"
    replica_answers(api, server, playlist_id, (head, head, 7), again)


def test_across_api_processes_redis_heads_keep_a_paused_replica_out(
    pg_url: str, replica: Replica, tansu: TansuServer, tmp_path: Path
) -> None:
    # Full profile: edits through one process, reads through another that never
    # committed to the playlist. Only Redis's heads tell the reader of the new versions.
    env = {
        **full_profile_env(tansu.bootstrap_servers, REDIS_URL),
        "CHORUS_DATABASE_REPLICA_URLS": replica.url(pg_url),
        "CHORUS_RESPONSE_CACHE": "false",
    }
    writer = ChorusServer(pg_url, tmp_path, ("serve", "--with-workers"), **env)
    reader = ChorusServer(pg_url, tmp_path, **env)
    writer.start()
    reader.start()
    writing, reading = Api(writer), Api(reader)
    try:
        # PRIVATE: no snapshot answers, every read of it is SQL.
        playlist_id = create_playlist(writing, visibility="PRIVATE")
        head = add(writing, playlist_id, [track(1)], 0)["version"]
        never = "the reader's replica never served a read"
        replica_answers(reading, reader, playlist_id, (head, head, 1), never)
        with replay_paused(replica, pg_url):
            shown = head
            for n in range(2, 7):
                head = add(writing, playlist_id, [track(n)], head)["version"]
                # Without a minVersion: never older than what this reader showed, and
                # the head once Redis has it (raised in the background after the commit).

                def at_head(at: int = head, floor: int = shown) -> bool:
                    version = read(reading, playlist_id)[0]
                    assert version >= floor
                    return version == at

                until(at_head, "the reader kept answering below the head")
                shown = head
                # The writer's version as minVersion: at it, through the other process.
                assert read(reading, playlist_id, min=head) == (head, head, n)
    finally:
        writing.http.close()
        reading.http.close()
        reader.stop()
        writer.stop()


async def test_min_version_keeps_a_stale_replica_out_of_a_header_read(
    pg_url: str, replica: Replica
) -> None:
    # A process that learned nothing of a commit (another process made it; Redis's
    # heads late or absent) is asked for the header alone with the client's
    # minVersion: the DataLoader's batched read, which knows no minVersion itself.
    writer = Database(pg_url)
    store = PlaylistStore(writer)
    created = await store.create(CreatePlaylist("c", "Mix", "", Visibility.PRIVATE), "alice")
    pid = created.outcome.playlist_id

    def replayed() -> bool:
        try:
            found = replica.sql(pg_url, f"SELECT count(*) FROM playlist WHERE id = '{pid}'")
        except asyncpg.PostgresError:  # the database itself is not replayed yet
            return False
        return bool(found == 1)

    await asyncio.to_thread(until, replayed, "the replica never had the playlist")
    engine = postgres_engine(replica.url(pg_url), pool_size=2)
    member = db_replicas.Replica(engine, CircuitBreaker(failures=1))
    reader = Database(pg_url, replicas=db_replicas.Replicas([member]))
    try:
        # The reader knows the playlist at its first version (a read teaches the floor).
        assert (await pages.playlists_by_id(reader, [pid]))[pid].version == 0
        await asyncio.to_thread(replica.sql, pg_url, "SELECT pg_wal_replay_pause()")
        try:
            paused = "SELECT pg_get_wal_replay_pause_state() = 'paused'"
            await asyncio.to_thread(until, lambda: replica.sql(pg_url, paused), "no pause")
            added = await store.execute(AddEntries(pid, "a", 0, ("m1",)), "alice")
            head = added.outcome.version
            services = Services(reader, PlaylistStore(reader), Catalog(), DEFAULT_LIMITS)
            header = await ReadSource(services, "alice").playlist(pid, head)
            assert header is not None
            assert header.version == head
        finally:
            await asyncio.to_thread(replica.sql, pg_url, "SELECT pg_wal_replay_resume()")
    finally:
        await reader.dispose()
        await writer.dispose()
