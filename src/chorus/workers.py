"""The full profile's workers: outbox relay, fanout and cache projector.

Each runs alone (``chorus relay``, ``chorus fanout``, ``chorus project-cache``)
or, for a single node, inside the API process (``chorus serve --with-workers``).
Start order does not matter: every worker waits for the servers it needs,
retrying with backoff, and picks up where its consumer group (or the outbox)
left off. Several copies of each may run; relays split the outbox by playlist
and the consumers split the topic's partitions.

A worker process run with ``--port`` answers ``/healthz`` (its event loop
answers), ``/readyz`` (the servers its workers need answer, naming the one
that does not) and ``/metrics`` on that port, like an API process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import redis.asyncio as redis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from chorus import health
from chorus.db.engine import Database
from chorus.events.fanout import Fanout
from chorus.events.kafka import KafkaConfig, KafkaPublisher
from chorus.events.projector import CacheProjector
from chorus.events.relay import OutboxRelay
from chorus.resilience.tasks import cancel_and_wait
from chorus.settings import Settings

log = logging.getLogger("chorus.workers")

WORKERS = ("relay", "fanout", "project-cache")
"""The worker names, as the CLI spells them."""


def kafka_config(settings: Settings) -> KafkaConfig:
    """The Kafka settings of the full profile.

    Raises:
        ValueError: ``CHORUS_KAFKA_BOOTSTRAP_SERVERS`` is not set.
    """
    if settings.kafka_bootstrap_servers is None:
        raise ValueError(
            "the workers need the full profile: set CHORUS_KAFKA_BOOTSTRAP_SERVERS "
            "and CHORUS_REDIS_URL"
        )
    return KafkaConfig(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        topic=settings.kafka_topic,
        partitions=settings.kafka_topic_partitions,
        idempotent=settings.kafka_idempotent_producer,
    )


@dataclass
class Workers:
    """Running workers.

    Attributes:
        relay: the outbox relay, when it is one of them.
        tasks: one task per worker; each retries every failure, so one that
            ends has crashed.
        checks: what readiness means for these workers: the database (relay,
            projector), Kafka (all), Redis (fanout, projector).
    """

    relay: OutboxRelay | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    checks: list[health.Check] = field(default_factory=list)


@asynccontextmanager
async def running(settings: Settings, names: Sequence[str], db: Database) -> AsyncIterator[Workers]:
    """Run the named workers (of :data:`WORKERS`) as tasks until the block ends.

    Raises:
        ValueError: an unknown name, or the settings are not the full profile.
    """
    unknown = set(names) - set(WORKERS)
    if unknown:
        raise ValueError(f"unknown workers: {', '.join(sorted(unknown))}")
    config = kafka_config(settings)
    assert settings.redis_url is not None  # Settings pairs it with Kafka
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
    workers = Workers()
    closers: list[Callable[[], Awaitable[None]]] = [client.aclose]
    if {"relay", "project-cache"} & set(names):
        workers.checks.append(health.database_check(db))
    if {"fanout", "project-cache"} & set(names):
        workers.checks.append(health.redis_check(client))
    kafka = health.kafka_check(config.bootstrap_servers)
    workers.checks.append(kafka)
    closers.append(kafka.close)
    if "relay" in names:
        publisher = KafkaPublisher(config)
        closers.append(publisher.aclose)
        workers.relay = OutboxRelay(db, publisher)
        workers.tasks.append(asyncio.create_task(workers.relay.run(), name="outbox-relay"))
    if "fanout" in names:
        fanout = Fanout(config, client, group_id=settings.kafka_fanout_group)
        workers.tasks.append(asyncio.create_task(fanout.run(), name="fanout"))
    if "project-cache" in names:
        projector = CacheProjector(
            config,
            client,
            db,
            group_id=settings.kafka_projector_group,
            page_size=settings.snapshot_page_size,
        )
        workers.tasks.append(asyncio.create_task(projector.run(), name="cache-projector"))
    try:
        yield workers
    finally:
        for task in workers.tasks:
            task.cancel()
        for task in workers.tasks:
            await cancel_and_wait(task)
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()


async def _healthz(request: Request) -> JSONResponse:
    """200 ``{"status": "alive", "workers": [names]}``: the event loop answers."""
    return JSONResponse({"status": "alive", "workers": request.app.state.names})


def probe_app(names: Sequence[str], checks: Sequence[health.Check]) -> Starlette:
    """The HTTP endpoints of a worker process: ``/healthz``, ``/readyz``, ``/metrics``.

    ``/readyz`` and ``/metrics`` answer as an API process's do
    (:mod:`chorus.health`); ``checks`` are the workers' :attr:`Workers.checks`.
    """
    app = Starlette(
        routes=[
            Route("/healthz", _healthz),
            Route("/readyz", health.readyz),
            Route("/metrics", health.metrics),
        ]
    )
    app.state.names = list(names)
    app.state.readiness = list(checks)
    return app


async def run_until_stopped(
    settings: Settings, names: Sequence[str], *, listener: socket.socket | None = None
) -> None:
    """Run workers in the foreground until SIGINT or SIGTERM, then stop cleanly.

    Args:
        listener: a listening TCP socket to serve :func:`probe_app` on;
            ``None``: no HTTP endpoint. The socket is closed on return.

    Raises:
        ValueError: see :func:`running`.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    db = Database(settings.database_url)
    try:
        async with running(settings, names, db) as workers:
            stopped = asyncio.create_task(stop.wait())
            waits = {stopped, *workers.tasks}
            server = serving = None
            if listener is not None:
                app = probe_app(names, workers.checks)
                server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
                # While it serves, uvicorn holds SIGINT and SIGTERM: it stops
                # on one, then hands it on to the handlers above.
                serving = asyncio.create_task(server.serve([listener]), name="worker-probes")
                waits.add(serving)
            log.info("running %s", ", ".join(names))
            finished, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if server is not None and serving is not None:
                server.should_exit = True
                await serving
            for task in finished.intersection(workers.tasks):
                task.result()  # workers retry every failure: one that ended, crashed
    finally:
        if listener is not None:
            listener.close()
        await db.dispose()
