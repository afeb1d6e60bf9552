"""Real servers for the tests: PostgreSQL databases, and Chorus itself under uvicorn.

PostgreSQL and Redis are the machine's (DESIGN §1); this module only creates
and drops databases on it. :class:`ChorusServer` runs ``chorus serve`` in a
subprocess on a free port, exactly as a user would, and stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from tests.conftest import POSTGRES_ADMIN_URL


def postgres_url(database: str, driver: str = "postgresql+asyncpg") -> str:
    url = make_url(POSTGRES_ADMIN_URL).set(drivername=driver, database=database)
    return url.render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    admin_db = make_url(POSTGRES_ADMIN_URL).database or "postgres"
    conn = await asyncpg.connect(postgres_url(admin_db, "postgresql"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database(template: str | None = None) -> str:
    """A new, empty database on the server (cloned from ``template``); its name."""
    name = f"chorus_test_{uuid.uuid4().hex[:12]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    asyncio.run(_admin(f'CREATE DATABASE "{name}"{clause}'))
    return name


def drop_database(name: str) -> None:
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TEST_SECRET = "test-secret-" + "x" * 40


class ChorusServer:
    """``chorus serve`` in a subprocess; ``url`` is its GraphQL endpoint."""

    def __init__(self, database_url: str, data_dir: Path, **env: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base_url}/graphql"
        self.database_url = database_url
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")},
            "CHORUS_DATABASE_URL": database_url,
            "CHORUS_DATA_DIR": str(data_dir),
            "CHORUS_JWT_SECRET": TEST_SECRET,
            "CHORUS_PORT": str(self.port),
            **env,
        }
        self.log = data_dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chorus.cli", "serve", "--log-level", "warning"],
            env=self.env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chorus serve exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"chorus serve did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if hasattr(self, "_log_file"):
            self._log_file.close()
