"""Graceful drain: how ``chorus serve`` stops behind a load balancer.

The order on **SIGTERM** (what Kubernetes, Docker, systemd and ECS send):

1. :class:`Drain` starts at once: ``/readyz`` answers 503
   ``{"status": "draining"}`` so the load balancer takes the process out of
   rotation; ``/healthz`` stays 200 (the process is alive: no restart).
2. For ``CHORUS_DRAIN_S`` seconds everything is still served as before:
   new connections, new requests, new WebSockets — whatever the load
   balancer still sends while it notices. HTTP responses carry
   ``Connection: close`` meanwhile (:class:`chorus.middleware.CloseWhileDraining`),
   so keep-alive connections move off one by one instead of all at the end.
3. Then uvicorn's own shutdown: the listener closes, requests in flight
   finish, every WebSocket is closed with **1012** (service restart:
   graphql-ws clients reconnect, to another process), the lifespan closes
   the services (streams, hub, relay) — all within ``CHORUS_SHUTDOWN_TIMEOUT_S``,
   after which what still runs is cancelled. Exit status 0.

**SIGINT** (Ctrl-C at a terminal) skips step 2: nobody balances a developer's
terminal. A **second** SIGTERM or SIGINT, at any step, exits at once with
status 128 + the signal's number (143, 130), as if the signal had killed the
process: nothing is drained or closed (the outbox keeps what the relay had
not published; the next process publishes it).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from types import FrameType

import uvicorn

log = logging.getLogger("chorus.drain")


class Drain:
    """Whether this process is draining; started once by the first stop signal, never undone.

    Shared by the server (which starts it) and the app (``/readyz``,
    ``/healthz`` and the ``Connection: close`` middleware read it). Starting
    it only sets an attribute, so a signal handler may do it.
    """

    __slots__ = ("started_at",)

    def __init__(self) -> None:
        self.started_at: float | None = None
        """``time.monotonic()`` when the drain began; ``None`` while serving normally."""

    @property
    def draining(self) -> bool:
        return self.started_at is not None

    def start(self) -> None:
        if self.started_at is None:
            self.started_at = time.monotonic()


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the stop sequence of the module docstring.

    Args:
        config: the uvicorn configuration (its ``timeout_graceful_shutdown``
            bounds step 3).
        drain: the state the app reads.
        drain_s: seconds of step 2 (``CHORUS_DRAIN_S``; 0: none).
    """

    def __init__(self, config: uvicorn.Config, drain: Drain, drain_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.drain_s = drain_s
        self._stopping = False
        self._drain_until: float | None = None
        self._announced = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: it only sets state (logging waits for the next tick),
        # except on the second signal, which must not wait for anything.
        if self._stopping:
            name = signal.Signals(sig).name
            os.write(2, f"chorus: second {name}: exiting at once, nothing drained\n".encode())
            os._exit(128 + sig)
        self._stopping = True
        self.drain.start()
        if sig == signal.SIGTERM and self.drain_s > 0:
            self._drain_until = time.monotonic() + self.drain_s
        else:
            self.should_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self._stopping and not self._announced:
            self._announced = True
            if self._drain_until is not None:
                log.info(
                    "SIGTERM: draining for %gs (/readyz answers 503), then closing; "
                    "a second signal exits at once",
                    self.drain_s,
                )
            else:
                log.info("stopping without a drain; a second signal exits at once")
        if self._drain_until is not None and time.monotonic() >= self._drain_until:
            self._drain_until = None
            log.info("drain over: closing the listener and the WebSockets (1012)")
            self.should_exit = True
        return await super().on_tick(counter)
