"""Write throughput over HTTP against the same transaction as raw SQL, in one run.

Chorus is run as a user runs it: one ``chorus serve`` per mode, each on a
temporary PostgreSQL database of its own (migrated by ``serve``, dropped at
the end), embedded events (the in-process relay stamps the outbox). The
embedded profile serves a database from one process (a second ``serve`` is
refused), so ``--processes`` stays 1 here; several API processes are the
full profile's, measured by ``bench/scale.py``. A load process
(its own interpreter, so the server's CPU is not shared with the client's
Python) runs ``--clients`` keep-alive HTTP/1.1 connections, each sending one
``addEntries`` after another: one Chinook media appended, a fresh
``operationId``, ``baseVersion: 0`` (so every edit is rebased), on a playlist
drawn at random from the workload's playlists.

The peer, same run, same server, the same tables in a database of its own
(migrated as Chorus's; Chorus's rows and the peers' do not share tables, nor
the vacuuming their inserts cause): a pgbench script of the
transaction an add is (lock the playlist row, insert the entry, bump the
version, insert the log row, insert the outbox row; the payloads are copied
from the log row and outbox row Chorus committed just before), 16 clients,
prepared statements, on its own playlists made the same way. Its outbox rows
are inserted already published (``published_at`` set): no relay spends the
machine's CPU on the peer's events during its turn.

The bare peer, same run (``bench/bare_writes.py``; ``--no-bare`` leaves it
out): the same transaction behind a raw ASGI app on uvicorn and an asyncpg
pool, as many processes as Chorus's, driven by the same load process, on
playlists of its own. It has no GraphQL, authentication, validation,
idempotency or SQLAlchemy, so it is the most a Python HTTP server reaches on
this machine for this commit: ``/bare`` says how close Chorus comes to it,
and ``bare`` / raw SQL what bounds any Python server's ratio here (the load
process, the server and PostgreSQL share the cores).

Chorus runs twice, side by side, each mode on its own database: with the owner queue
and group commit (``group``) and with one transaction per command
(``plain``, ``CHORUS_GROUP_COMMIT=false``, the path it shortcuts). The
machine's load drifts, so each figure is taken in ``--rounds`` slices and the
contenders take turns (group, plain, pgbench; spread, then hot), each slice
after a 2 s warm-up that is not measured.

Workloads: ``spread`` (``--playlists`` playlists, 18 by default) and ``hot``
(one playlist, a fresh one for each slice: a playlist holds at most 10,000
entries). For each: requests (transactions) per second, p50 and p99
latency in ms, and the ratio Chorus / raw SQL. Every answer is checked: a
request error, a user error or a version that is not rebased counts as a
failure and fails the run.

Then, for every contender, the CPU milliseconds per request: the server's
processes (``chorus serve``, the bare peer; their user + system time from
``/proc``, ``bench/_cpu.py``) and PostgreSQL's (the whole server's, so other
users' queries count too; pgbench's transactions cost only this), over each
slice and its warm-up, divided by every request served in them.

``--sqlite`` adds the embedded profile's figures: Chorus on a SQLite file
(one per mode: the embedded profile serves a file from one process), against
the same transaction run by Python's ``sqlite3`` in a loop on one connection
(SQLite has one writer; WAL, ``synchronous=NORMAL`` as Chorus sets them) in
another process, on the first mode's file.

    python bench/writes.py [--seconds 12] [--rounds 3] [--clients 16] [--processes 1] [--sqlite]
        [--routing playlist|any] [--no-bare]
        [--postgres-url postgresql+asyncpg://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx
import jwt

from _cpu import postmaster_pid
from _metrics import counted
from _writes_load import ADD, MEDIA, USER, WARMUP_S, Sample, figure, load, routed
from _writes_peers import BarePeer, pgbench_runner, sqlite_peer
from _writes_tables import cpu_table, table
from _wrk import Row

if TYPE_CHECKING:
    from tests.servers import ChorusServer

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CREATE = (
    "mutation Create($input: CreatePlaylistInput!) { createPlaylist(input: $input) "
    "{ version playlist { id } userErrors { code message } } }"
)


def token(secret: str, user: str = USER) -> str:
    return jwt.encode({"sub": user, "exp": int(time.time()) + 7200}, secret, algorithm="HS256")


# --- Chorus -----------------------------------------------------------------


def graphql(url: str, authorization: str, query: str, **variables: Any) -> dict[str, Any]:
    response = httpx.post(
        url,
        json={"query": query, "variables": variables},
        headers={"Authorization": authorization},
        timeout=30,
    )
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(body["errors"])
    data: dict[str, Any] = body["data"]
    return data


def create_playlists(server: ChorusServer, authorization: str, count: int) -> list[str]:
    """``count`` playlists made through the API, each with one first entry; their global ids."""
    ids = []
    for n in range(count):
        created = graphql(
            server.url,
            authorization,
            CREATE,
            input={"operationId": uuid.uuid4().hex, "title": f"Bench {n}"},
        )["createPlaylist"]
        assert not created["userErrors"], created
        playlist_id = created["playlist"]["id"]
        added = graphql(
            server.url,
            authorization,
            ADD,
            input={
                "playlistId": playlist_id,
                "operationId": uuid.uuid4().hex,
                "baseVersion": 0,
                "mediaIds": [MEDIA],
            },
        )["addEntries"]
        assert not added["userErrors"], added
        ids.append(playlist_id)
    return ids


class Servers:
    """``processes`` ``chorus serve`` on one database, routed by playlist id or not at all."""

    def __init__(self, database_url: str, data_dir: Path, processes: int, **env: str) -> None:
        from tests.servers import TEST_SECRET, ChorusServer

        self.secret = TEST_SECRET
        self.servers = [
            ChorusServer(database_url, data_dir, **env) for _ in range(max(1, processes))
        ]

    def __enter__(self) -> Servers:
        try:
            for server in self.servers:
                server.start(timeout_s=60)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for server in self.servers:
            server.stop()

    def routes(self, playlist_ids: list[str], routing: str) -> dict[str, tuple[int, ...]]:
        """Where each playlist's requests go: its owner process, ``crc32(id) % processes``
        (``routing`` ``playlist``), or any process (``any``)."""
        return routed(playlist_ids, [s.port for s in self.servers], routing)


@dataclass
class Chorus:
    """One way of running Chorus (a ``CHORUS_GROUP_COMMIT`` mode): servers and playlists."""

    servers: Servers
    authorization: str
    routes: dict[str, dict[str, tuple[int, ...]]]
    """Workload → its playlists' routes."""


