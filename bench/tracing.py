"""What tracing costs the hot read: the same page, tracing off and on, the same load tool.

One run imports the Chinook playlists (``chorus import chinook``) into a fresh
PostgreSQL database and starts ``chorus serve`` on it six times: response
cache warm (hot) and off (cold, every read executes and reads SQL), each
with tracing off, on, and on with 5% of traces sampled
(``OTEL_TRACES_SAMPLER=parentbased_traceidratio``), ``CHORUS_OTLP_ENDPOINT``
set to an OTLP/HTTP endpoint this script serves (it reads and drops every export, so the cost
measured is Chorus's: spans, the batch processor, protobuf encoding and the
POST). The page and the load are bench/peers.py's: the first 50 entries with
their media, round-robin over the playlists with at least 50, ``wrk -t1``,
rows interleaved in rounds. Prints req/s, p50, p99 and each traced row's
req/s as a ratio of the same row untraced.

``--strawberry`` measures instead, in this process over ASGI (no sockets),
the cold page on SQLite with tracing off, with Chorus's spans, and with
Chorus's spans plus strawberry's ``OpenTelemetryExtension`` (a span per
resolver): milliseconds per request, sequential, and the ratio to off. Off
runs first: once a provider is installed, a process cannot go back.

    flock /work/bench.lock python bench/tracing.py [--seconds 20] [--rounds 4]
        [--connections 16] [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
    flock /work/bench.lock python bench/tracing.py --strawberry [--requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers


class Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes every export and keeps nothing."""

    exports = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Sink.exports += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per row, over all rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--strawberry", action="store_true", help="per-resolver spans' cost")
    parser.add_argument("--requests", type=int, default=400, help="per row and round")
    args = parser.parse_args()
    if args.strawberry:
        asyncio.run(strawberry_rows(args.rounds, args.requests))
        return
    if shutil.which("wrk") is None:
        peers.install_wrk()
    servers: Any = peers.servers_module()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"

    name = f"chorus_tracing_{uuid.uuid4().hex[:8]}"
    asyncio.run(peers._admin(args.admin_url, f'CREATE DATABASE "{name}"'))
    dsn = f"{args.admin_url.rsplit('/', 1)[0]}/{name}"
    database_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    tmp = Path(tempfile.mkdtemp(prefix="chorus-tracing-"))
    env = {"CHORUS_JWT_SECRET": peers.SECRET}
    started: list[Any] = []
    copies: list[str] = []
    try:
        imported = peers.chorus_import(
            {
                **{k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")},
                "CHORUS_DATABASE_URL": database_url,
                "CHORUS_DATA_DIR": str(tmp),
                **env,
            }
        )
        copies += peers.clones(args.admin_url, name, 6)  # one per embedded server below
        gids = [gid for gid, n in imported if n >= peers.PAGE]
        print(
            f"{len(gids)} Chinook playlists read round-robin; wrk -t1 -c{args.connections}; "
            f"{args.seconds:g} s per row in {args.rounds} rounds, rows interleaved",
            flush=True,
        )
        targets = []
        for cache in ("hot", "cold"):
            for tracing in ("off", "on", "on 5%"):
                extra = {"CHORUS_RESPONSE_CACHE": "true" if cache == "hot" else "false"}
                if tracing != "off":
                    extra["CHORUS_OTLP_ENDPOINT"] = endpoint
                if tracing == "on 5%":  # the SDK's own sampler variables
                    extra["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
                    extra["OTEL_TRACES_SAMPLER_ARG"] = "0.05"
                url = f"{database_url.rsplit('/', 1)[0]}/{copies[len(started)]}"
                server = servers.ChorusServer(url, tmp, **env, **extra)
                server.start(timeout_s=120)  # a loaded 2-core machine starts slowly
                started.append(server)
                targets.append(_target(f"{cache}, tracing {tracing}", server, gids))
        for t in targets:  # warm-up: connections, caches
            peers.wrk(t.url, t.script or "", 2, args.connections)
        samples: dict[str, list[Any]] = {t.name: [] for t in targets}
        for round_ in range(args.rounds):
            for t in targets:
                slice_s = args.seconds / args.rounds
                samples[t.name].append(peers.wrk(t.url, t.script or "", slice_s, args.connections))
            print(f"round {round_ + 1}/{args.rounds} done", flush=True)
        rows = [peers.summarize(t.name, samples[t.name]) for t in targets]
    finally:
        for server in reversed(started):
            server.stop()
        sink.shutdown()
        peers.drop(args.admin_url, [name, *copies])
        shutil.rmtree(tmp, ignore_errors=True)
    _print(rows)
    print(f"\n{Sink.exports} OTLP exports received")


def _token() -> str:
    from chorus.auth import mint_token

    return mint_token(peers.SECRET, "reader")


def _target(name: str, server: Any, gids: list[str]) -> Any:
    """peers.py's Chorus row; every row must answer the same pages (checked there)."""
    global _EXPECTED
    if _EXPECTED is None:
        answers = {g: peers.chorus_answer(server.url, _token(), g) for g in gids}
        _EXPECTED = {g: peers.chorus_titles(r) for g, r in answers.items()}
    return peers.chorus_target(name, server, gids, _EXPECTED)


_EXPECTED: dict[str, list[str]] | None = None


def _print(rows: list[Any]) -> None:
    base = {r.name.split(",")[0]: r.rps for r in rows if r.name.endswith("off")}
    print()
    head = ("row", "req/s", "p50 ms", "p99 ms", "on / off")
    print("| {:<22} | {:>8} | {:>7} | {:>7} | {:>8} |".format(*head))
    print(f"|{'-' * 24}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 10}|")
    for r in rows:
        ratio = "1" if r.name.endswith("off") else f"{r.rps / base[r.name.split(',')[0]]:.3f}"
        note = f" {r.note}" if r.note else ""
        cells = f"| {r.name:<22} | {r.rps:8.1f} | {r.p50_ms:7.2f} | {r.p99_ms:7.2f} |"
        print(f"{cells} {ratio:>8} |{note}")


async def strawberry_rows(rounds: int, requests: int) -> None:
    """Off, Chorus's spans, and strawberry's per-resolver spans on top: ms per cold page."""
    import time

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from strawberry.extensions.tracing import OpenTelemetryExtension

    from chorus.settings import Settings

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    peers.servers_module()
    from tests.integration.test_raced_reads import running

    tmp = Path(tempfile.mkdtemp(prefix="chorus-tracing-"))
    url = f"sqlite+aiosqlite:///{tmp / 'chorus.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    imported = peers.chorus_import(
        {
            **env,
            "CHORUS_DATABASE_URL": url,
            "CHORUS_DATA_DIR": str(tmp),
            "CHORUS_JWT_SECRET": peers.SECRET,
        }
    )
    gids = [gid for gid, n in imported if n >= peers.PAGE]
    cold = Settings(
        database_url=url, data_dir=str(tmp), jwt_secret=peers.SECRET, response_cache=False
    )
    hot = Settings(database_url=url, data_dir=str(tmp), jwt_secret=peers.SECRET)
    headers = {"Authorization": f"Bearer {_token()}"}

    async def per_request_ms(client: Any) -> float:
        started = time.perf_counter()
        for i in range(requests):
            body = {"query": peers.CHORUS_QUERY, "variables": {"id": gids[i % len(gids)]}}
            answer = await client.post("/graphql", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            assert "errors" not in answer.json(), answer.text
        return (time.perf_counter() - started) * 1000 / requests

    times: dict[str, list[float]] = {
        "cold, off": [],
        "cold, Chorus spans": [],
        "cold, + strawberry per field": [],
        "hot, off": [],
        "hot, Chorus spans": [],
    }
    async with running(cold) as (client, _), running(hot) as (cached, _):
        await per_request_ms(client)  # warm-up
        await per_request_ms(cached)
        for _ in range(rounds):
            times["cold, off"].append(await per_request_ms(client))
            times["hot, off"].append(await per_request_ms(cached))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
    async with (
        running(cold) as (ours, _),
        running(cold) as (fields, _),
        running(hot) as (cached, _),
    ):
        graphql = _starlette(fields._transport.app).state.graphql  # type: ignore[attr-defined]
        graphql.schema.extensions = (*graphql.schema.extensions, OpenTelemetryExtension)
        for client in (ours, fields, cached):
            await per_request_ms(client)
        for _ in range(rounds):
            times["cold, Chorus spans"].append(await per_request_ms(ours))
            times["cold, + strawberry per field"].append(await per_request_ms(fields))
            times["hot, Chorus spans"].append(await per_request_ms(cached))
    provider.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n50-entry page on SQLite over ASGI, {requests} sequential requests x {rounds}, best")
    print("| {:<30} | {:>10} | {:>8} |".format("row", "ms / req", "× off"))
    print(f"|{'-' * 32}|{'-' * 12}|{'-' * 10}|")
    for name, values in times.items():
        off = min(times[name.split(",")[0] + ", off"])
        print(f"| {name:<30} | {min(values):10.3f} | {min(values) / off:8.3f} |")


def _starlette(app: Any) -> Any:
    while not hasattr(app, "state"):
        app = app.app
    return app


if __name__ == "__main__":
    main()
