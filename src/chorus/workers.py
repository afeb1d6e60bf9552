"""Worker processes of the full profile: outbox relay, fanout and cache projector.

The workers themselves are built by :func:`chorus.wiring.running_workers`;
this module runs them in the foreground of a process, with its probes.

Each runs alone (``chorus relay``, ``chorus fanout``, ``chorus project-cache``)
or, for a single node, inside the API process (``chorus serve --with-workers``).
Start order does not matter: every worker waits for the servers it needs,
retrying with backoff, and picks up where its consumer group (or the outbox)
left off. Several copies of each may run; relays split the outbox by playlist
and the consumers split the topic's partitions.

A worker process run with ``--port`` answers ``/healthz`` (its event loop
answers), ``/readyz`` (the servers its workers need answer, naming the one
that does not) and ``/metrics`` on that port, like an API process (with
``CHORUS_METRICS_TOKEN`` set, ``/metrics`` needs it as a bearer token).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Sequence

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from chorus import bootstrap, health, wiring
from chorus.db.engine import Database
from chorus.settings import Settings

log = logging.getLogger("chorus.workers")


async def _healthz(request: Request) -> JSONResponse:
    """200 ``{"status": "alive", "workers": [names]}``: the event loop answers."""
    return JSONResponse({"status": "alive", "workers": request.app.state.names})


def probe_app(
    names: Sequence[str], checks: Sequence[health.Check], metrics_token: str | None = None
) -> Starlette:
    """The HTTP endpoints of a worker process: ``/healthz``, ``/readyz``, ``/metrics``.

    ``/readyz`` and ``/metrics`` answer as an API process's do
    (:mod:`chorus.health`); ``checks`` are the workers'
    :attr:`~chorus.wiring.Workers.checks`; ``metrics_token``
    (``CHORUS_METRICS_TOKEN``) guards ``/metrics`` when set.
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
    app.state.metrics_token = metrics_token
    return app


async def run_until_stopped(
    settings: Settings, names: Sequence[str], *, listener: socket.socket | None = None
) -> None:
    """Run workers in the foreground until SIGINT or SIGTERM, then stop cleanly.

    Args:
        listener: a listening TCP socket to serve :func:`probe_app` on;
            ``None``: no HTTP endpoint. The socket is closed on return.

    Raises:
        ValueError: see :func:`chorus.wiring.running_workers`.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    db = bootstrap.database(settings)
    try:
        with bootstrap.traced(settings, "+".join(names)):
            await _run(settings, names, db, stop, listener)
    finally:
        if listener is not None:
            listener.close()
        await db.dispose()


async def _run(
    settings: Settings,
    names: Sequence[str],
    db: Database,
    stop: asyncio.Event,
    listener: socket.socket | None,
) -> None:
    """Run the workers and their probe endpoint until ``stop`` is set or one crashes."""
    async with wiring.running_workers(settings, names, db) as workers:
        stopped = asyncio.create_task(stop.wait())
        waits = {stopped, *workers.tasks}
        server = serving = None
        if listener is not None:
            app = probe_app(names, workers.checks, settings.metrics_token)
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