def started(
    database_url: str, data_dir: Path, args: argparse.Namespace, mode: str, **env: str
) -> Servers:
    return Servers(
        database_url, data_dir / mode, args.processes, CHORUS_GROUP_COMMIT=MODES[mode], **env
    )


def prepared(servers: Servers, args: argparse.Namespace) -> Chorus:
    authorization = f"Bearer {token(servers.secret)}"
    first = servers.servers[0]
    spread = create_playlists(first, authorization, args.playlists)
    hot = create_playlists(first, authorization, 1)
    return Chorus(
        servers,
        authorization,
        {"spread": servers.routes(spread, args.routing), "hot": servers.routes(hot, args.routing)},
    )


def interleaved(
    chorus: dict[str, Chorus],
    peers: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    db_pids: Sequence[int] = (),
) -> tuple[dict[str, dict[str, Row]], dict[str, dict[str, Row]]]:
    """``--rounds`` rounds of short slices: each mode and each peer in turn, per workload.

    ``peers`` maps a peer's name to its workloads' runners (``seconds → Sample``).
    The machine's load drifts (other processes); taking turns gives every
    contender the same share of it, so the ratios hold even when the rates move.
    """
    seconds = args.seconds / args.rounds
    samples: dict[str, dict[str, list[Sample]]] = {
        m: {"spread": [], "hot": []} for m in [*chorus, *peers]
    }
    for _ in range(args.rounds):
        for workload in ("spread", "hot"):
            for mode, c in chorus.items():
                pids = [s.process.pid for s in c.servers.servers if s.process is not None]
                if workload == "hot":
                    # A fresh playlist per slice: a playlist holds at most 10,000 entries
                    # (LIMIT_EXCEEDED), which one playlist for the whole run reached at
                    # ~700 commits/s with the default 12 s in 3 slices plus warm-ups.
                    fresh = create_playlists(c.servers.servers[0], c.authorization, 1)
                    c.routes["hot"] = c.servers.routes(fresh, args.routing)
                sample = load(
                    c.routes[workload], c.authorization, args.clients, seconds, pids, db_pids
                )
                samples[mode][workload].append(sample)
            for name, runners in peers.items():
                samples[name][workload].append(runners[workload](seconds))
    figures = {m: {w: figure(w, x) for w, x in by.items()} for m, by in samples.items()}
    return {m: figures[m] for m in chorus}, {p: figures[p] for p in peers}


def said_group_commits(mode: str, base_urls: list[str]) -> None:
    """Print the servers' ``chorus_group_commits_total`` by path and
    ``chorus_group_commit_fallbacks_total`` by reason, summed (docs/semantics.md): how
    many groups were one statement, and why the others were not."""
    counts = counted(base_urls, "chorus_group_commits_total") | counted(
        base_urls, "chorus_group_commit_fallbacks_total"
    )
    said = ", ".join(f"{label} {count}" for label, count in counts.items())
    print(f"{mode}: group commits and fallbacks: {said}", file=sys.stderr, flush=True)


# --- the run ------------------------------------------------------------------


MODES = {"group": "true", "plain": "false"}
"""``CHORUS_GROUP_COMMIT`` of each way Chorus is measured: owner queue and group commit,
or the one-transaction-per-command path it shortcuts."""


