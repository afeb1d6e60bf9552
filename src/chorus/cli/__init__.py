"""The ``chorus`` command line.

    chorus serve [--with-workers] [--workers N] [--role all|api|gateway]
                                  run the API (GraphiQL at /graphql); N processes
                                  on one port in the full profile; an API process
                                  without sockets or a subscriptions-only gateway
    chorus relay                  full profile: outbox → Kafka
    chorus fanout                 full profile: Kafka → Redis pub/sub
    chorus project-cache          full profile: Kafka → Redis snapshots
    chorus feed                   full profile: Kafka → pushed feed rows in SQL
    chorus token USER [--ttl S]   print a bearer token for USER (HS256, local use)
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
import os
import signal
import sys
from collections.abc import Sequence

from chorus import __version__
from chorus.cli import subcommands
from chorus.cli.argument_types import count, days, host, port, ttl, user

LOG_LEVELS = ["critical", "error", "warning", "info", "debug"]


def build_parser() -> argparse.ArgumentParser:
    """The ``chorus`` parser; each command's ``run`` returns its exit status."""
    parser = argparse.ArgumentParser(prog="chorus", description="Collaborative playlists.")
    parser.add_argument("--version", action="version", version=f"chorus {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_servers(subparsers)
    _add_tools(subparsers)
    return parser


def _add_servers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The long-running commands: serve, the workers, catalog serve."""
    serve = subparsers.add_parser("serve", help="run the API server")
    serve.add_argument("--host", type=host, help="bind address (default CHORUS_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=port, help="TCP port (default CHORUS_PORT or 8000)")
    serve.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    serve.add_argument(
        "--workers",
        type=count,
        default=1,
        help="full profile: N API processes sharing the port (default 1)",
    )
    serve.add_argument(
        "--with-workers",
        action="store_true",
        help="full profile: also run the relay, fanout, cache projector and feed consumer "
        "in this process",
    )
    serve.add_argument(
        "--role",
        choices=["all", "api", "gateway"],
        help="what /graphql answers: all, api (HTTP only) or gateway (WebSocket "
        "subscriptions only; full profile) (default CHORUS_SERVE_ROLE or all)",
    )
    serve.set_defaults(run=subcommands.serve)

    for name, text in (
        ("relay", "full profile: publish the outbox to Kafka"),
        ("fanout", "full profile: Kafka events to Redis pub/sub"),
        ("project-cache", "full profile: Kafka events to Redis snapshots of PUBLIC playlists"),
        ("feed", "full profile: Kafka events to the pushed feed rows of followers"),
    ):
        worker = subparsers.add_parser(name, help=text)
        worker.add_argument(
            "--port",
            type=port,
            help="serve /healthz, /readyz and /metrics on this port (host: CHORUS_HOST)",
        )
        worker.add_argument("--log-level", default="info", choices=LOG_LEVELS)
        worker.set_defaults(run=subcommands.worker)

    catalog = subparsers.add_parser("catalog", help="the media catalog as a separate service")
    catalog_commands = catalog.add_subparsers(
        dest="catalog_command", metavar="COMMAND", required=True
    )
    catalog_serve = catalog_commands.add_parser(
        "serve", help="serve the embedded catalog over HTTP (for CHORUS_CATALOG_URL)"
    )
    catalog_serve.add_argument("--host", type=host, default="127.0.0.1")
    catalog_serve.add_argument("--port", type=port, default=8001)
    catalog_serve.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    catalog_serve.set_defaults(run=subcommands.catalog_serve)


def _add_tools(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that do one thing and exit."""
    token = subparsers.add_parser("token", help="print a bearer token for a user")
    token.add_argument("user", type=user, help="the user id (the token's sub)")
    token.add_argument(
        "--ttl",
        type=ttl,
        default=None,
        metavar="SECONDS",
        help="how long the token is valid (whole seconds, 1 to 366 days; default 30 days)",
    )
    token.set_defaults(run=subcommands.token)

    subparsers.add_parser("export-schema", help="print the GraphQL schema (SDL)").set_defaults(
        run=subcommands.export_schema
    )

    db = subparsers.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    db_commands.add_parser("upgrade", help="apply migrations").set_defaults(
        run=subcommands.db_upgrade
    )

    compact = subparsers.add_parser(
        "compact", help="truncate old mutation-log versions and tombstones (retention)"
    )
    compact.add_argument("--keep-versions", type=count, help="keep the last N versions")
    compact.add_argument(
        "--keep-days",
        type=days,
        help="keep versions newer than D days (default CHORUS_LOG_KEEP_DAYS)",
    )
    compact.set_defaults(run=subcommands.compact)

    imports = subparsers.add_parser("import", help="import playlists")
    sources = imports.add_subparsers(dest="source", metavar="SOURCE", required=True)
    chinook = sources.add_parser("chinook", help="the Chinook sample playlists (shipped)")
    chinook.add_argument("--owner", type=user, required=True, help="who owns them")
    chinook.set_defaults(run=subcommands.import_)
    mpd = sources.add_parser("mpd", help="a Million Playlist Dataset slice (JSON)")
    mpd.add_argument("file", help="path of the slice, e.g. mpd.slice.0-999.json")
    mpd.add_argument("--owner", type=user, required=True, help="who owns them")
    mpd.add_argument("--limit", type=count, help="import at most this many playlists")
    mpd.set_defaults(run=subcommands.import_)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``chorus`` with ``argv`` (default: the process's); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        result: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader of stdout went away (`chorus import … | head`): what the
        # command did is done; stop quietly as a C tool killed by SIGPIPE
        # would, and keep Python from complaining again when stdout is flushed
        # at exit (the recipe of the `signal` module's documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return result
