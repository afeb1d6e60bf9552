"""What every command shares: settings, exit statuses, ports, signals, migrations.

Bad settings or arguments exit with status 2 and a one-line message, never a
traceback; SIGTERM and SIGINT exit 0 once a command took them over (``serve``
drains on SIGTERM first, and a second signal exits at once: :mod:`chorus.drain`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, Protocol

from pydantic import ValidationError

from chorus.settings import Settings, unknown_variables

if TYPE_CHECKING:
    from chorus.drain import Drain


class Closable(Protocol):
    """A lock held until :meth:`close` (or the process's end)."""

    def close(self) -> None: ...


def fail(message: str) -> NoReturn:
    """Exit with status 2 and a one-line message on stderr."""
    print(f"chorus: {message}", file=sys.stderr)
    raise SystemExit(2)


def require_full_profile(settings: Settings, what: str) -> None:
    try:
        settings.require_full_profile(what)
    except ValueError as exc:
        fail(str(exc))


def load_settings() -> Settings:
    for line in unknown_variables(os.environ):
        print(f"chorus: warning: {line}", file=sys.stderr)
    try:
        return Settings()
    except ValidationError as exc:
        fail(f"bad settings: {'; '.join(map(_problem, exc.errors()))}")


_NEVER_ECHOED = ("TOKEN", "SECRET", "PASSWORD", "KEY", "URL", "AUTH", "JWKS")
"""Parts of a setting's name whose value may hold a credential: never printed back."""


def _problem(error: Any) -> str:
    """One setting's problem as a user reads it: its variable, pydantic's message without
    its "Value error, " prefix, and the value given (at most 60 characters)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:
        return message  # a check across settings: its message names them
    name = f"CHORUS_{'_'.join(map(str, error['loc'])).upper()}"
    given = error.get("input")
    if isinstance(given, str) and not any(word in name for word in _NEVER_ECHOED):
        shown = given if len(given) <= 60 else given[:57] + "..."
        return f"{name}={shown!r}: {message}"
    return f"{name}: {message}"


def jwt_secret(settings: Settings) -> str:
    """The secret bearer tokens are signed with (:func:`chorus.bootstrap.jwt_secret`).

    Exits:
        2 with one line when the kept secret or the data directory is unusable.
    """
    from chorus import bootstrap
    from chorus.auth import SecretUnusable

    try:
        return bootstrap.jwt_secret(settings)
    except SecretUnusable as error:
        fail(str(error))


def migrate(settings: Settings, *, wait: bool) -> None:
    """Apply migrations to the configured database.

    While the server is unreachable, ``wait`` retries with backoff, one line
    per attempt (long-running processes, so start order does not matter);
    otherwise, and for any other failure (no such database, bad password),
    exit 2 with the reason.
    """
    from sqlalchemy.exc import DBAPIError

    from chorus.db.engine import is_unavailable
    from chorus.db.migrate import upgrade
    from chorus.resilience.backoff import Backoff

    backoff = Backoff(0.5, 10.0)
    while True:
        try:
            upgrade(settings.direct_database_url)  # past any pooler: DDL and its locks
            return
        except Exception as error:
            cause = error.orig if isinstance(error, DBAPIError) else error
            reason = " ".join(str(cause).split()) or type(cause).__name__
            if not (wait and is_unavailable(error)):
                fail(f"cannot migrate the database: {reason}")
            delay = backoff.next()
            print(
                f"chorus: database not reachable ({reason}); retrying in {delay:g}s",
                file=sys.stderr,
                flush=True,
            )
            try:
                time.sleep(delay)
            except KeyboardInterrupt:
                raise SystemExit(130) from None


SERVE_LOCK_SUFFIX = ".serve-lock"
"""The lock file beside an embedded database: ``chorus.db`` → ``chorus.db.serve-lock``."""


def lock_embedded_database(settings: Settings) -> IO[bytes] | None:
    """Make this process the only ``chorus serve`` of its SQLite file (embedded profile).

    An embedded server's events travel on its in-process bus: a second
    server on the same file would not hear the first's commits, nor its
    subscribers the second's (CLI commands beside one server are fine: it
    publishes what they commit). The lock is an OS lock (``flock``) on
    :data:`SERVE_LOCK_SUFFIX` beside the file, held while the returned file
    stays open, released by the OS however the process ends (``kill -9``
    too), so a stale lock file never blocks a start.

    Returns:
        The open lock file (keep it until the server stops); ``None`` when
        there is nothing to lock: the full profile, PostgreSQL, an
        in-memory database. A ``file:`` URI locks the file it names.

    Exits:
        2 with one line when another ``chorus serve`` holds the lock, or when
        the file's folder cannot be made or written (missing and not
        creatable, read-only, ``/proc``).
    """
    import fcntl

    from sqlalchemy.engine import make_url

    url = make_url(settings.database_url)
    database = url.database or ""
    if database.startswith("file:"):  # a URI filename: file:/path?mode=…, file:///path
        database = database.removeprefix("file:").split("?", 1)[0].removeprefix("//localhost")
        database = "/" + database.lstrip("/") if database.startswith("//") else database
        if url.query.get("mode") == "memory" or "mode=memory" in (url.database or ""):
            database = ":memory:"
    if settings.full_profile or url.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    path = Path(database).expanduser().resolve()
    if not path.parent.parent.exists():
        # As for CHORUS_DATA_DIR: the folder is made, its parents are not — a
        # mistyped path would start a new, empty database the tokens still open.
        fail(
            f"the database file's folder {path.parent} is missing and so is its parent: "
            "CHORUS_DATABASE_URL must name a file in an existing folder (or one more "
            "level below one); check the path"
        )
    try:
        path.parent.mkdir(exist_ok=True)
        lock = (path.parent / (path.name + SERVE_LOCK_SUFFIX)).open("ab")
    except OSError as error:
        # SQLite writes its journal beside the file too: a folder that cannot
        # hold the lock cannot hold the database either.
        not_a_folder = isinstance(error, FileExistsError | NotADirectoryError)
        fail(
            f"the database file's folder {path.parent} cannot be written "
            f"({'not a folder' if not_a_folder else error.strerror or error}); "
            "CHORUS_DATABASE_URL must name a file in a "
            "folder this process can create files in"
        )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        fail(
            f"another chorus serve is running on {path}: the embedded profile serves one "
            "database file from one process; for several API processes use the full "
            "profile (PostgreSQL, Kafka, Redis: docs/full-profile.md)"
        )
    except OSError as error:
        lock.close()
        fail(f"cannot lock {lock.name}: {error.strerror or error}")
    return lock


def lock_embedded_postgres(settings: Settings) -> Closable | None:
    """Make this process the only ``chorus serve`` of its PostgreSQL database (embedded profile).

    For the same reason as :func:`lock_embedded_database`, with a session
    advisory lock held on a connection of its own (:mod:`chorus.db.serve_lock`),
    taken past any pooler. Call it after :func:`migrate`, which waits for the
    database.

    Returns:
        The held lock (keep it until the server stops), or ``None`` for the
        full profile and SQLite.

    Exits:
        2 with one line naming the holder when another ``chorus serve`` holds
        the lock, or when the database cannot be reached.
    """
    from sqlalchemy.engine import make_url

    from chorus.db.serve_lock import Held, hold_serve_lock

    url = make_url(settings.direct_database_url)
    if settings.full_profile or url.get_backend_name() != "postgresql":
        return None
    try:
        held = hold_serve_lock(url)
    except Exception as error:
        fail(f"cannot take the one-serve lock of the database: {error}")
    if isinstance(held, Held):
        fail(
            f"another chorus serve ({held.holder}) is serving this PostgreSQL database in "
            "the embedded profile: its events stay in its own process, so a second server "
            "would serve stale cached answers and miss live events; for several API "
            "processes use the full profile (Kafka, Redis: docs/full-profile.md)"
        )
    return held


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port``, bound before anything else starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror or error}")


def _exit_cleanly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def stop_cleanly_on_signals() -> None:
    """SIGTERM and SIGINT exit 0 from here on, also while waiting for a database.

    Servers and workers later take both signals over to shut down first;
    uvicorn then raises the signal again, which lands here and exits 0.
    """
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)


def transport_options(settings: Settings) -> dict[str, Any]:
    """uvicorn options bounding the HTTP transport (:mod:`chorus.transport`).

    The request head's size, header count and arrival time, the body's
    arrival time, the open connections, and how long an idle keep-alive
    connection stays open.
    """
    from chorus.transport import HeadLimits, protocol_class

    limits = HeadLimits(
        max_header_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
        head_timeout_s=settings.head_timeout_s,
        max_connections=settings.max_connections,
        body_timeout_s=settings.body_timeout_s,
        send_timeout_s=settings.send_timeout_s,
    )
    return {"http": protocol_class(limits), "timeout_keep_alive": settings.keep_alive_timeout_s}


def load_balancer_options(settings: Settings) -> dict[str, Any]:
    """uvicorn options for running behind a load balancer (docs/deploying.md).

    uvicorn's proxy headers off: ``create_app`` reads them from
    ``CHORUS_TRUSTED_PROXIES`` only (:class:`chorus.middleware.ForwardedClient`;
    uvicorn's ``FORWARDED_ALLOW_IPS``, its default of trusting 127.0.0.1 and
    its taking of any text as the client's address are not used); WebSocket ping frames every
    ``CHORUS_WS_PING_S`` (0: none), answered within ``CHORUS_WS_PING_TIMEOUT_S``;
    permessage-deflate only with ``CHORUS_WS_PER_MESSAGE_DEFLATE`` (uvicorn offers it
    by default);
    ``CHORUS_SHUTDOWN_TIMEOUT_S`` for what is in flight when the drain ends.
    """
    return {
        "proxy_headers": False,
        "ws_ping_interval": settings.ws_ping_s or None,
        "ws_ping_timeout": settings.ws_ping_timeout_s,
        "ws_per_message_deflate": settings.ws_per_message_deflate,
        "timeout_graceful_shutdown": settings.shutdown_timeout_s,
    }


def run_server(
    app: Any,
    listener: socket.socket,
    *,
    log_level: str,
    log_format: str = "text",
    drain: Drain | None = None,
    drain_s: float = 0.0,
    **options: Any,
) -> int:
    """Serve ``app`` with uvicorn on ``listener`` until stopped.

    Logs go to stderr in :data:`chorus.logs.LOG_FORMAT` (with the request id),
    or as JSON lines when ``log_format`` is ``"json"``, at ``log_level`` and above.
    With ``drain`` (the one ``app`` reads), the stop sequence is
    :mod:`chorus.drain`'s: SIGTERM drains for ``drain_s`` seconds first, a
    second signal exits at once.

    Returns:
        0 after a clean shutdown, 3 (uvicorn's code) when the app failed to start.
    """
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from chorus.drain import DrainingServer
    from chorus.logs import log_config

    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level=log_level,
        log_config=log_config(log_level, log_format),
        **options,
    )
    server = uvicorn.Server(config) if drain is None else DrainingServer(config, drain, drain_s)
    # What was imported and built so far lives as long as the process: keep
    # it out of the collector's full passes, which otherwise walk the
    # schema, the modules and the caches on every gen-2 collection (pauses of
    # 100 ms and more under request churn stall every connection at once).
    gc.freeze()
    # Thousands of open sockets are a large heap that lives as long as they
    # do; every gen-2 pass walks all of it (1.5 s at 5,000 subscribed sockets,
    # every other commit in bench/ws_fanout.py). Young collections every
    # 50,000 net allocations instead of 700 promote far less, and full passes
    # (every 100 middle ones) become rare. The middle generation is collected
    # every 3 young ones so that it stays small: at 50 it held 5 million
    # objects of parse garbage under a stream of over-long documents, and its
    # one pass stalled the loop 2.4 s (docs/api.md, "Live delivery").
    gc.set_threshold(*GC_THRESHOLDS)
    server.run(sockets=[listener])
    return 0 if server.started else STARTUP_FAILURE


GC_THRESHOLDS = (50_000, 3, 100)
"""``gc.set_threshold`` of a serving process (CPython's defaults: 700, 10, 10)."""


def run_processes(count: int, serve: Callable[[], int]) -> int:
    """Run ``serve`` in ``count`` forked processes sharing the listening socket; wait for all.

    The socket is bound before the fork, so the kernel hands each new
    connection to one of them (the processes are stateless: the full
    profile's Redis tells each of the others' commits). SIGTERM or SIGINT to
    this process is passed to every child, each of which shuts down as a
    single ``serve`` does. A child that dies is not restarted: the others
    keep serving, and this process exits once all have.

    Returns:
        0 when every child exited 0, else the first other status.
    """
    children: list[int] = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:  # the child: serve, and never return into the parent's code
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _end_with_parent()
            status = 1
            try:
                status = serve()
            finally:
                os._exit(status)
        children.append(pid)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    statuses = []
    for child in children:
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        statuses.append(os.waitstatus_to_exitcode(status))
    return next((s for s in statuses if s != 0), 0)


def _end_with_parent() -> None:
    """Linux: this process gets SIGTERM when its parent dies (even by SIGKILL), not orphaned."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
