"""Start order does not matter: processes wait for a database that is not up yet.

A database that is up but wrong (no such database) is a clear, immediate error.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import create_playlist
from tests.servers import ChorusServer, PostgresCluster
from tests.switches import child_environ


def _start_when_waited_for(server: ChorusServer, cluster: PostgresCluster) -> None:
    deadline = time.monotonic() + patience(30)
    while not (server.log.exists() and "database not reachable" in server.log.read_text()):
        assert time.monotonic() < deadline, "the server never said it was waiting"
        time.sleep(0.05)
    cluster.start()


def test_serve_waits_for_postgres_and_starts_when_it_comes_up(tmp_path: Path) -> None:
    cluster = PostgresCluster()  # created, not started
    server = ChorusServer(cluster.url, tmp_path)
    try:
        # Start PostgreSQL once the server says it is waiting for it.
        waiting = threading.Thread(target=_start_when_waited_for, args=(server, cluster))
        waiting.start()
        server.start(timeout_s=60)
        waiting.join()
        api = Api(server)
        assert create_playlist(api)
        api.http.close()
    finally:
        server.stop()
        cluster.remove()


def test_db_upgrade_of_a_missing_database_exits_2_with_one_line(postgres_template: str) -> None:
    from tests.servers import postgres_url

    env = child_environ()
    env["CHORUS_DATABASE_URL"] = postgres_url(f"missing_{int(time.time())}")
    done = subprocess.run(
        [sys.executable, "-m", "chorus.cli", "db", "upgrade"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("chorus: cannot migrate the database: database ")
    assert "does not exist" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_processes_started_together_on_a_new_database_all_migrate_it() -> None:
    from tests.servers import create_database, drop_database, postgres_url

    name = create_database()  # empty: the first upgrade creates every table
    env = child_environ()
    env["CHORUS_DATABASE_URL"] = postgres_url(name)
    try:
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "chorus.cli", "db", "upgrade"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(8)
        ]
        outcomes = [(run.communicate(timeout=120)[1], run.returncode) for run in runs]
    finally:
        drop_database(name)
    assert [code for _, code in outcomes] == [0] * 8, outcomes
