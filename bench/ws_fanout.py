"""Live updates over real WebSockets: commit → delivery at 1,000 / 5,000 subscribers.

Chorus: ``chorus serve`` (embedded profile, a temporary SQLite file) in a
subprocess; one PUBLIC playlist; each subscriber its own user (its own JWT)
and its own ``graphql-transport-ws`` socket subscribing to ``playlistEvents``
with the same document and variables. The clients are spread over
``--procs`` processes (``websockets`` library) so that no one client process
is the bottleneck. Once every socket subscribed and the server has gone idle
(under a quarter of a core for 3 seconds: every subscribe's catch-up read done),
``--commits`` ``addEntries`` (one media each) run one
at a time; the next starts once every subscriber got the last one, or after
5 s. A sample is the time from just before the mutation is sent to the
moment one client decoded that version's ``next`` frame (one clock: same
machine).

Baseline, same run, same clients, same N: a bare ``websockets`` server that
acknowledges ``connection_init``, remembers each socket's ``subscribe`` id
and, told to by the bench, encodes a ``next`` frame with each socket's id
and the payload Chorus sent for that version (captured from a client: the
same bytes) and sends it to every socket. No SQL, no GraphQL.

Prints per N and per server: p50 / p99 of all samples, the slowest
subscriber (median over commits of each commit's last delivery), the
deliveries missing 3 s after the last commit, and the server's resident
memory per socket (RSS after all subscribed minus before, / N); then the
ratios Chorus / bare. Each commit's p50 and last delivery go to stderr.

    python bench/ws_fanout.py [--sizes 1000,5000] [--commits 10] [--procs 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import SynchronizedArray
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from chorus.auth import mint_token

SECRET = "bench-secret-" + "x" * 40
SUBSCRIPTION = """
subscription Live($id: ID!, $since: Int!) {
  playlistEvents(playlistId: $id, sinceVersion: $since) {
    __typename
    ... on PlaylistChanged {
      playlistId version operationId committedAt actor { id }
      changes {
        __typename
        ... on EntriesAdded {
          entries { id positionKey mediaId media { id title artists album durationMs } }
        }
      }
    }
    ... on ResyncRequired { playlistId currentVersion reason }
  }
}
"""
CREATE = """mutation C($input: CreatePlaylistInput!) { createPlaylist(input: $input) {
  version playlist { id } userErrors { code message } } }"""
ADD = """mutation A($input: AddEntriesInput!) { addEntries(input: $input) {
  version userErrors { code message } } }"""


# --- the clients -------------------------------------------------------------------


def _client_main(
    url: str,
    users: list[str],
    playlist_id: str,
    counts: SynchronizedArray[int],
    pipe: Connection,
) -> None:
    asyncio.run(_clients(url, users, playlist_id, counts, pipe))


async def _clients(
    url: str,
    users: list[str],
    playlist_id: str,
    counts: SynchronizedArray[int],
    pipe: Connection,
) -> None:
    received: list[tuple[int, float]] = []
    sample: dict[int, str] = {}
    gate = asyncio.Semaphore(32)
    ready = 0
    done = asyncio.Event()

    async def one(n: int, user: str) -> None:
        nonlocal ready
        async with gate:
            ws = await connect(url, subprotocols=["graphql-transport-ws"], max_size=None)  # type: ignore[list-item]
            token = mint_token(SECRET, user) if user else ""
            await ws.send(
                json.dumps(
                    {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
                )
            )
            ack = json.loads(await ws.recv())
            assert ack["type"] == "connection_ack", ack
            variables = {"id": playlist_id, "since": 0}
            payload = {"query": SUBSCRIPTION, "variables": variables, "operationName": "Live"}
            await ws.send(json.dumps({"id": f"op-{n}", "type": "subscribe", "payload": payload}))
        ready += 1
        if ready == len(users):
            pipe.send("ready")
        try:
            while True:
                text = await ws.recv()
                at = time.time()
                frame = json.loads(text)
                if frame.get("type") != "next":
                    continue
                version = frame["payload"]["data"]["playlistEvents"]["version"]
                received.append((version, at))
                if version not in sample:
                    sample[version] = json.dumps(frame["payload"])
                with counts.get_lock():
                    counts[version] += 1
        except Exception:
            return

    tasks = [asyncio.create_task(one(n, u)) for n, u in enumerate(users)]
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, pipe.recv)  # "report"
    pipe.send((received, sample))
    done.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# --- the bare baseline -------------------------------------------------------------


async def _bare_server(port: int) -> None:
    sockets: dict[ServerConnection, str] = {}

    async def handler(ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            await _serve_one(ws)
        sockets.pop(ws, None)

    async def _serve_one(ws: ServerConnection) -> None:
        async for text in ws:
            message = json.loads(text)
            kind = message.get("type")
            if kind == "connection_init":
                await ws.send(json.dumps({"type": "connection_ack"}))
            elif kind == "subscribe":
                sockets[ws] = message["id"]
            elif kind == "broadcast":  # from the bench: send this payload to everyone
                payload = message["payload"]
                for sock, op_id in list(sockets.items()):
                    frame = json.dumps({"id": op_id, "type": "next", "payload": payload})
                    try:
                        await sock.send(frame)
                    except Exception:
                        continue

    async with serve(handler, "127.0.0.1", port, max_size=None):
        await asyncio.Future()


# --- one run -----------------------------------------------------------------------


@dataclass
class Row:
    server: str
    n: int
    p50_ms: float
    p99_ms: float
    slowest_ms: float
    missing: int
    kib_per_socket: float


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


IDLE_CPU = 0.25
"""Share of a core under which a second counts as idle. Not near zero: 5,000
open sockets keep a steady background (keep-alive pings, the presence
heartbeat of each playlistEvents subscriber: 10 to 16% of a core)."""


def _wait_idle(pid: int, timeout_s: float = 120.0) -> None:
    """Until the server stayed under IDLE_CPU for 3 seconds in a row (its set-up work is done)."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        before = _cpu_s(pid)
        time.sleep(1.0)
        quiet = quiet + 1 if _cpu_s(pid) - before < IDLE_CPU else 0
        if quiet >= 3:
            return
    raise RuntimeError("the server never went idle")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def _run_clients(
    url: str,
    n: int,
    procs: int,
    playlist_id: str,
    commits: int,
    server_pid: int,
    commit: Any,
    label: str,
) -> tuple[Row, dict[int, str]]:
    ctx = mp.get_context("spawn")
    counts: SynchronizedArray[int] = ctx.Array("i", commits + 1)
    users = [f"sub{i}" for i in range(n)]
    workers = []
    rss_before = _rss_kib(server_pid)
    for p in range(procs):
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_client_main, args=(url, users[p::procs], playlist_id, counts, child)
        )
        proc.start()
        workers.append((proc, parent))
    for _, parent in workers:
        if not parent.poll(300):
            raise RuntimeError("clients did not subscribe in time")
        parent.recv()
    _wait_idle(server_pid)  # every subscribe handled (catch-up read, joined the hub)
    rss_after = _rss_kib(server_pid)
    sent: dict[int, float] = {}
    for version in range(1, commits + 1):
        sent[version] = time.time()
        commit(version)
        deadline = time.monotonic() + 5.0
        while counts[version] < n and time.monotonic() < deadline:
            time.sleep(0.005)
    time.sleep(3.0)
    received: list[tuple[int, float]] = []
    samples: dict[int, str] = {}
    for proc, parent in workers:
        parent.send("report")
        got, sample = parent.recv()
        received.extend(got)
        samples.update(sample)
        proc.join(30)
    per_commit: dict[int, list[float]] = {v: [] for v in sent}
    for version, at in received:
        if version in per_commit:
            per_commit[version].append((at - sent[version]) * 1000)
    for version, xs in per_commit.items():
        xs.sort()
        print(
            f"{label} n={n} v{version}: p50 {xs[len(xs) // 2] if xs else float('nan'):.0f} "
            f"max {xs[-1] if xs else float('nan'):.0f} ms",
            file=sys.stderr,
        )
    every = sorted(x for xs in per_commit.values() for x in xs)
    slowest = statistics.median(max(xs) if xs else float("nan") for xs in per_commit.values())
    row = Row(
        label,
        n,
        every[len(every) // 2] if every else float("nan"),
        every[min(len(every) - 1, int(len(every) * 0.99))] if every else float("nan"),
        slowest,
        n * commits - len(every),
        (rss_after - rss_before) / n,
    )
    return row, samples


def run_chorus(n: int, procs: int, commits: int, base: Path) -> tuple[Row, dict[int, str]]:
    port = _free_port()
    data = base / f"chorus-{n}"
    data.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")},
        "CHORUS_DATABASE_URL": f"sqlite+aiosqlite:///{data}/chorus.db",
        "CHORUS_DATA_DIR": str(data),
        "CHORUS_JWT_SECRET": SECRET,
        "CHORUS_PORT": str(port),
        "CHORUS_MAX_CONNECTIONS": str(n + 200),
    }
    log = (data / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "chorus.cli", "serve", "--log-level", "warning"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    print(f"chorus serve pid {server.pid}", file=sys.stderr, flush=True)
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_http(f"{base_url}/healthz")
        http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {mint_token(SECRET, 'owner')}"}
        )

        def gql(query: str, **variables: Any) -> dict[str, Any]:
            body: dict[str, Any] = http.post(
                "/graphql", json={"query": query, "variables": variables}, timeout=30
            ).json()
            return body

        created = gql(
            CREATE,
            input={"operationId": "create", "title": "Bench", "visibility": "PUBLIC"},
        )["data"]["createPlaylist"]
        playlist_id = created["playlist"]["id"]

        def commit(version: int) -> None:
            result = gql(
                ADD,
                input={
                    "operationId": f"add-{version}",
                    "playlistId": playlist_id,
                    "baseVersion": version - 1,
                    "mediaIds": [f"chinook:track:{version}"],
                },
            )["data"]["addEntries"]
            assert result["version"] == version, result

        return _run_clients(
            f"ws://127.0.0.1:{port}/graphql",
            n,
            procs,
            playlist_id,
            commits,
            server.pid,
            commit,
            "chorus",
        )
    finally:
        server.terminate()
        server.wait(30)
        log.close()


