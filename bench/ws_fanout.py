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
same bytes) and sends it to every socket. No SQL, no GraphQL; no
compression on either (Chorus's default, CHORUS_WS_PER_MESSAGE_DEFLATE off).

Full profile (``--profile full``; ``both`` runs the embedded row too, then
the full one, against one bare baseline): PostgreSQL, Kafka and Redis, started
for the run and gone at the end, also on failure, Ctrl-C or SIGTERM (see
``bench/ws_full.py``): a Tansu broker (``CHORUS_KAFKA_IDEMPOTENT_PRODUCER=false``),
a new database on 127.0.0.1:5432 (user postgres) migrated to head, an empty
database number of the Redis on 127.0.0.1:6379 (only the bench playlists'
keys are deleted at the end, nothing is flushed), one ``chorus relay`` and one
``chorus fanout``. Per N, ``--api-procs`` ``chorus serve`` processes on
their own ports: subscriber ``i`` connects to process ``i % api-procs``,
commits go to the first, so every delivery crossed outbox → relay → Kafka →
fanout → Redis pub/sub → an API process. One warm-up commit waits for its
event on Redis first (the fanout joins its group after it starts). Memory
per socket is summed over the API processes; idle means each of them is.
The separate relay finds a commit by polling the outbox every 0.5 s (it is
notified only inside the committing process), and the commits, one at a time,
keep in step with that poll: expect about 0.5 s per delivery.

Prints per N and per server: p50 / p99 of all samples, the slowest
subscriber (median over commits of each commit's last delivery), the
deliveries missing 3 s after the last commit, the server's resident
memory per socket (RSS after all subscribed minus before, / N), and the
server's CPU microseconds per delivery (its processes' user + system time
from the first commit to the last delivery or the 5 s wait, over the
deliveries: the API processes' or gateways', not the relay's or fanout's);
then the ratios Chorus / bare. Each commit's p50 and last delivery go to stderr, and
so does a count of frames other than versions (and, with ``--gateways``, the
gateways' ``chorus_subscription_catch_ups_total`` by reason) (a slow consumer's
``ResyncRequired``, which ends what that subscriber counts; an error).

    python bench/ws_fanout.py [--sizes 1000,5000] [--commits 10] [--procs 8]
    python bench/ws_fanout.py --profile full --api-procs 4 --sizes 10000
    python bench/ws_fanout.py --profile full --gateways 2 --sizes 20000

Gateways (``--gateways G``, full profile): the sockets are held by ``G``
``chorus serve --role gateway`` processes (subscriber ``i`` on gateway
``i % G``) and the commits go to one ``chorus serve --role api``, so every
delivery crossed API → outbox → relay → Kafka → fanout → Redis → a gateway;
the bare baseline then runs as ``G`` processes too (subscriber ``i`` on
process ``i % G``, each told to broadcast every commit), as one process may
hold only as many sockets as its open-files limit allows. That limit is raised
(``setrlimit``: the soft one up to the hard one, the hard one too where
allowed) to room for both ends of every socket.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import multiprocessing as mp
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import SynchronizedArray
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from _metrics import counted
from chorus.auth import mint_token

if TYPE_CHECKING:
    from ws_full import FullDeployment

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
    targets: list[tuple[str, str]],
    playlist_id: str,
    counts: SynchronizedArray[int],
    pipe: Connection,
) -> None:
    asyncio.run(_clients(targets, playlist_id, counts, pipe))


