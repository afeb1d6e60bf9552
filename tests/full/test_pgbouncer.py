"""Chorus behind PgBouncer 1.18 in transaction pooling (``CHORUS_DATABASE_POOLER=transaction``).

``scripts/pgbouncer`` starts a PgBouncer of this module's own in front of the
machine's PostgreSQL with few server connections per database, so that
Chorus's pooled connections share them transaction by transaction. Under
concurrent writes and reads every answer must be right: a prepared statement
kept across transactions (asyncpg's cache, SQLAlchemy's numbered names) would
be found missing or taken on another server connection. ``LISTEN`` and
migrations go to ``CHORUS_DATABASE_DIRECT_URL``, past the pooler.
"""

from __future__ import annotations

import asyncio
import csv
import io
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from chorus.db.watch import LISTEN_APPLICATION_NAME
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.servers import ChorusServer, free_port

SCRIPT = Path(__file__).parents[2] / "scripts" / "pgbouncer"

READ = """
query($id: ID!) {
  playlist(id: $id) { version entries(first: 50) { totalCount version edges { node { id } } } }
}
"""


@pytest.fixture(scope="module")
def pgbouncer_port() -> Iterator[int]:
    port = free_port()
    where = ["--port", str(port), "--dir", f"/tmp/chorus-test-pgbouncer-{port}"]

    def run(command: str) -> None:
        subprocess.run(
            [str(SCRIPT), command, *where], check=True, capture_output=True, timeout=patience(300)
        )

    run("start")
    yield port
    run("remove")


def _through(url: str, port: int) -> str:
    return make_url(url).set(port=port).render_as_string(hide_password=False)


@pytest.fixture
def server(pg_url: str, pgbouncer_port: int, tmp_path: Path) -> Iterator[ChorusServer]:
    served = ChorusServer(
        _through(pg_url, pgbouncer_port),
        tmp_path,
        CHORUS_DATABASE_POOLER="transaction",
        CHORUS_DATABASE_DIRECT_URL=pg_url,
        CHORUS_RESPONSE_CACHE="false",
    )
    served.start()
    yield served
    served.stop()


_PSQL = ("psql", "-h", "127.0.0.1", "-U", "postgres")


def _console(port: int, command: str) -> list[dict[str, str]]:
    """Rows of a PgBouncer admin console command (it speaks the simple query protocol: psql)."""
    out = subprocess.run(
        [*_PSQL, "-p", str(port), "-d", "pgbouncer", "-X", "--csv", "-c", command],
        check=True,
        capture_output=True,
        text=True,
        timeout=patience(30),
    ).stdout
    return list(csv.DictReader(io.StringIO(out)))


def test_concurrent_writes_and_reads_through_transaction_pooling(
    server: ChorusServer, pgbouncer_port: int, pg_url: str
) -> None:
    database = make_url(pg_url).database or ""
    api = Api(server)
    try:
        playlists = [create_playlist(api, visibility="PUBLIC") for _ in range(4)]

        def edit_and_read(playlist_id: str) -> list[tuple[int, int, int]]:
            seen, head = [], 0
            for n in range(1, 16):
                head = add(api, playlist_id, [track(n)], head)["version"]
                found = api.data(READ, "bob", id=playlist_id)["playlist"]
                entries = found["entries"]
                assert len(entries["edges"]) == entries["totalCount"]
                seen.append(
                    (found["version"] - head, entries["version"] - head, entries["totalCount"] - n)
                )
            return seen

        with ThreadPoolExecutor(len(playlists)) as pool:
            results = list(pool.map(edit_and_read, playlists))
        # Every read saw its own write: the head, with every entry.
        assert all(r == (0, 0, 0) for seen in results for r in seen)
        # And the traffic did go through PgBouncer.
        stats = {row["database"]: row for row in _console(pgbouncer_port, "SHOW STATS")}
        assert int(stats[database]["total_xact_count"]) >= 4 * 15 * 2
        ready = httpx.get(f"{server.base_url}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
    finally:
        api.http.close()


def test_listen_goes_past_the_pooler(
    server: ChorusServer, pgbouncer_port: int, pg_url: str
) -> None:
    # The relay's LISTEN backend is not one of PgBouncer's server connections:
    # its client port is none of theirs.
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)

    async def listening_ports() -> list[int]:
        conn = await asyncpg.connect(dsn)
        try:
            # By name: its last query is LISTEN or its periodic SELECT 1.
            rows = await conn.fetch(
                "SELECT client_port FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = $1",
                LISTEN_APPLICATION_NAME,
            )
            return [row["client_port"] for row in rows]
        finally:
            await conn.close()

    ports = asyncio.run(listening_ports())
    assert len(ports) == 1
    pooled = {int(row["local_port"]) for row in _console(pgbouncer_port, "SHOW SERVERS")}
    assert pooled  # the check below means something only if PgBouncer holds connections
    assert ports[0] not in pooled