def positive(kind: type[int] | type[float]) -> Any:
    """An argparse type: a finite number of ``kind`` above zero."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be above 0 and finite, not {text}")
        return value

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=positive(float), default=12.0, help="measured seconds per figure"
    )
    parser.add_argument(
        "--rounds", type=positive(int), default=3, help="slices each figure is taken in"
    )
    parser.add_argument("--clients", type=positive(int), default=16)
    parser.add_argument("--processes", type=positive(int), default=1, help="chorus serve processes")
    parser.add_argument(
        "--routing",
        choices=["playlist", "any"],
        default="playlist",
        help="playlist: each to its owner process, crc32(id) %% processes; any: round robin",
    )
    parser.add_argument("--playlists", type=positive(int), default=18, help="playlists of 'spread'")
    parser.add_argument("--sqlite", action="store_true", help="also the embedded profile")
    parser.add_argument(
        "--postgres-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument(
        "--no-bare", action="store_true", help="leave out the bare HTTP peer (bare_writes.py)"
    )
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for serve")
    parser.add_argument(
        "--modes", default="group,plain", help="comma-separated: group (owner queue), plain"
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: a comma-separated list of {', '.join(MODES)}, not {args.modes!r}")
    if any("=" not in item or not item.split("=", 1)[0] for item in args.env):
        parser.error("--env: NAME=VALUE")
    env = dict(item.split("=", 1) for item in args.env)
    if args.processes > 1:
        parser.error(
            "--processes: the embedded profile serves a database from one process "
            "(a second chorus serve is refused); bench/scale.py measures several "
            "API processes on the full profile"
        )
    os.environ["CHORUS_TEST_POSTGRES_URL"] = args.postgres_url
    from tests.servers import create_database, drop_database, postgres_url

    from chorus.db.migrate import upgrade

    try:
        name = create_database()
    except (OSError, asyncpg.PostgresError) as error:
        raise SystemExit(f"PostgreSQL at {args.postgres_url}: {error}") from None
    print(
        f"{args.clients} clients, {args.seconds:.0f} s measured per figure in {args.rounds} "
        f"slices taken in turn (each after a {WARMUP_S:.0f} s warm-up), "
        f"{args.processes} chorus serve process(es) per mode routed by {args.routing}, "
        f"{os.cpu_count()} cores"
    )
    made: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        try:
            # The first mode on the database pgbench uses too (its tables are made by
            # Chorus's migrations); each other mode on a database of its own.
            names = [name, *(create_database() for _ in modes[1:])]
            made.extend(names[1:])
            chorus = {
                m: prepared(
                    stack.enter_context(started(postgres_url(db), Path(tmp), args, m, **env)),
                    args,
                )
                for m, db in zip(modes, names, strict=True)
            }
            dsn = postgres_url(name, "postgresql")
            # The peers write to a database of their own, migrated like Chorus's: their
            # rows (and the vacuuming they cause) stay out of a Chorus database, whose
            # slices count the whole server's CPU.
            peer_name = create_database()
            made.append(peer_name)
            upgrade(postgres_url(peer_name))
            peer_dsn = postgres_url(peer_name, "postgresql")
            postmaster = asyncio.run(postmaster_pid(dsn))
            db = [postmaster] if postmaster else []
            peers: dict[str, dict[str, Any]] = {
                "raw": {
                    w: pgbench_runner(
                        peer_dsn, peer_name, count, args.clients, Path(tmp), db, rows_dsn=dsn
                    )
                    for w, count in (("spread", args.playlists), ("hot", 1))
                }
            }
            if not args.no_bare:
                peers["bare"] = {
                    w: stack.enter_context(
                        contextlib.closing(
                            BarePeer(
                                peer_dsn,
                                count,
                                args.processes,
                                args.routing,
                                args.clients,
                                Path(tmp),
                                db,
                                rows_dsn=dsn,
                            )
                        )
                    )
                    for w, count in (("spread", args.playlists), ("hot", 1))
                }
            figures, measured = interleaved(chorus, peers, args, db)
            for mode, c in chorus.items():
                said_group_commits(mode, [s.base_url for s in c.servers.servers])
        finally:
            try:
                stack.close()
            finally:
                for db in [name, *made]:
                    drop_database(db)
        table("PostgreSQL: Chorus over HTTP against pgbench", figures, measured, targets=True)
        cpu_table(figures, measured)
        if args.sqlite:
            # One file per mode: the embedded profile serves a file from one process.
            files = {m: Path(tmp) / "sqlite" / m / "chorus.db" for m in modes}
            path = files[modes[0]]  # the peer's tables are made by Chorus's migrations
            with contextlib.ExitStack() as lite:
                chorus = {
                    m: prepared(
                        lite.enter_context(
                            started(
                                f"sqlite+aiosqlite:///{files[m]}", files[m].parent, args, m, **env
                            )
                        ),
                        args,
                    )
                    for m in modes
                }
                sqlite_peers = {
                    "spread": lambda seconds: sqlite_peer(path, args.playlists, seconds),
                    "hot": lambda seconds: sqlite_peer(path, 1, seconds),
                }
                figures, measured = interleaved(chorus, {"raw": sqlite_peers}, args)
            table("SQLite: Chorus over HTTP against sqlite3 in a loop", figures, measured, False)
            cpu_table(figures, {})


if __name__ == "__main__":
    main()