async def _clients(
    targets: list[tuple[str, str]],
    playlist_id: str,
    counts: SynchronizedArray[int],
    pipe: Connection,
) -> None:
    received: list[tuple[int, float]] = []
    stops: collections.Counter[str] = collections.Counter()
    sample: dict[int, str] = {}
    gate = asyncio.Semaphore(32)
    ready = 0
    done = asyncio.Event()

    async def one(n: int, url: str, user: str) -> None:
        nonlocal ready
        try:
            async with gate:
                ws = await _connect(url)
                token = mint_token(SECRET, user) if user else ""
                init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
                await ws.send(json.dumps(init))
                ack = json.loads(await ws.recv())
                assert ack["type"] == "connection_ack", ack
                variables = {"id": playlist_id, "since": 0}
                payload = {"query": SUBSCRIPTION, "variables": variables, "operationName": "Live"}
                message = {"id": f"op-{n}", "type": "subscribe", "payload": payload}
                await ws.send(json.dumps(message))
        except Exception as error:  # counted, and its deliveries count as missing
            stops[f"not subscribed ({type(error).__name__})"] += 1
            return
        finally:
            ready += 1
            if ready == len(targets):
                pipe.send("ready")
        try:
            while True:
                text = await ws.recv()
                at = time.time()
                frame = json.loads(text)
                if frame.get("type") != "next":
                    said = ""
                    if frame.get("type") == "error" and isinstance(frame.get("payload"), list):
                        first = frame["payload"][0] if frame["payload"] else {}
                        code = (first.get("extensions") or {}).get("code", "")
                        said = f" ({code}: {str(first.get('message', ''))[:80]})"
                    stops[f"{frame.get('type')} frame{said}"] += 1
                    continue
                event = frame["payload"]["data"]["playlistEvents"]
                if event["__typename"] != "PlaylistChanged":
                    # A slow consumer told to resync: it gets nothing more on this
                    # subscription, and its missing deliveries are explained here.
                    stops[f"{event['__typename']} ({event.get('reason')})"] += 1
                    return
                version = event["version"]
                received.append((version, at))
                if version not in sample:
                    sample[version] = json.dumps(frame["payload"])
                with counts.get_lock():
                    counts[version] += 1
        except Exception:
            return

    tasks = [asyncio.create_task(one(n, url, u)) for n, (url, u) in enumerate(targets)]
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, pipe.recv)  # "report"
    pipe.send((received, sample, dict(stops)))
    done.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _connect(url: str, attempts: int = 5) -> Any:
    """A socket to ``url``, tried again after a refusal or a timeout: on a loaded machine a
    handshake among thousands may take longer than the library's 10 s, and a subscriber
    that never connects would leave the bench waiting for "ready"."""
    for attempt in range(attempts):
        try:
            return await connect(
                url,
                subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
                max_size=None,
                open_timeout=60,
            )
        except (OSError, TimeoutError):
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


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

    # Uncompressed, as Chorus answers by default (CHORUS_WS_PER_MESSAGE_DEFLATE off):
    # the same bytes on the wire, and neither side pays a zlib context per socket.
    async with serve(handler, "127.0.0.1", port, max_size=None, compression=None):
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
    cpu_us_per_delivery: float


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


