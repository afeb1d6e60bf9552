"""The ``chorus`` command line.

    chorus serve [--with-workers] run the API (GraphiQL at /graphql)
    chorus relay                  full profile: outbox → Kafka
    chorus fanout                 full profile: Kafka → Redis pub/sub
    chorus project-cache          full profile: Kafka → Redis snapshots
    chorus token USER             print a bearer token for USER
    chorus export-schema          print the schema as SDL (schema.graphql)
    chorus db upgrade             apply migrations to CHORUS_DATABASE_URL
    chorus import chinook --owner USER
    chorus import mpd FILE --owner USER [--limit N]
    chorus compact --keep-versions N [--keep-days D]
    chorus catalog serve [--port P]   the embedded catalog as a separate HTTP service

Bad settings or arguments exit with status 2 and a one-line message, never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from chorus import __version__
from chorus.settings import Settings


def _fail(message: str) -> NoReturn:
    """Exit with status 2 and a one-line message on stderr."""
    print(f"chorus: {message}", file=sys.stderr)
    raise SystemExit(2)


def _require_full_profile(settings: Settings, what: str) -> None:
    try:
        settings.require_full_profile(what)
    except ValueError as exc:
        _fail(str(exc))


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            # A check across settings has no location: its message names them.
            f"CHORUS_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" if e["loc"] else e["msg"]
            for e in exc.errors()
        )
        _fail(f"bad settings: {problems}")


def _migrate(settings: Settings, *, wait: bool) -> None:
    """Apply migrations to the configured database.

    While the server is unreachable, ``wait`` retries with backoff, one line
    per attempt (long-running processes, so start order does not matter);
    otherwise, and for any other failure (no such database, bad password),
    exit 2 with the reason.
    """
    from sqlalchemy.exc import DBAPIError

    from chorus.db.engine import is_unavailable
    from chorus.db.migrate import upgrade

    delay = 0.5
    while True:
        try:
            upgrade(settings.database_url)
            return
        except Exception as error:
            cause = error.orig if isinstance(error, DBAPIError) else error
            reason = " ".join(str(cause).split()) or type(cause).__name__
            if not (wait and is_unavailable(error)):
                _fail(f"cannot migrate the database: {reason}")
            print(
                f"chorus: database not reachable ({reason}); retrying in {delay:g}s",
                file=sys.stderr,
                flush=True,
            )
            try:
                time.sleep(delay)
            except KeyboardInterrupt:
                raise SystemExit(130) from None
            delay = min(delay * 2, 10.0)


def _user(value: str) -> str:
    from chorus.auth import check_user_id

    try:
        return check_user_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 1:
        raise argparse.ArgumentTypeError("must be a whole number of at least 1")
    return number


def _catalog_serve(args: argparse.Namespace) -> int:
    from chorus import bootstrap
    from chorus.catalog.embedded import EmbeddedCatalog
    from chorus.catalog.service import create_catalog_app

    settings = _settings()
    listener = _listen(args.host, args.port)
    _stop_cleanly_on_signals()
    _migrate(settings, wait=True)
    db = bootstrap.database(settings)
    app = create_catalog_app(EmbeddedCatalog(db), on_shutdown=db.dispose)
    print(f"Chorus catalog service on http://{args.host}:{args.port}", flush=True)
    return _run_server(app, listener, log_level=args.log_level)


def _compact(args: argparse.Namespace) -> int:
    return asyncio.run(_compact_async(args))


async def _compact_async(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from chorus import bootstrap
    from chorus.db.compaction import compact

    settings = _settings()
    keep_days = args.keep_days if args.keep_days is not None else settings.log_keep_days
    if args.keep_versions is None and keep_days is None:
        _fail("give --keep-versions N and/or --keep-days D")
    async with bootstrap.opened_database(settings) as db:
        report = await compact(
            db,
            keep_versions=args.keep_versions,
            keep_age=timedelta(days=keep_days) if keep_days is not None else None,
            retry_window=timedelta(hours=settings.retry_window_hours),
            now=datetime.now(UTC),
        )
    print(
        f"compacted {report.playlists} playlists: {report.log_rows_deleted} log rows, "
        f"{report.tombstones_deleted} tombstones, {report.outbox_rows_deleted} outbox rows deleted"
    )
    return 0


def _days(value: str) -> float:
    from chorus.settings import MAX_KEEP_DAYS

    try:
        days = float(value)
    except ValueError:
        days = -1.0
    if not 0 < days <= MAX_KEEP_DAYS:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"must be a number of days above 0 and at most {MAX_KEEP_DAYS:g}"
        )
    return days


def _db_upgrade(_args: argparse.Namespace) -> int:
    settings = _settings()
    _migrate(settings, wait=False)
    print(f"database is at the latest schema: {settings.database_url}")
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port``, bound before anything else starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as error:
        _fail(f"cannot listen on {host}:{port}: {error.strerror or error}")


def _exit_cleanly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _stop_cleanly_on_signals() -> None:
    """SIGTERM and SIGINT exit 0 from here on, also while waiting for a database.

    Servers and workers later take both signals over to shut down first;
    uvicorn then raises the signal again, which lands here and exits 0.
    """
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)


def _run_server(app: Any, listener: socket.socket, **options: Any) -> int:
    """Serve ``app`` with uvicorn on ``listener`` until stopped.

    Returns:
        0 after a clean shutdown, 3 (uvicorn's code) when the app failed to start.
    """
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", **options))
    server.run(sockets=[listener])
    return 0 if server.started else STARTUP_FAILURE


def _serve(args: argparse.Namespace) -> int:
    from chorus.app import create_app

    settings = _settings()
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    if args.with_workers:
        _require_full_profile(settings, "--with-workers")
    listener = _listen(host, port)
    _stop_cleanly_on_signals()
    _migrate(settings, wait=True)
    app = create_app(settings, with_workers=args.with_workers)
    profile = "full" if settings.full_profile else "embedded"
    if args.with_workers:
        profile += ", with relay, fanout and cache projector in this process"
    print(
        f"Chorus {__version__} on http://{host}:{port}/graphql (GraphiQL in a browser)\n"
        f"  profile:  {profile}\n"
        f"  database: {settings.database_url}\n"
        f"  a token:  ./scripts/chorus token alice  (send 'Authorization: Bearer <token>')",
        flush=True,
    )
    return _run_server(
        app,
        listener,
        log_level=args.log_level,
        ws_max_size=settings.max_body_bytes,  # the body limit holds for WebSocket messages too
    )


def _worker(args: argparse.Namespace) -> int:
    import logging

    from chorus.workers import run_until_stopped

    settings = _settings()
    _require_full_profile(settings, f"chorus {args.command}")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    listener = _listen(settings.host, args.port) if args.port is not None else None
    _stop_cleanly_on_signals()  # until run_until_stopped takes the signals over
    if args.command != "fanout":  # the only worker that never touches SQL
        _migrate(settings, wait=True)
    endpoints = (
        f" (/healthz, /readyz, /metrics on http://{settings.host}:{args.port})"
        if args.port is not None
        else ""
    )
    print(f"chorus {args.command} running{endpoints}; Ctrl-C stops it", flush=True)
    asyncio.run(run_until_stopped(settings, [args.command], listener=listener))
    return 0


def _port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError("must be a TCP port between 1 and 65535")
    return number


def _token(args: argparse.Namespace) -> int:
    from chorus import bootstrap
    from chorus.auth import mint_token

    print(mint_token(bootstrap.jwt_secret(_settings()), args.user))
    return 0


def _export_schema(_args: argparse.Namespace) -> int:
    from chorus.graphql.schema import print_schema

    sys.stdout.write(print_schema())
    return 0


def _import(args: argparse.Namespace) -> int:
    return asyncio.run(_import_async(args))


async def _import_async(args: argparse.Namespace) -> int:
    from chorus import bootstrap
    from chorus.catalog.embedded import EmbeddedCatalog
    from chorus.db.migrate import upgrade_async
    from chorus.graphql.ids import to_global_id
    from chorus.importers import ImportFailed, import_chinook, import_mpd

    settings = _settings()
    await upgrade_async(settings.database_url)
    try:
        async with bootstrap.opened_database(settings) as db:
            store = bootstrap.store(settings, db)
            if args.source == "chinook":
                imported = await import_chinook(store, args.owner)
            else:
                imported = await import_mpd(
                    Path(args.file), store, EmbeddedCatalog(db), args.owner, limit=args.limit
                )
    except ImportFailed as exc:
        _fail(f"import failed: {exc}")
    for playlist in imported:
        global_id = to_global_id("Playlist", playlist.playlist_id)
        print(f"{global_id}  {playlist.entries:6d} entries  {playlist.name}")
        for warning in playlist.warnings:
            print(f"  warning: {warning}")
    print(f"{len(imported)} playlists owned by {args.owner}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chorus", description="Collaborative playlists.")
    parser.add_argument("--version", action="version", version=f"chorus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the API server")
    serve.add_argument("--host", help="bind address (default CHORUS_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="TCP port (default CHORUS_PORT or 8000)")
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument(
        "--with-workers",
        action="store_true",
        help="full profile: also run the relay, fanout and cache projector in this process",
    )
    serve.set_defaults(run=_serve)

    for name, text in (
        ("relay", "full profile: publish the outbox to Kafka"),
        ("fanout", "full profile: Kafka events to Redis pub/sub"),
        ("project-cache", "full profile: Kafka events to Redis snapshots of PUBLIC playlists"),
    ):
        worker = commands.add_parser(name, help=text)
        worker.add_argument(
            "--port",
            type=_port,
            help="serve /healthz, /readyz and /metrics on this port (host: CHORUS_HOST)",
        )
        worker.add_argument(
            "--log-level",
            default="info",
            choices=["critical", "error", "warning", "info", "debug"],
        )
        worker.set_defaults(run=_worker)

    catalog = commands.add_parser("catalog", help="the media catalog as a separate service")
    catalog_commands = catalog.add_subparsers(
        dest="catalog_command", metavar="COMMAND", required=True
    )
    catalog_serve = catalog_commands.add_parser(
        "serve", help="serve the embedded catalog over HTTP (for CHORUS_CATALOG_URL)"
    )
    catalog_serve.add_argument("--host", default="127.0.0.1")
    catalog_serve.add_argument("--port", type=_port, default=8001)
    catalog_serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    catalog_serve.set_defaults(run=_catalog_serve)

    token = commands.add_parser("token", help="print a bearer token for a user")
    token.add_argument("user", type=_user, help="the user id (the token's sub)")
    token.set_defaults(run=_token)

    commands.add_parser("export-schema", help="print the GraphQL schema (SDL)").set_defaults(
        run=_export_schema
    )

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    db_commands.add_parser("upgrade", help="apply migrations").set_defaults(run=_db_upgrade)

    compact = commands.add_parser(
        "compact", help="truncate old mutation-log versions and tombstones (retention)"
    )
    compact.add_argument("--keep-versions", type=_count, help="keep the last N versions")
    compact.add_argument(
        "--keep-days",
        type=_days,
        help="keep versions newer than D days (default CHORUS_LOG_KEEP_DAYS)",
    )
    compact.set_defaults(run=_compact)

    imports = commands.add_parser("import", help="import playlists")
    sources = imports.add_subparsers(dest="source", metavar="SOURCE", required=True)
    chinook = sources.add_parser("chinook", help="the Chinook sample playlists (shipped)")
    chinook.add_argument("--owner", type=_user, required=True, help="who owns them")
    chinook.set_defaults(run=_import)
    mpd = sources.add_parser("mpd", help="a Million Playlist Dataset slice (JSON)")
    mpd.add_argument("file", help="path of the slice, e.g. mpd.slice.0-999.json")
    mpd.add_argument("--owner", type=_user, required=True, help="who owns them")
    mpd.add_argument("--limit", type=_count, help="import at most this many playlists")
    mpd.set_defaults(run=_import)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    result: int = args.run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
