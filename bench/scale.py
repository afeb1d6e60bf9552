"""k API processes behind HAProxy: what each added process buys, for cold reads and a mix.

One run builds everything it measures, on 127.0.0.1, and removes it at the end:

* the full profile, private to the run: a PostgreSQL cluster of its own
  (``tests/servers.py``'s :class:`PostgresCluster`, ``initdb`` in a temporary
  directory, ``fsync=off``: its CPU is this run's alone, nobody else's
  queries), a ``redis-server`` of its own, a Tansu broker, one ``chorus
  relay`` and one ``chorus fanout``; the 18 Chinook playlists (``chorus import
  chinook``, PUBLIC, owned by ``bench``);
* the largest k of ``--ks`` ``chorus serve`` (role ``all``: queries,
  mutations and subscriptions), all started at once (one start takes tens of
  seconds on a loaded 2-core machine);
* per k in ``--ks`` (1, 2, 4): HAProxy from Debian (``apt-get install
  haproxy`` when missing, as root) with ``balance roundrobin`` over the first
  k of them (the others idle, and are not counted), ``--subscribers``
  graphql-transport-ws subscribers of the playlists, each its own user,
  attached through HAProxy (so spread over the k) for both rows.

Two rows per k, each a 2 s warm-up then ``--seconds`` of ``wrk -t1
-c--connections`` through HAProxy:

* ``cold reads``: every request a read that misses the response cache — a
  playlist head (``version title entryCount updatedAt``) or its first page of
  50 entries with media, alternately, each with a variable ``nonce`` no other
  request had (the cache's key holds the variables, docs/caching.md; the
  document and its plan are the same, so it is executed, not parsed again);
* ``mix``: 5% edits (``addEntries`` of one medium by the owner, a new
  ``operationId`` each, ``baseVersion: 0`` rebased), 95% reads: half of them
  cold as above, half hot (the same heads and pages, answered from the cache
  unless an edit moved that playlist).

Per k, after Chorus's rows, a third: the cold reads' load against k bare peers
(``bench/bare_scale.py``: per request the body decoded, the same Redis round
trips as a cold read, Chorus's stored answer sent; no GraphQL) behind their own
HAProxy, no subscribers. Their CPU per request and R(k) are what k processes
cost and buy on this machine by themselves, and each target is printed beside
them.

Per row: req/s, p50 and p99 ms, CPU ms per request of the server side —
the k API processes, PostgreSQL, and the rest of the full profile (relay,
fanout, Redis, Tansu) apart — and of the load side (HAProxy; wrk and the
subscriber clients), R(k) = req/s at k / req/s at k=1, the server side's CPU
with the subscribers attached and no load (measured for 5 s before the rows,
in cores: pings, presence heartbeats, polls) and the server CPU per request net
of it (what the requests themselves cost), and the issue's targets:
server CPU per request at k = 2 and 4 within 15% of k = 1, R(2) ≥ 1.6 for cold
reads, with R(2)'s ceiling on this machine had CPU per request stayed k = 1's
(the cores over k = 1's CPU per request, load side included, times its
req/s); and the times the API processes were preempted per request
(``nonvoluntary_ctxt_switches``), which is what grows with k. After each mix
the subscribers must hold every version of every playlist they watch, in
order (the run fails otherwise). Last, each table's
rows and ``pg_total_relation_size`` per row (docs/capacity.md's storage).

Every process here shares the machine's cores: with 2 cores, wrk, HAProxy,
the clients and PostgreSQL take from the same CPU the API processes would use,
so the load side's CPU is printed to say what bounds R.

    python bench/scale.py [--ks 1,2,4] [--seconds 10] [--connections 32]
        [--subscribers 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

import bare_scale
from _cpu import cpu_seconds
from _wrk import Sample, install_wrk, parse

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests/servers.py: one way to start the servers
    sys.path.insert(0, str(ROOT))

from tests.servers import (  # noqa: E402
    ChorusServer,
    PostgresCluster,
    RedisServer,
    TansuServer,
    free_port,
)

SECRET = "bench-secret-" + "x" * 40
OWNER = "bench"
HEAD = "query Head($id: ID!) { playlist(id: $id) { id version title entryCount updatedAt } }"
PAGE = """query Page($id: ID!) { playlist(id: $id) { version entries(first: 50) {
  edges { cursor node { id positionKey media { title artists album durationMs } } } } } }"""
ADD = """mutation A($input: AddEntriesInput!) { addEntries(input: $input) {
  version userErrors { code } } }"""
SUBSCRIPTION = """subscription Live($id: ID!, $since: Int!) {
  playlistEvents(playlistId: $id, sinceVersion: $since) {
    __typename ... on PlaylistChanged { version } ... on ResyncRequired { currentVersion } } }"""
NONCE = "@@N@@"
EDIT_EVERY = 20
"""One request in 20 is an edit: 5%."""
CPU_TARGET = 0.15
COLD_R2_TARGET = 1.6


# --- the load: a wrk script ----------------------------------------------------------


def _lua(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid Lua string literal here


def _templates(bodies: list[str], headers: dict[str, str]) -> str:
    """A Lua list of ``{prefix, suffix, headers}``: a body is prefix .. nonce .. suffix, or
    prefix alone when the suffix is ``nil`` (a body without a nonce)."""
    head = "{" + ", ".join(f"[{_lua(k)}]={_lua(v)}" for k, v in headers.items()) + "}"
    rows = []
    for body in bodies:
        prefix, found, suffix = body.partition(NONCE)
        rows.append(
            "{" + _lua(prefix) + ", " + (_lua(suffix) if found else "nil") + ", " + head + "}"
        )
    return "{\n" + ",\n".join(rows) + "\n}"


def load_script(gids: list[str], reader: str, owner: str, *, mix: bool) -> str:
    """wrk's Lua: cold reads only, or (``mix``) 1 in 20 an edit and the rest half cold, half
    hot. A nonce is the script's tag and a counter, so each wrk run needs a script of its
    own: its nonces (and its edits' operation ids) are then new, not the warm-up's again.
    Edits go to every playlist in turn, reads to each playlist's head and page in turn."""
    reads: list[str] = []
    hot: list[str] = []
    for gid in gids:
        for query, name in ((HEAD, "Head"), (PAGE, "Page")):
            hot.append(
                json.dumps({"query": query, "operationName": name, "variables": {"id": gid}})
            )
            variables = {"id": gid, "nonce": NONCE}
            reads.append(
                json.dumps({"query": query, "operationName": name, "variables": variables})
            )
    edits = [
        json.dumps(
            {
                "query": ADD,
                "variables": {
                    "input": {
                        "playlistId": gid,
                        "operationId": NONCE,
                        "baseVersion": 0,
                        "mediaIds": [f"chinook:track:{1 + n * 37 % 3500}"],
                    }
                },
            }
        )
        for n, gid in enumerate(gids)
    ]
    json_headers = {"Content-Type": "application/json"}
    as_reader = {**json_headers, "Authorization": f"Bearer {reader}"}
    as_owner = {**json_headers, "Authorization": f"Bearer {owner}"}
    return (
        f"local cold = {_templates(reads, as_reader)}\n"
        f"local hot = {_templates(hot, as_reader)}\n"
        f"local edits = {_templates(edits, as_owner)}\n"
        f"local mix = {'true' if mix else 'false'}\n"
        f"local tag = {_lua(uuid.uuid4().hex[:12])}\n"
        "local i = 0\n"
        # Each list by a count of its own turns, so that each takes its entries in turn:
        # edits at every 20th request would otherwise see only even indexes of one count.
        "local turns = {}\n"
        "local function pick(list)\n"
        "  local n = turns[list] or 0\n"
        "  turns[list] = n + 1\n"
        "  local t = list[n % #list + 1]\n"
        "  local body = t[1]\n"
        '  if t[2] then body = body .. tag .. "-" .. i .. t[2] end\n'
        '  return wrk.format("POST", "/graphql", t[3], body)\n'
        "end\n"
        "request = function()\n"
        "  i = i + 1\n"
        "  if not mix then return pick(cold) end\n"
        f"  if i % {EDIT_EVERY} == 0 then return pick(edits) end\n"
        "  if i % 2 == 0 then return pick(cold) end\n"
        "  return pick(hot)\n"
        "end\n"
    )


# --- the subscribers ---------------------------------------------------------------


def _subscribers_main(url: str, watch: list[tuple[str, int]], pipe: Connection) -> None:
    asyncio.run(_subscribers(url, watch, pipe))


async def _subscribers(url: str, watch: list[tuple[str, int]], pipe: Connection) -> None:
    """One socket per ``(playlist, since)``, each its own user (a process takes 10 sockets
    of one user, ``CHORUS_MAX_WS_CONNECTIONS_PER_USER``); on ``"report"``, each socket's
    versions in order."""
    from websockets.asyncio.client import connect

    from chorus.auth import mint_token

    got: list[list[int]] = [[] for _ in watch]
    opened = 0
    gate = asyncio.Semaphore(16)

    async def one(n: int, gid: str, since: int) -> None:
        try:
            await listen(n, gid, since)
        except Exception as error:  # said, or the bench would wait for "ready" in silence
            print(f"subscriber {n}: {error!r}", file=sys.stderr, flush=True)
            raise

    async def listen(n: int, gid: str, since: int) -> None:
        nonlocal opened
        async with gate:
            ws = await connect(url, subprotocols=["graphql-transport-ws"], max_size=None)  # type: ignore[list-item]
            token = mint_token(SECRET, f"sub{n}")
            init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
            await ws.send(json.dumps(init))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            payload = {"query": SUBSCRIPTION, "variables": {"id": gid, "since": since}}
            await ws.send(json.dumps({"id": "live", "type": "subscribe", "payload": payload}))
        opened += 1
        if opened == len(watch):
            pipe.send("ready")
        async for text in ws:
            frame = json.loads(text)
            if frame.get("type") == "ping":
                await ws.send(json.dumps({"type": "pong"}))
            elif frame.get("type") == "next":
                event = frame["payload"]["data"]["playlistEvents"]
                got[n].append(event.get("version", -1))  # -1: a ResyncRequired
            else:
                got[n].append(-2)  # an error or complete: counted as a gap

    tasks = [asyncio.create_task(one(n, g, s)) for n, (g, s) in enumerate(watch)]
    await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
    pipe.send(got)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def subscribers(url: str, watch: list[tuple[str, int]]) -> Iterator[Any]:
    """The clients in a process of their own; yields ``(pid, report)``, ``report()`` giving
    each socket's versions."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_subscribers_main, args=(url, watch, child))
    proc.start()
    try:
        if not parent.poll(120):
            raise RuntimeError("the subscribers did not subscribe in time")
        parent.recv()

        def report() -> list[list[int]]:
            parent.send("report")
            got: list[list[int]] = parent.recv()
            return got

        yield proc.pid, report
    finally:
        proc.terminate()
        proc.join(10)


# --- HAProxy ---------------------------------------------------------------------------


HAPROXY_CFG = """global
    maxconn 4000
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend chorus
    bind 127.0.0.1:{port}
    default_backend api
backend api
    balance roundrobin
{servers}
"""


@contextlib.contextmanager
def haproxy(backends: Sequence[int], tmp: Path) -> Iterator[tuple[int, int]]:
    """HAProxy on a free port, round-robin over ``backends`` (ports); ``(port, pid)``."""
    port = free_port()
    lines = "\n".join(f"    server api{n} 127.0.0.1:{p}" for n, p in enumerate(backends))
    cfg = tmp / f"haproxy-{len(backends)}.cfg"
    cfg.write_text(HAPROXY_CFG.format(port=port, servers=lines))
    log = (tmp / "haproxy.log").open("ab")
    proc = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"haproxy did not start: {cfg.read_text()}") from None
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def install_haproxy() -> None:
    """``haproxy`` from Debian's packages, when this user may install them (root in CI)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.exit("haproxy is not installed (apt-get install haproxy)")
    print("installing haproxy (apt-get install haproxy)", file=sys.stderr)
    for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "haproxy"]):
        subprocess.run(step, check=True, stdout=subprocess.DEVNULL)