def _wait_idle(pids: list[int], timeout_s: float = 120.0, threshold: float = IDLE_CPU) -> None:
    """Until each server stayed under ``threshold`` cores for 3 seconds in a row (its set-up
    work is done)."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        before = [_cpu_s(pid) for pid in pids]
        time.sleep(1.0)
        busy = any(_cpu_s(pid) - b >= threshold for pid, b in zip(pids, before, strict=True))
        quiet = 0 if busy else quiet + 1
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
    urls: list[str],
    n: int,
    procs: int,
    playlist_id: str,
    commits: int,
    server_pids: list[int],
    commit: Any,
    label: str,
) -> tuple[Row, dict[int, str]]:
    """Subscriber ``i`` connects to ``urls[i % len(urls)]``; RSS is summed over ``server_pids``."""
    ctx = mp.get_context("spawn")
    counts: SynchronizedArray[int] = ctx.Array("i", commits + 1)
    targets = [(urls[i % len(urls)], f"sub{i}") for i in range(n)]
    workers = []
    rss_before = sum(_rss_kib(pid) for pid in server_pids)
    try:
        for p in range(procs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_client_main, args=(targets[p::procs], playlist_id, counts, child)
            )
            proc.start()
            workers.append((proc, parent))
        for _, parent in workers:
            if not parent.poll(300):
                raise RuntimeError("clients did not subscribe in time")
            parent.recv()
        # Every subscribe handled (catch-up read, joined the hub). The background grows with
        # the sockets a process holds: IDLE_CPU is for 5,000, scaled up past that.
        per_server = n / max(1, len(server_pids))
        _wait_idle(server_pids, 300.0, max(IDLE_CPU, IDLE_CPU * per_server / 5000))
        rss_after = sum(_rss_kib(pid) for pid in server_pids)
        sent: dict[int, float] = {}
        cpu_before = sum(_cpu_s(pid) for pid in server_pids)
        for version in range(1, commits + 1):
            sent[version] = time.time()
            commit(version)
            deadline = time.monotonic() + 5.0
            while counts[version] < n and time.monotonic() < deadline:
                time.sleep(0.005)
        cpu_spent = sum(_cpu_s(pid) for pid in server_pids) - cpu_before
        time.sleep(3.0)
        received: list[tuple[int, float]] = []
        samples: dict[int, str] = {}
        stops: collections.Counter[str] = collections.Counter()
        for proc, parent in workers:
            parent.send("report")
            got, sample, stopped = parent.recv()
            received.extend(got)
            samples.update(sample)
            stops.update(stopped)
            proc.join(30)
    finally:  # a failure or Ctrl-C leaves no client process behind
        for proc, _ in workers:
            if proc.is_alive():
                proc.terminate()
                proc.join(10)
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
    if stops:
        said = ", ".join(f"{k}: {v}" for k, v in sorted(stops.items()))
        print(f"{label} n={n}: frames other than versions: {said}", file=sys.stderr)
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
        cpu_spent * 1e6 / max(1, len(every)),
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
        api = Api(base_url)
        playlist_id = api.create_playlist()
        return _run_clients(
            [f"ws://127.0.0.1:{port}/graphql"],
            n,
            procs,
            playlist_id,
            commits,
            [server.pid],
            lambda version: api.add(playlist_id, version),
            "chorus",
        )
    finally:
        server.terminate()
        server.wait(30)
        log.close()
        _show_log_problems(data / "serve.log")


def _show_log_problems(path: Path, shown: int = 5) -> None:
    """The server's first warnings and errors, to stderr (the log goes with the temp folder)."""
    lines = path.read_text(errors="replace").splitlines()
    problems = [line for line in lines if "WARNING" in line or "ERROR" in line]
    for line in problems[:shown]:
        print(f"  serve.log: {line[:300]}", file=sys.stderr)
    if len(problems) > shown:
        print(f"  serve.log: … {len(problems) - shown} more", file=sys.stderr)


def run_chorus_full(
    n: int, procs: int, commits: int, deployment: FullDeployment, api_procs: int
) -> tuple[Row, dict[int, str]]:
    """As :func:`run_chorus`, over ``api_procs`` new ``chorus serve`` of ``deployment``.

    Commits go to the first API process; subscriber ``i`` is on process ``i % api_procs``.
    """
    with deployment.api(n, api_procs) as servers:
        pids = [s.process.pid for s in servers if s.process is not None]
        print(f"chorus serve pids {pids}", file=sys.stderr, flush=True)
        api = Api(servers[0].base_url)
        run = uuid.uuid4().hex[:8]  # the database outlives a size: ids of its own
        warm_up = api.create_playlist(f"-{run}-warm-up")
        deployment.forget(warm_up)
        took = deployment.wait_live(warm_up, lambda: api.add(warm_up, 1))
        print(f"first event through the fanout after {took:.1f}s", file=sys.stderr, flush=True)
        playlist_id = api.create_playlist(f"-{run}")
        deployment.forget(playlist_id)
        return _run_clients(
            [s.url.replace("http://", "ws://") for s in servers],
            n,
            procs,
            playlist_id,
            commits,
            pids,
            lambda version: api.add(playlist_id, version),
            f"chorus full, {api_procs} API",
        )


class Api:
    """GraphQL over HTTP to one Chorus process, as the playlist's owner.

    Operation ids are ``create<tag>`` and ``add<tag>-<version>``: one owner
    making several playlists (the full profile's database outlives a size)
    gives each its own ``tag``.
    """

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {mint_token(SECRET, 'owner')}"}
        )
        self.tags: dict[str, str] = {}

    def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        body: dict[str, Any] = self.http.post(
            "/graphql", json={"query": query, "variables": variables}, timeout=30
        ).json()
        return body

    def create_playlist(self, tag: str = "") -> str:
        created = self.gql(
            CREATE,
            input={"operationId": f"create{tag}", "title": "Bench", "visibility": "PUBLIC"},
        )["data"]["createPlaylist"]
        playlist_id = str(created["playlist"]["id"])
        self.tags[playlist_id] = tag
        return playlist_id

    def add(self, playlist_id: str, version: int) -> None:
        """Add ``chinook:track:<version>``, expecting it to make ``version``."""
        result = self.gql(
            ADD,
            input={
                "operationId": f"add{self.tags[playlist_id]}-{version}",
                "playlistId": playlist_id,
                "baseVersion": version - 1,
                "mediaIds": [f"chinook:track:{version}"],
            },
        )["data"]["addEntries"]
        assert result["version"] == version, result


