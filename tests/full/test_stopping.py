"""Processes stop when told to: at once (or after serve's drain), with exit status 0.

The full profile's API process keeps background tasks (the Redis pub/sub
reader, head raises) that its shutdown must end; a task that drops a
cancellation used to make ``chorus serve`` hang for ever on a taken port.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, track
from tests.e2e.test_subscriptions import open_socket, receive, subscribe
from tests.full.conftest import REDIS_URL
from tests.full.helpers import full_profile_env
from tests.servers import TEST_SECRET, ChorusServer, TansuServer, free_port
from tests.switches import child_environ


def _env(pg_url: str, tansu: TansuServer) -> dict[str, str]:
    return {
        **child_environ(),
        **full_profile_env(tansu.bootstrap_servers, REDIS_URL),
        "CHORUS_DATABASE_URL": pg_url,
        "CHORUS_JWT_SECRET": TEST_SECRET,
    }


@pytest.mark.parametrize("command", [("serve",), ("catalog", "serve")])
def test_a_server_on_a_taken_port_exits_2_at_once(
    pg_url: str, tansu: TansuServer, command: tuple[str, ...]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "chorus.cli", *command, "--port", str(port)],
            env=_env(pg_url, tansu),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"chorus: cannot listen on 127.0.0.1:{port}: ")
    assert len(done.stderr.strip().splitlines()) == 1


# uvicorn on uvloop, as ``chorus serve`` runs it, failing to bind after the
# application started: its lifespan shuts down at once, while the Redis
# reader is still connecting (the moment a cancellation was dropped).
_SHUT_DOWN_AT_ONCE = textwrap.dedent(
    """
    import socket, sys
    import uvicorn
    from chorus.app import create_app

    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    config = uvicorn.Config(create_app(), host="127.0.0.1", port=port, loop="uvloop")
    uvicorn.Server(config).run()
    """
)


def test_the_full_profile_app_shuts_down_right_after_starting(
    pg_url: str, tansu: TansuServer
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SHUT_DOWN_AT_ONCE],
        env=_env(pg_url, tansu),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Application shutdown complete" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_exits_0_on_a_stop_signal(
    pg_url: str, tansu: TansuServer, tmp_path: Path, signum: signal.Signals
) -> None:
    server = ChorusServer(pg_url, tmp_path, **full_profile_env(tansu.bootstrap_servers, REDIS_URL))
    server.start()
    try:
        assert server.process is not None
        server.process.send_signal(signum)
        assert server.process.wait(timeout=20) == 0, server.log.read_text()[-2000:]
    finally:
        server.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize(
    "command", [("serve",), ("relay",), ("project-cache",), ("catalog", "serve")]
)
def test_a_process_waiting_for_its_database_exits_0_on_a_stop_signal(
    tansu: TansuServer, tmp_path: Path, command: tuple[str, ...], signum: signal.Signals
) -> None:
    nothing_listens = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/chorus"
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "chorus.cli", *command, "--port", str(free_port())],
            env=_env(nothing_listens, tansu),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + patience(30)
        while "database not reachable" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "it never said it was waiting"
            time.sleep(0.05)
        process.send_signal(signum)
        assert process.wait(timeout=20) == 0, log.read_text()[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_serve_with_workers_delivers_while_draining_then_exits_0(
    pg_url: str, tansu: TansuServer, tmp_path: Path
) -> None:
    """The full profile's drain: workers and live delivery go on until the sockets close."""
    env = {**full_profile_env(tansu.bootstrap_servers, REDIS_URL), "CHORUS_DRAIN_S": "5"}
    server = ChorusServer(pg_url, tmp_path, ("serve", "--with-workers"), log_level="info", **env)
    server.start()
    api = Api(server)
    try:
        playlist_id = create_playlist(api)
        ws = await open_socket(server, api.token("alice"))
        await subscribe(ws, "1", playlist_id, 0)
        await asyncio.to_thread(add, api, playlist_id, [track(1)], 0)
        event = await receive(ws)  # live delivery works (the consumer groups joined)
        assert event["payload"]["data"]["playlistEvents"]["version"] == 1, event
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        # Committed while draining: relay → Kafka → fanout → Redis → this socket.
        await asyncio.to_thread(add, api, playlist_id, [track(2)], 1)
        event = await receive(ws)
        assert event["payload"]["data"]["playlistEvents"]["version"] == 2, event
        await asyncio.wait_for(ws.wait_closed(), 15)
        assert ws.close_code == 1012
        status = await asyncio.to_thread(server.process.wait, 30)
        log = server.log.read_text()
        assert status == 0, log[-2000:]
        assert "Application shutdown complete" in log
        assert "Traceback" not in log, log[-3000:]
    finally:
        api.http.close()
        server.stop()
