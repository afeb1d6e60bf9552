"""The full profile's workers: outbox relay, fanout and cache projector.

Each runs alone (``chorus relay``, ``chorus fanout``, ``chorus project-cache``)
or, for a single node, inside the API process (``chorus serve --with-workers``).
Start order does not matter: every worker waits for the servers it needs,
retrying with backoff, and picks up where its consumer group (or the outbox)
left off. Several copies of each may run; relays split the outbox by playlist
and the consumers split the topic's partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as redis

from chorus.db.engine import Database
from chorus.settings import Settings
from chorus.subscriptions.fanout import Fanout
from chorus.subscriptions.kafka import KafkaConfig, KafkaPublisher
from chorus.subscriptions.projector import CacheProjector
from chorus.subscriptions.relay import OutboxRelay

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
    """Running workers; ``relay`` is set when the relay is one of them."""

    relay: OutboxRelay | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


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
    closers: list[Callable[[], Coroutine[Any, Any, None]]] = [client.aclose]
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
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()


async def run_until_stopped(settings: Settings, names: Sequence[str]) -> None:
    """Run workers in the foreground until SIGINT or SIGTERM, then stop cleanly.

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
            log.info("running %s", ", ".join(names))
            done = asyncio.create_task(stop.wait())
            finished, _ = await asyncio.wait(
                [done, *workers.tasks], return_when=asyncio.FIRST_COMPLETED
            )
            done.cancel()
            for task in finished - {done}:
                task.result()  # workers retry every failure: one that ended, crashed
    finally:
        await db.dispose()