def run_chorus_gateways(
    n: int, procs: int, commits: int, deployment: FullDeployment, gateways: int
) -> tuple[Row, dict[int, str]]:
    """As :func:`run_chorus_full`, with API processes and gateways apart (docs/deploying.md):
    one ``chorus serve --role api`` takes the commits, ``gateways`` ``--role gateway`` hold
    the sockets (subscriber ``i`` on gateway ``i % gateways``); RSS and idleness are the
    gateways'."""
    with (
        deployment.api(0, 1, role="api") as (api_server,),
        deployment.api(n, gateways, role="gateway") as servers,
    ):
        pids = [s.process.pid for s in servers if s.process is not None]
        print(f"chorus gateway pids {pids}", file=sys.stderr, flush=True)
        api = Api(api_server.base_url)
        run = uuid.uuid4().hex[:8]
        warm_up = api.create_playlist(f"-{run}-warm-up")
        deployment.forget(warm_up)
        took = deployment.wait_live(warm_up, lambda: api.add(warm_up, 1))
        print(f"first event through the fanout after {took:.1f}s", file=sys.stderr, flush=True)
        playlist_id = api.create_playlist(f"-{run}")
        deployment.forget(playlist_id)
        label = f"chorus full, {gateways} gateways"
        result = _run_clients(
            [s.url.replace("http://", "ws://") for s in servers],
            n,
            procs,
            playlist_id,
            commits,
            pids,
            lambda version: api.add(playlist_id, version),
            label,
        )
        _said_catch_ups(label, n, [s.base_url for s in servers])
        return result


def _said_catch_ups(label: str, n: int, base_urls: list[str]) -> None:
    """Print the gateways' ``chorus_subscription_catch_ups_total`` by reason, summed: the
    streams that read the log from SQL (``subscribe``: one per subscriber; ``lost``: a
    quiet stream whose version did not come, docs/api.md)."""
    counts = counted(base_urls, "chorus_subscription_catch_ups_total")
    said = ", ".join(f"{reason} {count}" for reason, count in sorted(counts.items()))
    print(f"{label} n={n}: catch-ups from SQL: {said}", file=sys.stderr, flush=True)


