"""The commands: each takes the parsed arguments and returns the exit status.

Services are built by the composition root (:mod:`chorus.bootstrap`),
imported inside each command so that ``chorus --help`` and ``chorus token``
start fast.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from chorus import __version__
from chorus.cli.process import (
    Closable,
    fail,
    jwt_secret,
    listen,
    load_balancer_options,
    load_settings,
    lock_embedded_database,
    lock_embedded_postgres,
    migrate,
    require_full_profile,
    run_processes,
    run_server,
    stop_cleanly_on_signals,
    transport_options,
)
from chorus.settings import masked_url


def serve(args: argparse.Namespace) -> int:
    from chorus.app import create_app
    from chorus.drain import Drain

    settings = load_settings()
    if args.role is not None:
        settings = settings.model_copy(update={"serve_role": args.role})
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    if args.with_workers:
        require_full_profile(settings, "--with-workers")
    if settings.serve_role == "gateway":
        # Only Redis pub/sub carries another process's commits to this one's sockets,
        # fed by the relay from PostgreSQL's outbox.
        what = "a gateway (CHORUS_SERVE_ROLE=gateway, --role gateway)"
        try:
            settings.require_postgres_full_profile(what)
        except ValueError as exc:
            fail(str(exc))
    if args.workers > 1:
        # Each process has its own head registry and subscription hub: only
        # Redis (heads, pub/sub) tells every process of the others' commits.
        require_full_profile(settings, f"--workers {args.workers}")
    if settings.jwks_url is None:
        jwt_secret(settings)  # an unusable secret or data directory stops here, in one line
    lock: Closable | None = lock_embedded_database(settings)  # held until this process ends
    listener = listen(host, port)
    port = listener.getsockname()[1]  # the port the system chose for CHORUS_PORT=0
    stop_cleanly_on_signals()
    migrate(settings, wait=True)
    lock = lock or lock_embedded_postgres(settings)  # PostgreSQL's: the database is up now
    try:
        create_app(settings, with_workers=args.with_workers)  # bad settings fail here, once
    except ValueError as exc:
        fail(str(exc))
    profile = "full" if settings.full_profile else "embedded"
    if settings.serve_role != "all":
        profile += f", role {settings.serve_role}"
    if args.with_workers:
        profile += ", with relay, fanout, cache projector and feed consumer in this process"
    if args.workers > 1:
        profile += f", {args.workers} processes"
    token_hint = (
        f"from the identity provider ({settings.jwks_url})"
        if settings.jwks_url
        else "./scripts/chorus token alice"
    )
    print(
        f"Chorus {__version__} on http://{host}:{port}/graphql (GraphiQL in a browser)\n"
        f"  profile:  {profile}\n"
        f"  database: {masked_url(settings.database_url)}\n"
        f"  a token:  {token_hint}  (send 'Authorization: Bearer <token>')",
        flush=True,
    )

    def serve_one() -> int:
        drain = Drain()  # one per process: each drains on its own (run_processes forwards signals)
        return run_server(
            create_app(settings, with_workers=args.with_workers, drain=drain),
            listener,
            log_level=args.log_level,
            log_format=settings.log_format,
            drain=drain,
            drain_s=settings.drain_s,
            ws_max_size=settings.max_body_bytes,  # the body limit holds for WebSocket messages
            **transport_options(settings),
            **load_balancer_options(settings),
        )

    try:
        if args.workers == 1:
            return serve_one()
        return run_processes(args.workers, serve_one)
    finally:
        if lock is not None:
            lock.close()


def worker(args: argparse.Namespace) -> int:
    import logging
    import logging.config

    from chorus.logs import log_config
    from chorus.workers import run_until_stopped

    settings = load_settings()
    require_full_profile(settings, f"chorus {args.command}")
    if settings.log_format == "json":
        logging.config.dictConfig(log_config(args.log_level, "json"))
    else:
        logging.basicConfig(
            level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    listener = listen(settings.host, args.port) if args.port is not None else None
    stop_cleanly_on_signals()  # until run_until_stopped takes the signals over
    if args.command != "fanout":  # the only worker that never touches SQL
        migrate(settings, wait=True)
    endpoints = (
        f" (/healthz, /readyz, /metrics on http://{settings.host}:{listener.getsockname()[1]})"
        if listener is not None
        else ""
    )
    print(f"chorus {args.command} running{endpoints}; Ctrl-C stops it", flush=True)
    asyncio.run(run_until_stopped(settings, [args.command], listener=listener))
    return 0


def catalog_serve(args: argparse.Namespace) -> int:
    from chorus import bootstrap
    from chorus.catalog.service import create_catalog_app

    settings = load_settings()
    listener = listen(args.host, args.port)
    stop_cleanly_on_signals()
    migrate(settings, wait=True)
    db = bootstrap.database(settings)
    app = create_catalog_app(bootstrap.embedded_catalog(db), on_shutdown=db.dispose)
    port = listener.getsockname()[1]  # the one the system chose for --port 0
    print(f"Chorus catalog service on http://{args.host}:{port}", flush=True)
    return run_server(app, listener, log_level=args.log_level)


def compact(args: argparse.Namespace) -> int:
    migrate(load_settings(), wait=False)
    return asyncio.run(_compact_async(args))


async def _compact_async(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from chorus import bootstrap
    from chorus.db.compaction import compact
    from chorus.db.feed import prune_expired

    settings = load_settings()
    keep_days = args.keep_days if args.keep_days is not None else settings.log_keep_days
    if args.keep_versions is None and keep_days is None:
        fail("give --keep-versions N and/or --keep-days D")
    async with bootstrap.opened_database(settings) as db:
        report = await compact(
            db,
            keep_versions=args.keep_versions,
            keep_age=timedelta(days=keep_days) if keep_days is not None else None,
            retry_window=timedelta(hours=settings.retry_window_hours),
            now=datetime.now(UTC),
        )
        feed_rows = await prune_expired(db, settings.feed_limits, datetime.now(UTC))
    print(
        f"compacted {report.playlists} playlists: {report.log_rows_deleted} log rows, "
        f"{report.tombstones_deleted} tombstones, {report.outbox_rows_deleted} outbox rows, "
        f"{feed_rows} feed rows past CHORUS_FEED_RETENTION_DAYS deleted"
    )
    return 0


def db_upgrade(_args: argparse.Namespace) -> int:
    settings = load_settings()
    migrate(settings, wait=False)
    print(f"database is at the latest schema: {masked_url(settings.database_url)}")
    return 0


def token(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from chorus.auth import DEFAULT_TTL, mint_token
    from chorus.bootstrap import claim_rules

    settings = load_settings()
    if settings.jwks_url is not None:
        fail(
            "CHORUS_JWKS_URL is set: this server accepts only its identity provider's "
            "tokens, not the local HS256 ones `chorus token` signs"
        )
    lifetime = DEFAULT_TTL if args.ttl is None else timedelta(seconds=args.ttl)
    print(mint_token(jwt_secret(settings), args.user, ttl=lifetime, rules=claim_rules(settings)))
    return 0


def export_schema(_args: argparse.Namespace) -> int:
    from chorus.graphql.schema.build import print_schema

    sys.stdout.write(print_schema())
    return 0


def import_(args: argparse.Namespace) -> int:
    migrate(load_settings(), wait=False)
    return asyncio.run(_import_async(args))


async def _import_async(args: argparse.Namespace) -> int:
    from chorus import bootstrap
    from chorus.graphql.schema.common.ids import to_global_id
    from chorus.importers import ImportFailed, import_chinook, import_mpd

    settings = load_settings()
    try:
        async with bootstrap.opened_database(settings) as db:
            store = bootstrap.store(settings, db)
            if args.source == "chinook":
                imported = await import_chinook(store, args.owner)
            else:
                imported = await import_mpd(
                    Path(args.file),
                    store,
                    bootstrap.embedded_catalog(db),
                    args.owner,
                    limit=args.limit,
                )
    except ImportFailed as exc:
        fail(f"import failed: {exc}")
    for playlist in imported:
        global_id = to_global_id("Playlist", playlist.playlist_id)
        print(f"{global_id}  {playlist.entries:6d} entries  {playlist.name}")
        for warning in playlist.warnings:
            print(f"  warning: {warning}")
    print(f"{len(imported)} playlists owned by {args.owner}")
    return 0