def run_bare(n: int, procs: int, commits: int, samples: dict[int, str]) -> Row:
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--bare-server", str(port)])
    try:
        deadline = time.monotonic() + 10
        control = None
        while control is None:
            try:
                control = asyncio.run(_probe(port))
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        loop = asyncio.new_event_loop()
        ws = loop.run_until_complete(connect(f"ws://127.0.0.1:{port}", max_size=None))

        def commit(version: int) -> None:
            payload = json.loads(samples[version])
            loop.run_until_complete(ws.send(json.dumps({"type": "broadcast", "payload": payload})))

        row, _ = _run_clients(
            f"ws://127.0.0.1:{port}", n, procs, "bare", commits, server.pid, commit, "bare"
        )
        loop.run_until_complete(ws.close())
        loop.close()
        return row
    finally:
        server.terminate()
        server.wait(30)


async def _probe(port: int) -> bool:
    async with connect(f"ws://127.0.0.1:{port}"):
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--bare-server", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server is not None:
        asyncio.run(_bare_server(args.bare_server))
        return
    rows: list[tuple[Row, Row]] = []
    with tempfile.TemporaryDirectory(prefix="ws-fanout-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            chorus, samples = run_chorus(n, args.procs, args.commits, Path(tmp))
            missing_samples = [v for v in range(1, args.commits + 1) if v not in samples]
            for v in missing_samples:  # nothing arrived: send the shape of another
                samples[v] = next(iter(samples.values())) if samples else '{"data": null}'
            bare = run_bare(n, args.procs, args.commits, samples)
            rows.append((chorus, bare))
            print(f"done n={n}", file=sys.stderr, flush=True)
    print(
        "| N | server | p50 ms | p99 ms | slowest subscriber ms (median over commits) "
        "| missing | RSS KiB/socket |"
    )
    print("|---|---|---|---|---|---|---|")
    for chorus, bare in rows:
        for r in (chorus, bare):
            print(
                f"| {r.n:,} | {r.server} | {r.p50_ms:.0f} | {r.p99_ms:.0f} | {r.slowest_ms:.0f} "
                f"| {r.missing} | {r.kib_per_socket:.1f} |"
            )
        print(
            f"| {chorus.n:,} | chorus / bare | {chorus.p50_ms / bare.p50_ms:.2f}x "
            f"| {chorus.p99_ms / bare.p99_ms:.2f}x "
            f"| {chorus.slowest_ms / bare.slowest_ms:.2f}x | | |"
        )


if __name__ == "__main__":
    main()
