"""The full-profile deployment of ``bench/ws_fanout.py --profile full``, started and torn down.

:class:`FullDeployment` brings up, on 127.0.0.1: a Tansu Kafka broker
(``tests/servers.py``'s :class:`TansuServer`, memory only), a new PostgreSQL
database on the machine's server (``tests/servers.py``'s
:func:`create_database`, migrated to head with ``chorus db upgrade``), an
empty database number of the machine's Redis, and the two workers live
delivery needs (``chorus relay``: outbox → Kafka; ``chorus fanout``: Kafka →
Redis pub/sub; the cache projector and the feed consumer serve reads, not
``playlistEvents``). :meth:`FullDeployment.api` then starts ``chorus serve``
processes on distinct ports over them, one set per subscriber count.

Everything goes at the end, also on failure: the processes, the database,
and in Redis the keys of the playlists the bench reported with
:meth:`FullDeployment.forget` (nothing is flushed).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import redis

from chorus.caches.keys import playlist_key
from chorus.events.wire import events_channel
from chorus.graphql.schema.common import ids

if TYPE_CHECKING:
    from tests.servers import ChorusServer

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests/servers.py: one way to start the broker and Chorus
    sys.path.insert(0, str(ROOT))

from tests.servers import (  # noqa: E402
    ChorusServer,
    TansuServer,
    create_database,
    drop_database,
    postgres_url,
)

REDIS_HOST = "redis://127.0.0.1:6379"
LIVE_TIMEOUT_S = 60.0
"""The longest wait for the first event through relay → Kafka → fanout → Redis."""


def empty_redis_db() -> int:
    """The highest-numbered database of the machine's Redis that holds no key.

    Raises:
        RuntimeError: every database but 0 holds keys (the bench writes to none of them).
    """
    client = redis.Redis.from_url(f"{REDIS_HOST}/0")
    try:
        count = int(str(client.config_get("databases")["databases"]))
        used = {int(name.removeprefix("db")) for name in client.info("keyspace")}
    finally:
        client.close()
    for number in range(count - 1, 0, -1):
        if number not in used:
            return number
    raise RuntimeError(f"every Redis database 1..{count - 1} holds keys; none is free")


class FullDeployment:
    """PostgreSQL, Redis, Kafka and the workers of one full-profile bench run.

    Args:
        base: a directory for the logs and data directories (it outlives the run).
        secret: the JWT secret every process shares (the clients mint tokens with it).
    """

    def __init__(self, base: Path, secret: str) -> None:
        self.base = base
        self.secret = secret
        self.database: str | None = None
        self.playlists: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> FullDeployment:
        try:
            self._start()
        except BaseException:
            self._show_logs()
            self._stack.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if error is not None:
            self._show_logs()
        self._stack.close()

    def _show_logs(self) -> None:
        """The end of every log, for a run that failed (the directory goes with the run)."""
        for log in sorted(self.base.glob("**/*.log")):
            tail = log.read_text(errors="replace")[-1500:]
            print(f"--- {log.relative_to(self.base)}\n{tail}", file=sys.stderr)

    def _start(self) -> None:
        started = time.monotonic()
        tansu = TansuServer(self.base / "tansu.log")
        self._stack.callback(tansu.stop)
        tansu.start()
        self.redis_url = f"{REDIS_HOST}/{empty_redis_db()}"
        self._stack.callback(self._forget_keys)
        self.database = create_database()
        self._stack.callback(drop_database, self.database)
        self.database_url = postgres_url(self.database)
        self.env = {
            "CHORUS_KAFKA_BOOTSTRAP_SERVERS": tansu.bootstrap_servers,
            "CHORUS_KAFKA_IDEMPOTENT_PRODUCER": "false",  # Tansu refuses InitProducerId
            "CHORUS_REDIS_URL": self.redis_url,
            "CHORUS_JWT_SECRET": self.secret,
        }
        self._migrate()
        for worker in ("relay", "fanout"):
            self._start_server(ChorusServer(*self._where(worker), command=(worker,), **self.env))
        print(
            f"full profile up in {time.monotonic() - started:.1f}s: Kafka "
            f"{tansu.bootstrap_servers}, database {self.database}, {self.redis_url}",
            file=sys.stderr,
            flush=True,
        )

    def _where(self, name: str) -> tuple[str, Path]:
        data = self.base / name
        data.mkdir(exist_ok=True)
        return self.database_url, data

    def _migrate(self) -> None:
        probe = ChorusServer(*self._where("migrate"), **self.env)
        subprocess.run(
            [sys.executable, "-m", "chorus.cli", "db", "upgrade"],
            env=probe.env,
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def _start_server(self, server: ChorusServer) -> ChorusServer:
        self._stack.callback(server.stop)
        server.start(timeout_s=60)
        return server

    @contextlib.contextmanager
    def api(
        self, subscribers: int, processes: int, role: str = "all"
    ) -> Iterator[list[ChorusServer]]:
        """``processes`` running ``chorus serve --role role``, each with room for its share
        of sockets (``gateway``: subscriptions only, docs/deploying.md)."""
        per_process = -(-subscribers // processes)
        with contextlib.ExitStack() as stack:
            servers = []
            for number in range(processes):
                server = ChorusServer(
                    *self._where(f"{role}-{subscribers}-{number}"),
                    CHORUS_MAX_CONNECTIONS=str(per_process + 200),
                    CHORUS_SERVE_ROLE=role,
                    **self.env,
                )
                stack.callback(server.stop)
                server.start(timeout_s=60)
                servers.append(server)
            yield servers

    def wait_live(self, playlist: str, commit: Callable[[], None]) -> float:
        """Run ``commit`` and wait for its event on the Redis channel of ``playlist``; seconds.

        ``playlist`` is the playlist's GraphQL ID.

        The fanout joins its consumer group a few seconds after it starts; a
        sample taken before that would time the join, not the delivery.

        Raises:
            TimeoutError: nothing came within :data:`LIVE_TIMEOUT_S`.
        """
        client = redis.Redis.from_url(self.redis_url)
        pubsub = client.pubsub()
        try:
            pubsub.subscribe(events_channel(ids.playlist_id(playlist)))
            start = time.monotonic()
            commit()
            while time.monotonic() - start < LIVE_TIMEOUT_S:
                message = pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None:
                    return time.monotonic() - start
            raise TimeoutError(f"no event through the fanout within {LIVE_TIMEOUT_S:.0f}s")
        finally:
            pubsub.close()
            client.close()

    def forget(self, playlist: str) -> None:
        """Delete the Redis keys of ``playlist`` (its GraphQL ID) when the deployment stops."""
        self.playlists.append(ids.playlist_id(playlist))

    def _forget_keys(self) -> None:
        client = redis.Redis.from_url(self.redis_url)
        try:
            for playlist_id in self.playlists:
                keys = list(client.scan_iter(match=playlist_key(playlist_id, "*")))
                if keys:
                    client.delete(*keys)
        finally:
            client.close()