def raise_open_files(n: int) -> None:
    """Lift this process's limit of open files (inherited by the clients and servers it
    starts) to room for ``n`` sockets on each side: the soft limit up to the hard one, and the
    hard one too where allowed (root); the limit reached goes to stderr."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * n + 1024
    if wanted > hard != resource.RLIM_INFINITY:
        try:  # root may raise the hard limit too (up to the kernel's fs.nr_open)
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            _said_open_files()
            return
        except (ValueError, OSError):
            wanted = hard
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    _said_open_files()


def _said_open_files() -> None:
    print(
        f"open files: soft limit {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}",
        file=sys.stderr,
    )


def run_bare(n: int, procs: int, commits: int, samples: dict[int, str], servers: int = 1) -> Row:
    """The bare baseline over ``servers`` processes (subscriber ``i`` on ``i % servers``), each
    told to broadcast every commit: one per gateway, as a process may hold only so many
    sockets (the open-files limit)."""
    ports = [_free_port() for _ in range(servers)]
    started = [subprocess.Popen([sys.executable, __file__, "--bare-server", str(p)]) for p in ports]
    try:
        for port in ports:
            deadline = time.monotonic() + 120  # a Python start on a loaded machine is slow
            control = None
            while control is None:
                try:
                    control = asyncio.run(_probe(port))
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        loop = asyncio.new_event_loop()
        controls = [
            # No keep-alive pings: the loop runs only while a commit is sent, so minutes of
            # subscribing would leave a ping unanswered and close the control socket.
            loop.run_until_complete(
                connect(f"ws://127.0.0.1:{port}", max_size=None, ping_interval=None)
            )
            for port in ports
        ]

        def commit(version: int) -> None:
            message = json.dumps({"type": "broadcast", "payload": json.loads(samples[version])})

            async def send_all() -> None:
                await asyncio.gather(*(ws.send(message) for ws in controls))

            loop.run_until_complete(send_all())

        row, _ = _run_clients(
            [f"ws://127.0.0.1:{port}" for port in ports],
            n,
            procs,
            "bare",
            commits,
            [server.pid for server in started],
            commit,
            "bare" if servers == 1 else f"bare, {servers} processes",
        )
        for ws in controls:
            loop.run_until_complete(ws.close())
        loop.close()
        return row
    finally:
        for server in started:
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
    parser.add_argument(
        "--profile",
        choices=("embedded", "full", "both"),
        default="embedded",
        help="embedded: one chorus serve on SQLite; full: PostgreSQL, Kafka, Redis, workers",
    )
    parser.add_argument(
        "--api-procs", type=int, default=4, help="chorus serve processes of the full profile"
    )
    parser.add_argument(
        "--gateways",
        type=int,
        default=0,
        help="full profile: this many chorus serve --role gateway hold the sockets and one "
        "--role api takes the commits, instead of --api-procs processes doing both",
    )
    parser.add_argument("--bare-server", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server is not None:
        asyncio.run(_bare_server(args.bare_server))
        return
    if args.api_procs < 1:
        parser.error("--api-procs must be at least 1")
    if args.gateways and args.profile == "embedded":
        parser.error("--gateways needs --profile full (a gateway hears commits over Redis)")
    raise_open_files(max(int(s) for s in args.sizes.split(",")))
    if args.profile != "embedded":
        signal.signal(signal.SIGTERM, _exit)  # stop the deployment's servers still
    rows: list[tuple[list[Row], Row]] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ws-fanout-")))
        deployment = None
        if args.profile != "embedded":
            from ws_full import FullDeployment  # bench/ws_full.py, beside this script

            full = tmp / "full"
            full.mkdir()
            deployment = stack.enter_context(FullDeployment(full, SECRET))
        for n in (int(s) for s in args.sizes.split(",")):
            measured: list[tuple[Row, dict[int, str]]] = []
            if args.profile != "full":
                measured.append(run_chorus(n, args.procs, args.commits, tmp))
            if deployment is not None and args.gateways:
                measured.append(
                    run_chorus_gateways(n, args.procs, args.commits, deployment, args.gateways)
                )
            elif deployment is not None:
                measured.append(
                    run_chorus_full(n, args.procs, args.commits, deployment, args.api_procs)
                )
            samples = measured[0][1]
            missing_samples = [v for v in range(1, args.commits + 1) if v not in samples]
            for v in missing_samples:  # nothing arrived: send the shape of another
                samples[v] = next(iter(samples.values())) if samples else '{"data": null}'
            bare = run_bare(n, args.procs, args.commits, samples, max(1, args.gateways))
            rows.append(([row for row, _ in measured], bare))
            print(f"done n={n}", file=sys.stderr, flush=True)
    print(
        "| N | server | p50 ms | p99 ms | slowest subscriber ms (median over commits) "
        "| missing | RSS KiB/socket | server CPU µs/delivery |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for chorus_rows, bare in rows:
        for r in (*chorus_rows, bare):
            print(
                f"| {r.n:,} | {r.server} | {r.p50_ms:.0f} | {r.p99_ms:.0f} | {r.slowest_ms:.0f} "
                f"| {r.missing} | {r.kib_per_socket:.1f} | {r.cpu_us_per_delivery:.0f} |"
            )
        for chorus in chorus_rows:
            print(
                f"| {chorus.n:,} | {chorus.server} / bare | {chorus.p50_ms / bare.p50_ms:.2f}x "
                f"| {chorus.p99_ms / bare.p99_ms:.2f}x "
                f"| {chorus.slowest_ms / bare.slowest_ms:.2f}x | | | "
                f"{chorus.cpu_us_per_delivery / bare.cpu_us_per_delivery:.2f}x |"
            )


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    main()