# --- a measured slice ------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One row: the wrk sample and CPU seconds by group over it."""

    k: int
    row: str
    sample: Sample
    cpu_s: dict[str, float]
    idle_cores: float
    """The server side's CPU with no load, in cores (sockets' pings, heartbeats, polls)."""
    preempted: int = 0
    """Times the API processes were switched out while they could run, over the slice
    (``nonvoluntary_ctxt_switches``): each costs the caches they had warmed."""

    @property
    def rps(self) -> float:
        return self.sample.requests / self.sample.seconds

    def ms_per_request(self, *groups: str) -> float:
        return sum(self.cpu_s[g] for g in groups) * 1000 / max(1, self.sample.requests)

    def preempted_per_request(self) -> float:
        return self.preempted / max(1, self.sample.requests)

    def net_ms_per_request(self) -> float:
        """Server CPU per request less what the server side spends idle over the slice."""
        idle_s = self.idle_cores * self.sample.seconds
        return self.ms_per_request(*SERVER_GROUPS) - idle_s * 1000 / max(1, self.sample.requests)


SERVER_GROUPS = ("api", "postgres", "workers")
IDLE_S = 5.0
LOAD_GROUPS = ("haproxy", "load")


def preemptions(pids: Sequence[int]) -> int:
    """Involuntary context switches of every thread of these processes so far."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith("nonvoluntary_ctxt_switches"):
                            total += int(line.split()[1])
    return total


def measure(
    url: str, script: str, seconds: float, connections: int, groups: dict[str, list[int]]
) -> tuple[Sample, dict[str, float]]:
    """wrk for ``seconds``; its sample and the CPU seconds of each group of process roots
    (``load``: wrk itself, as a reaped child, plus the group's processes)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        before = {name: cpu_seconds(pids) for name, pids in groups.items()}
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", f.name, "--latency", url],
            check=True,
            capture_output=True,
            text=True,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = {name: cpu_seconds(pids) - before[name] for name, pids in groups.items()}
    finally:
        os.unlink(f.name)
    wrk_s = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    spent["load"] = spent.get("load", 0.0) + wrk_s
    if done.stderr.strip():  # a Lua error: wrk still runs, with requests the script never meant
        raise RuntimeError(f"wrk: {done.stderr.strip()}")
    sample = parse(done.stdout)
    if sample.bad > sample.requests // 100:
        raise RuntimeError(f"{sample.bad} of {sample.requests} answers were not 2xx")
    return sample, spent


# --- the run ---------------------------------------------------------------------------


class Postgres(PostgresCluster):
    """The private cluster, with room for k=4 API processes' pools (up to 20 connections
    each) beside the workers'."""

    def argv(self) -> list[str]:
        return [*super().argv(), "-c", "max_connections=300"]


def chorus_import(env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "chorus.cli", "import", "chinook", "--owner", OWNER],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return re.findall(r"^(\S+)\s+\d+ entries", out, re.MULTILINE)


def heads(url: str, token: str, gids: list[str]) -> dict[str, int]:
    """Each playlist's version, read now (the cache answers only at the head)."""
    found = {}
    for gid in gids:
        body = {"query": HEAD, "variables": {"id": gid}}
        r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        found[gid] = int(r.json()["data"]["playlist"]["version"])
    return found


def check_requests(url: str, gids: list[str], reader: str, owner: str) -> None:
    """One request of each kind the load sends, answered without errors (wrk counts only
    statuses, and GraphQL errors come with 200)."""
    nonce = f"check-{uuid.uuid4().hex[:8]}"
    for query in (HEAD, PAGE):
        body = {"query": query, "variables": {"id": gids[0], "nonce": nonce}}
        r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {reader}"}, timeout=30)
        assert r.status_code == 200, r.text[:500]
        assert "errors" not in r.json(), r.text[:500]
    add: dict[str, Any] = {
        "playlistId": gids[0],
        "operationId": nonce,
        "baseVersion": 0,
        "mediaIds": ["chinook:track:1"],
    }
    body = {"query": ADD, "variables": {"input": add}}
    r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {owner}"}, timeout=30)
    result = r.json()
    assert "errors" not in result, r.text[:500]
    assert not result["data"]["addEntries"]["userErrors"], r.text[:500]


def check_deliveries(
    watch: list[tuple[str, int]], got: list[list[int]], final: dict[str, int]
) -> int:
    """Sockets whose versions are not exactly since+1 … head, in order; printed to stderr."""
    wrong = 0
    for (gid, since), versions in zip(watch, got, strict=True):
        if versions != list(range(since + 1, final[gid] + 1)):
            wrong += 1
            if wrong <= 3:
                print(
                    f"  {gid}: from v{since} got {versions[:8]}… to v{final[gid]}", file=sys.stderr
                )
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1,2,4", help="API process counts, the first the base")
    parser.add_argument("--seconds", type=float, default=10.0, help="per row and k")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--subscribers", type=int, default=100)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    signal.signal(signal.SIGTERM, _exit)  # a stopped run still stops what it started
    started = time.monotonic()
    if shutil.which("wrk") is None:
        install_wrk()
    if shutil.which("haproxy") is None:
        install_haproxy()
    from chorus.auth import mint_token

    reader, owner = mint_token(SECRET, "reader"), mint_token(SECRET, OWNER)
    tmp = Path(tempfile.mkdtemp(prefix="chorus-scale-"))
    results: list[Measured] = []
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        pg = Postgres()
        stack.callback(pg.remove)
        pg.start()
        redis = RedisServer(tmp / "redis.log")
        stack.callback(redis.stop)
        redis.start()
        tansu = TansuServer(tmp / "tansu.log")
        stack.callback(tansu.stop)
        tansu.start()
        env = {
            "CHORUS_JWT_SECRET": SECRET,
            "CHORUS_REDIS_URL": redis.url,
            "CHORUS_KAFKA_BOOTSTRAP_SERVERS": tansu.bootstrap_servers,
            "CHORUS_KAFKA_IDEMPOTENT_PRODUCER": "false",  # Tansu refuses InitProducerId
        }
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
        gids = chorus_import(
            {**base_env, "CHORUS_DATABASE_URL": pg.url, "CHORUS_DATA_DIR": str(tmp), **env}
        )
        # Every process at once, in threads: one start takes tens of seconds on a loaded
        # 2-core machine. Each k routes to the first k API processes; the others idle.
        workers = [ChorusServer(pg.url, tmp, (w,), **env) for w in ("relay", "fanout")]
        apis = [ChorusServer(pg.url, tmp, ("serve",), **env) for _ in range(max(ks))]
        for server in (*workers, *apis):
            stack.callback(server.stop)
        with ThreadPoolExecutor(len(workers) + len(apis)) as pool:
            list(pool.map(lambda s: s.start(timeout_s=240), (*workers, *apis)))
        print(
            f"{len(gids)} Chinook playlists; private PostgreSQL, Redis, Tansu, relay, fanout; "
            f"wrk -t1 -c{args.connections}, {args.seconds:g} s per row after 2 s warm-up; "
            f"{args.subscribers} subscribers through HAProxy; {os.cpu_count()} cores; "
            f"set up in {time.monotonic() - started:.0f} s",
            flush=True,
        )
        worker_pids = [p for p in (redis.process, tansu.process) if p is not None]
        groups_base = {
            "postgres": [pg.process.pid] if pg.process is not None else [],
            "workers": [w.process.pid for w in workers if w.process is not None]
            + [p.pid for p in worker_pids],
        }
        peers = [free_port() for _ in range(max(ks))]
        peer_pids = [stack.enter_context(bare_scale.serving(p, redis.url)) for p in peers]
        stored = answers(f"http://127.0.0.1:{apis[0].port}/graphql", reader, gids)
        bare_scale.store_answers(redis.url, stored)
        check_bare(peers[0], gids[0], stored[gids[0]])
        for k in ks:
            results.extend(run_k(apis[:k], gids, tmp, groups_base, (reader, owner), args))
            bare_base = {g: groups_base[g] for g in ("postgres", "workers")}
            bare = run_bare_k(peers[:k], peer_pids[:k], gids, tmp, bare_base, (reader, owner), args)
            results.append(bare)
        storage = asyncio.run(table_sizes(pg.url))
    print_table(results, ks)
    print_storage(storage)


def run_k(
    servers: list[ChorusServer],
    gids: list[str],
    tmp: Path,
    groups_base: dict[str, list[int]],
    tokens: tuple[str, str],
    args: argparse.Namespace,
) -> list[Measured]:
    """Both rows with HAProxy over ``servers`` (``tokens``: the reader's and the owner's).

    Raises:
        SystemExit: a subscriber missed a version or got one twice or out of order.
    """
    k = len(servers)
    reader, owner = tokens
    out = []
    with contextlib.ExitStack() as stack:
        port, haproxy_pid = stack.enter_context(haproxy([s.port for s in servers], tmp))
        url = f"http://127.0.0.1:{port}/graphql"
        check_requests(url, gids, reader, owner)
        since = heads(url, reader, gids)
        watch = [(gids[n % len(gids)], since[gids[n % len(gids)]]) for n in range(args.subscribers)]
        clients_pid, report = stack.enter_context(
            subscribers(url.replace("http://", "ws://"), watch)
        )
        groups = {
            **groups_base,
            "api": [s.process.pid for s in servers if s.process is not None],
            "haproxy": [haproxy_pid],
            "load": [clients_pid],
        }
        server = {g: groups[g] for g in SERVER_GROUPS}
        before = cpu_seconds([p for pids in server.values() for p in pids])
        time.sleep(IDLE_S)
        idle = (cpu_seconds([p for pids in server.values() for p in pids]) - before) / IDLE_S
        print(f"k={k}: server side idle with the subscribers: {idle:.2f} cores", flush=True)
        for row, mix in (("cold reads", False), ("mix", True)):
            script = functools.partial(load_script, gids, reader, owner, mix=mix)
            out.append(measure_row(k, row, url, script, groups, idle, args))
        time.sleep(3)  # the last edits' events on their way
        wrong = check_deliveries(watch, report(), heads(url, reader, gids))
        held = len(watch) - wrong
        print(f"k={k}: {held}/{len(watch)} subscribers hold every version", flush=True)
    if wrong:
        sys.exit(f"k={k}: {wrong} of {len(watch)} subscribers missed or repeated versions")
    return out


BARE_ROW = "bare peer"


def run_bare_k(
    peers: list[int],
    pids: list[int],
    gids: list[str],
    tmp: Path,
    groups_base: dict[str, list[int]],
    tokens: tuple[str, str],
    args: argparse.Namespace,
) -> Measured:
    """The cold reads' load against k bare peers (``bench/bare_scale.py``; ``peers`` their
    ports, ``pids`` their processes) behind HAProxy, no subscribers: what k processes cost
    on this machine by themselves."""
    reader, owner = tokens
    with haproxy(peers, tmp) as (port, haproxy_pid):
        url = f"http://127.0.0.1:{port}/graphql"
        groups = {**groups_base, "api": pids, "haproxy": [haproxy_pid]}
        script = functools.partial(load_script, gids, reader, owner, mix=False)
        return measure_row(len(peers), BARE_ROW, url, script, groups, 0.0, args)


def measure_row(
    k: int,
    row: str,
    url: str,
    script: Callable[[], str],
    groups: dict[str, list[int]],
    idle: float,
    args: argparse.Namespace,
) -> Measured:
    """A 2 s warm-up, then ``--seconds`` measured, each with a script of its own from
    ``script()`` (a script's nonces and operation ids are its own: the measured slice must
    not repeat the warm-up's), and the preemptions of ``groups["api"]`` over the slice."""
    measure(url, script(), 2, args.connections, {})
    measured = script()
    switched = preemptions(groups["api"])
    sample, spent = measure(url, measured, args.seconds, args.connections, groups)
    switched = preemptions(groups["api"]) - switched
    print(f"k={k} {row}: {sample.requests / sample.seconds:.0f} req/s", flush=True)
    return Measured(k, row, sample, spent, idle, switched)


def answers(url: str, token: str, gids: list[str]) -> dict[str, tuple[bytes, bytes]]:
    """Chorus's bytes for each playlist's ``Head`` and ``Page`` query: the bare peer's."""
    found = {}
    for gid in gids:
        got = []
        for query, name in ((HEAD, "Head"), (PAGE, "Page")):
            body = {"query": query, "operationName": name, "variables": {"id": gid}}
            headers = {"Authorization": f"Bearer {token}"}
            r = httpx.post(url, json=body, headers=headers, timeout=30)
            r.raise_for_status()
            got.append(r.content)
        found[gid] = (got[0], got[1])
    return found


def check_bare(port: int, gid: str, expected: tuple[bytes, bytes]) -> None:
    """The bare peer answers a ``Head`` and a ``Page`` of ``gid`` with Chorus's bytes (a key
    it does not find would answer ``{}``, and wrk counts only statuses)."""
    for (query, name), want in zip(((HEAD, "Head"), (PAGE, "Page")), expected, strict=True):
        body = {"query": query, "operationName": name, "variables": {"id": gid, "nonce": "x"}}
        got = httpx.post(f"http://127.0.0.1:{port}/graphql", json=body, timeout=30).content
        if got != want:
            raise RuntimeError(f"the bare peer answered {name} with {got[:200]!r}")


STORAGE_SQL = """
SELECT c.relname, c.reltuples::bigint AS rows, pg_total_relation_size(c.oid) AS total,
       pg_relation_size(c.oid) AS heap, pg_indexes_size(c.oid) AS indexes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'alembic_version'
ORDER BY c.relname
"""


async def table_sizes(url: str) -> list[tuple[str, int, int, int, int, float]]:
    """Per table after the run (``VACUUM ANALYZE`` first, so counts are exact): rows, total
    bytes with indexes and TOAST, heap bytes, index bytes, and the average row's width."""
    import asyncpg

    conn = await asyncpg.connect(url.replace("+asyncpg", ""))
    try:
        await conn.execute("VACUUM ANALYZE")
        out = []
        for r in await conn.fetch(STORAGE_SQL):
            width = await conn.fetchval(f'SELECT avg(pg_column_size(t.*)) FROM "{r[0]}" t')
            out.append((r[0], r[1], r[2], r[3], r[4], float(width or 0)))
        return out
    finally:
        await conn.close()


def print_storage(sizes: list[tuple[str, int, int, int, int, float]]) -> None:
    """Bytes per row of each table: the capacity model's storage (docs/capacity.md)."""
    print("\nstorage after the run (pg_total_relation_size; tiny tables are mostly empty pages)")
    print("| table | rows | total KiB | heap KiB | index KiB | total B/row | avg row B |")
    print("|---|---|---|---|---|---|---|")
    for name, rows, total, heap, indexes, width in sizes:
        per_row = f"{total / rows:.0f}" if rows > 0 else "—"
        print(
            f"| {name} | {rows} | {total / 1024:.0f} | {heap / 1024:.0f} | {indexes / 1024:.0f} "
            f"| {per_row} | {width:.0f} |"
        )


def print_table(results: list[Measured], ks: list[int]) -> None:
    """One table per row kind: k, req/s, p99, CPU ms/req by group, R(k), and the targets,
    each read against the bare peer's figure for the same k."""
    for row in ("cold reads", "mix", BARE_ROW):
        rows = [m for m in results if m.row == row]
        if not rows:
            continue
        base = rows[0]
        title = f"{row} (the cold reads' load; no subscribers)" if row == BARE_ROW else row
        print(f"\n{title}")
        print(
            "| k | req/s | p50 ms | p99 ms | server CPU ms/req | API | PostgreSQL | relay+fanout"
            "+Redis+Tansu | HAProxy | wrk+subscribers | R(k) | CPU/req vs k=1 | idle cores "
            "| net CPU ms/req | net vs k=1 | API vs k=1 | preempted/req | errors |"
        )
        print("|---" * 18 + "|")
        for m in rows:
            server = m.ms_per_request(*SERVER_GROUPS)
            ratio = server / base.ms_per_request(*SERVER_GROUPS)
            bad = m.sample.bad + m.sample.timeouts
            print(
                f"| {m.k} | {m.rps:.0f} | {m.sample.p50_ms:.1f} | {m.sample.p99_ms:.1f} "
                f"| {server:.2f} | {m.ms_per_request('api'):.2f} "
                f"| {m.ms_per_request('postgres'):.2f} | {m.ms_per_request('workers'):.2f} "
                f"| {m.ms_per_request('haproxy'):.2f} | {m.ms_per_request('load'):.2f} "
                f"| {m.rps / base.rps:.2f} | {ratio:.2f} | {m.idle_cores:.2f} "
                f"| {m.net_ms_per_request():.2f} "
                f"| {m.net_ms_per_request() / base.net_ms_per_request():.2f} "
                f"| {m.ms_per_request('api') / base.ms_per_request('api'):.2f} "
                f"| {m.preempted_per_request():.2f} | {bad} |"
            )
    print("\ntargets (issue 33), each beside the bare peer's figure at the same k:")
    bare = {m.k: m for m in results if m.row == BARE_ROW}
    for m in results:
        if m.k == ks[0] or m.row == BARE_ROW:
            continue
        base = next(b for b in results if b.row == m.row and b.k == ks[0])
        ratio = m.ms_per_request(*SERVER_GROUPS) / base.ms_per_request(*SERVER_GROUPS)
        verdict = "pass" if abs(ratio - 1) <= CPU_TARGET else "FAIL"
        net = m.net_ms_per_request() / base.net_ms_per_request()
        peer = ""
        if m.row == "cold reads" and m.k in bare and ks[0] in bare:  # the same load
            peer_ratio = bare[m.k].ms_per_request(*SERVER_GROUPS) / bare[ks[0]].ms_per_request(
                *SERVER_GROUPS
            )
            peer = f"; the bare peer's CPU/req {peer_ratio:.2f}× its k={ks[0]}"
        print(
            f"  {m.row}, k={m.k}: server CPU/req {ratio:.2f}× k={ks[0]}, within ±15%: {verdict} "
            f"(net of idle: {net:.2f}×{peer})"
        )
        if m.row == "cold reads" and m.k == 2:
            r2 = m.rps / base.rps
            verdict = "pass" if r2 >= COLD_R2_TARGET else "FAIL"
            peer = ""
            if 2 in bare and ks[0] in bare:
                peer = f"; the bare peer's R(2) {bare[2].rps / bare[ks[0]].rps:.2f}"
            print(f"  cold reads, R(2) = {r2:.2f} ≥ {COLD_R2_TARGET}: {verdict}{peer}")
            # Two processes can at most share the machine: its cores over k=1's CPU per
            # request of every process (the load side included) times k=1's rate.
            per_request = base.ms_per_request(*SERVER_GROUPS, *LOAD_GROUPS) / 1000
            ceiling = (os.cpu_count() or 1) / (per_request * base.rps)
            print(
                f"  cold reads, R(2) ceiling on {os.cpu_count()} cores had CPU per request "
                f"stayed k={ks[0]}'s: {ceiling:.2f}"
            )


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    main()
