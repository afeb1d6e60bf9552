"""Hostile input against a running server, while ``/healthz`` is probed every 10 ms.

Starts ``chorus serve`` (embedded profile, a fresh SQLite database in a
temporary folder, as a user runs it) and a prober process that sends
``GET /healthz`` every 10 ms on its own connection and records each latency.
Then, for each class of hostile input of issue 10, it measures a quiet second
(the baseline) and an attack of ``--seconds`` with ``--concurrency``
attackers, and prints per class the worst ``/healthz`` latency during the
attack against the worst in the quiet second before it, and what the server
answered the attacker. Class 9 also counts the labels the made-up names got
and tries ``/metrics`` without ``CHORUS_METRICS_TOKEN``; class 10 starts a
second ``serve`` on the same file (refused: exit 2, one line), then runs
``chorus import`` beside the server and notes how soon after each commit
a WebSocket subscriber received it. Class 12 (``bench/_hostile_feed.py``, on
a server of its own; ``--classes feed`` runs it alone) has one user open the
most ``feedEvents`` subscriptions over 1,000 follows while another user's
uncached query and ``/healthz`` are timed, quiet and under attack.

    python bench/hostile.py [--seconds 3] [--concurrency 8] [--port 8795] [--attacker-nice 10]

The attackers run in this process, on the server's two cores. Once the
server and the prober are started, this process lowers its own priority
(``--attacker-nice``, 10 by default; 0 to share the cores evenly): an
attacker is another machine, and what is measured is how long the server
holds its event loop, not how the kernel splits two cores between it and
the load generator. The server and the prober keep the default priority.

Targets 127.0.0.1 only; every attack is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

import httpx
import jwt
import websockets

SECRET = "bench-hostile-" + "x" * 40
ORIGIN_OK = "http://localhost:5173"
VIEWER = "{ viewer { playlists(first: 1) { totalCount } } }"
METRICS_TOKEN = "bench-metrics-" + "m" * 20
CLI = (sys.executable, "-m", "chorus.cli")
WS_PROTOCOL = websockets.Subprotocol("graphql-transport-ws")
EVENTS = """
subscription Events($playlistId: ID!, $sinceVersion: Int!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: $sinceVersion) {
    ... on PlaylistChanged { version committedAt }
  }
}
"""


def probe(port: int, out: str, stop_at: float) -> None:
    """Prober process: ``GET /healthz`` every 10 ms until ``stop_at``; writes ``t latency_ms``."""
    with (
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client,
        open(out, "w") as sink,
    ):
        while time.time() < stop_at:
            started = time.time()
            try:
                client.get("/healthz")
                latency = (time.time() - started) * 1000
            except httpx.HTTPError:
                latency = (time.time() - started) * 1000
            sink.write(f"{started:.4f} {latency:.2f}\n")
            sink.flush()
            time.sleep(max(0.0, 0.01 - (time.time() - started)))


def inside(samples: list[tuple[float, float]], start: float, end: float) -> list[float]:
    # A probe that started before the window but ended inside counts too.
    return [lat for t, lat in samples if start <= t + lat / 1000 and t <= end]


def worst(samples: list[tuple[float, float]], start: float, end: float) -> float:
    return max(inside(samples, start, end), default=float("nan"))


def p99(samples: list[tuple[float, float]], start: float, end: float) -> float:
    ordered = sorted(inside(samples, start, end))
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")


def token(sub: object = "alice", **claims: object) -> str:
    payload: dict[str, object] = {"sub": sub, "exp": int(time.time()) + 3600, **claims}
    return jwt.encode(payload, SECRET, algorithm="HS256")


def fragment_bomb(fragments: int) -> str:
    parts = ["query Q { ...F0 }"]
    for i in range(fragments):
        parts.append(f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}")
    parts.append(f"fragment F{fragments} on Query {{ __typename }}")
    return "\n".join(parts)


async def raw_request(port: int, head: bytes, wait_s: float = 10.0) -> str:
    """Send ``head`` on a fresh socket; the status line the server answered (or how it ended)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        return f"connect {type(exc).__name__}"
    try:
        writer.write(head)
        await writer.drain()
        async with asyncio.timeout(wait_s):
            line = await reader.readline()
        return line.decode(errors="replace").split(" ", 2)[1] if line else "closed"
    except (OSError, TimeoutError) as exc:
        return type(exc).__name__
    finally:
        writer.close()


class Attacks:
    """One coroutine per class; each returns what the server answered (status → count)."""

    def __init__(self, port: int, env: dict[str, str], playlist_id: str, bomb: int) -> None:
        self.bomb = bomb
        self.port = port
        self.url = f"http://127.0.0.1:{port}/graphql"
        self.env = env
        self.playlist_id = playlist_id
        self.client = httpx.AsyncClient(timeout=30)
        self.auth = {"Authorization": f"Bearer {token()}"}
        self.seen: collections.Counter[str] = collections.Counter()
        self.cli_playlist = ""
        """A playlist ``chorus import`` made, which class 10's second import extends."""
        self.chinook_music = ""
        """Chinook's "Music" (3,290 entries, every one with media in the embedded catalog)."""

    def note(self, response: httpx.Response) -> None:
        try:
            body = response.json()
            codes = {e.get("extensions", {}).get("code") for e in body.get("errors") or []}
            # userErrors of a mutation payload, and whether it was a replay
            for payload in (body.get("data") or {}).values():
                if isinstance(payload, dict):
                    codes |= {e.get("code") for e in payload.get("userErrors") or []}
                    if payload.get("replayed"):
                        codes.add("replayed")
        except (ValueError, AttributeError):
            codes = {"not JSON"}
        shown = ",".join(sorted(c for c in codes if c)) or "ok"
        self.seen[f"{response.status_code} {shown}"] += 1

    async def post(
        self,
        body: bytes | dict[str, object],
        headers: dict[str, str] | None = None,
        *,
        anonymous: bool = False,
    ) -> None:
        auth = {} if anonymous else self.auth
        h = {"Content-Type": "application/json", **auth, **(headers or {})}
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.note(await self.client.post(self.url, content=content, headers=h))
        except httpx.HTTPError as exc:
            self.seen[type(exc).__name__] += 1

    # 1
    async def validation_cost(self) -> None:
        await self.post({"query": fragment_bomb(self.bomb)})

    async def merged_fragments(self) -> None:
        """50 fragments each selecting ``playlists { … }`` side by side, new each time."""
        u = uuid.uuid4().hex[:8]
        body = (
            "playlists(first: 1) { edges { node { id "
            "entries(first: 1) { edges { node { id } } } } } }"
        )
        fragments = " ".join(f"fragment F{u}{i} on Viewer {{ {body} }}" for i in range(50))
        spreads = " ".join(f"...F{u}{i % 50}" for i in range(100))
        await self.post({"query": f"{{ viewer {{ {spreads} }} }} {fragments}"}, anonymous=True)

    async def introspection_aliases(self) -> None:
        """30 aliases of a whole ``__schema`` introspection, no token."""
        whole = "__schema { types { name fields { name type { name ofType { name } } } } }"
        u = uuid.uuid4().hex[:6]
        document = "{ " + " ".join(f"a{u}{i}: {whole}" for i in range(30)) + " }"
        await self.post({"query": document}, anonymous=True)

    async def over_the_token_limit(self) -> None:
        """5,001 tokens (10 KB), no token: refused while parsing, new each time."""
        await self.post({"query": "{" + " a" * 5_001 + f" }} #{uuid.uuid4().hex}"}, anonymous=True)

    async def many_operations(self) -> None:
        """1,000 unnamed operations (23 KB) within the token limit, no token."""
        u = uuid.uuid4().hex[:6]
        document = " ".join(f"query q{u}{i} {{ __typename }}" for i in range(1_000))
        await self.post({"query": document}, anonymous=True)

    async def unknown_input_fields(self) -> None:
        """An input object of 1,600 unknown fields (13 KB), no token; new each time."""
        literal = " ".join(f"k{i}: 1" for i in range(1_600))
        query = f"mutation {{ follow(input: {{{literal}}}) {{ changed }} }} #{uuid.uuid4().hex}"
        await self.post({"query": query}, anonymous=True)

    async def subscription_cost(self) -> None:
        """A subscription over the cost limit (feedEvents reading changes), over WebSocket."""
        fields = " ".join(
            f"a{i}: changes(sinceVersion: 0, first: 100) {{ versions {{ changes {{"
            " ... on EntriesAdded { entries { id media { title } } } } } }"
            for i in range(6)
        )
        item = f"... on FeedItem {{ version playlist {{ {fields} }} }}"
        query = f"subscription {{ feedEvents {{ {item} }} }}"
        url = f"ws://127.0.0.1:{self.port}/graphql"
        try:
            async with websockets.connect(url, subprotocols=[WS_PROTOCOL]) as ws:
                await ws.send(json.dumps({"type": "connection_init", "payload": self.auth}))
                await ws.recv()
                message = {"id": "1", "type": "subscribe", "payload": {"query": query}}
                await ws.send(json.dumps(message))
                answer = json.loads(await ws.recv())
                codes = {e.get("extensions", {}).get("code") for e in answer.get("payload") or []}
                self.seen[f"ws {answer.get('type')} {','.join(sorted(c for c in codes if c))}"] += 1
        except (OSError, websockets.WebSocketException) as exc:
            self.seen[type(exc).__name__] += 1

    # 2
    async def nested_json(self) -> None:
        await self.post(
            b'{"query": "{ viewer { id } }", "variables": {"a": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}}"
        )

    # 3
    async def subscription_over_http(self) -> None:
        await self.post(
            {
                "query": "subscription($p: ID!) { playlistEvents(playlistId: $p, sinceVersion: 0)"
                " { __typename } }",
                "variables": {"p": self.playlist_id},
            }
        )

    # 4
    async def token_claims(self) -> None:
        for claims in ({"exp": "soon"}, {"nbf": [1]}, {"iat": {"a": 1}}, {"exp": 10**30}):
            bad = jwt.encode({"sub": "alice", **claims}, SECRET, algorithm="HS256")
            await self.post({"query": VIEWER}, {"Authorization": f"Bearer {bad}"})
        bad_sub = jwt.encode({"sub": 42, "exp": int(time.time()) + 60}, SECRET, algorithm="HS256")
        await self.post({"query": VIEWER}, {"Authorization": f"Bearer {bad_sub}"})

    # 5
    async def transport(self) -> None:
        big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
        many = (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
            + b"".join(f"X-H{i}: v\r\n".encode() for i in range(20_000))
            + b"\r\n"
        )
        for head in (big, many):
            self.seen[f"raw {await raw_request(self.port, head)}"] += 1

    async def slowloris(self, seconds: float) -> None:
        """Connections that send one header line every 0.5 s; how each ended."""
        end = time.monotonic() + seconds
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            self.seen["slowloris refused"] += 1
            return
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        outcome = "held open"
        try:
            while time.monotonic() < end:
                writer.write(b"X-Slow: 1\r\n")
                await writer.drain()
                try:
                    async with asyncio.timeout(0.5):
                        line = await reader.readline()
                    outcome = line.decode().split(" ", 2)[1] if line else "closed"
                    break
                except TimeoutError:
                    continue
        except OSError:
            outcome = "closed"
        finally:
            writer.close()
        self.seen[f"slowloris {outcome}"] += 1

    # 6
    async def replays(self) -> None:
        await self.post(self.add("hostile-replay-1"))

    def add(self, op: str) -> dict[str, object]:
        return {
            "query": "mutation($i: AddEntriesInput!) { addEntries(input: $i)"
            " { version replayed userErrors { code } } }",
            "variables": {
                "i": {
                    "playlistId": self.playlist_id,
                    "operationId": op,
                    "baseVersion": 0,
                    "mediaIds": ["chinook:track:1"],
                }
            },
        }

    # 7
    async def read_cost(self) -> None:
        fields = " ".join(
            f"a{i}: changes(sinceVersion: 0, first: 100)"
            " { versions { version changes { ... on EntriesAdded"
            " { entries { id mediaId positionKey } } } } }"
            for i in range(30)
        )
        await self.post({"query": f'{{ playlist(id: "{self.playlist_id}") {{ {fields} }} }}'})

    async def wide_page_read(self) -> None:
        # Every field of 100 entries, 24 times (cost 9,697, under the 10,000
        # limit); a fresh alias prefix each time, so the response cache cannot
        # answer it and every request executes all 2,400 entries and media.
        prefix = "p" + uuid.uuid4().hex[:8]
        node = (
            "id positionKey mediaId addedAt addedBy { id }"
            " media { id title artists album durationMs available viewerHasLiked }"
        )
        fields = " ".join(
            f"{prefix}{i}: entries(first: 100) {{ edges {{ cursor node {{ {node} }} }} }}"
            for i in range(24)
        )
        await self.post({"query": f'{{ playlist(id: "{self.chinook_music}") {{ {fields} }} }}'})

    # 8
    async def cors(self) -> None:
        try:
            r = await self.client.options(
                self.url,
                headers={
                    "Origin": "http://evil.example",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,content-type",
                },
            )
            self.seen[f"preflight {r.status_code}"] += 1
        except httpx.HTTPError as exc:
            self.seen[type(exc).__name__] += 1

    # 9
    async def metrics_flood(self) -> None:
        name = "Made" + uuid.uuid4().hex[:10]
        try:
            r = await self.client.post(
                self.url, json={"query": f"query {name} {{ __typename }}", "operationName": name}
            )
            self.note(r)
        except httpx.HTTPError as exc:
            self.seen[type(exc).__name__] += 1

    # 11
    async def request_ids(self) -> None:
        for rid in ("x" * 10_000, "a\tb", "a b;c", "../../etc"):
            try:
                r = await self.client.get(
                    f"http://127.0.0.1:{self.port}/healthz", headers={"X-Request-Id": rid}
                )
                echoed = r.headers.get("x-request-id", "")
                kept = "echoed" if echoed == rid else "replaced" if echoed else "none"
                self.seen[f"{r.status_code} {kept}"] += 1
            except (httpx.HTTPError, UnicodeEncodeError) as exc:
                self.seen[type(exc).__name__] += 1

    async def metrics_labels(self) -> None:
        """After the flood: how many made-up names became labels; /metrics without the token."""
        scraped = await self.client.get(
            f"http://127.0.0.1:{self.port}/metrics",
            headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
        )
        made_up = {
            line.split('operation_name="', 1)[1].split('"', 1)[0]
            for line in scraped.text.splitlines()
            if 'operation_name="Made' in line
        }
        self.seen[f"labels made up: {len(made_up)}"] += 1
        refused = await self.client.get(f"http://127.0.0.1:{self.port}/metrics")
        self.seen[f"/metrics without token {refused.status_code}"] += 1

    # 10
    async def cli_edit(self, folder: Path) -> None:
        """``chorus import`` beside the server extends a playlist a subscriber watches.

        Notes how long after its commit (``committedAt``) each version reached
        the subscriber (same machine, same clock).
        """
        playlist_id = self.cli_playlist
        url = f"ws://127.0.0.1:{self.port}/graphql"
        async with websockets.connect(url, subprotocols=[WS_PROTOCOL]) as ws:
            await ws.send(json.dumps({"type": "connection_init", "payload": self.auth}))
            await ws.recv()
            variables = {"playlistId": playlist_id, "sinceVersion": 1}
            await ws.send(
                json.dumps(
                    {
                        "id": "1",
                        "type": "subscribe",
                        "payload": {"query": EVENTS, "variables": variables},
                    }
                )
            )
            await asyncio.sleep(0.5)  # the stream catches up (nothing after v1), then is live
            importer = await asyncio.create_subprocess_exec(
                *CLI, "import", "mpd", str(mpd_slice(folder / "more.json", 250)),
                "--owner", "alice", env=self.env,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            delays = []
            try:
                for _ in range(2):  # the adds of tracks 100-199 and 200-249: v2, v3
                    message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    event = message["payload"]["data"]["playlistEvents"]
                    committed = datetime.fromisoformat(event["committedAt"]).timestamp()
                    delays.append((time.time() - committed) * 1000)
                    self.seen[f"v{event['version']}"] += 1
            except TimeoutError:
                self.seen["not delivered in 30 s"] += 1
            await importer.wait()
            if delays:
                self.seen[f"delivered within {max(delays):.0f} ms of commit"] += 1

    def second_serve(self, seconds: float) -> None:
        env = dict(self.env, CHORUS_PORT=str(free_port()))
        second = subprocess.Popen(
            [sys.executable, "-m", "chorus.cli", "serve", "--log-level", "warning"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            code = second.wait(timeout=max(seconds, 60))  # its start-up only: a loaded machine
            said = (second.stderr.read() if second.stderr else b"").decode().splitlines()
            self.seen[f"exit {code}, {len(said)} line: {said[0][:48] if said else ''}…"] += 1
        except subprocess.TimeoutExpired:
            self.seen["second serve kept running"] += 1
            second.terminate()
            second.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def attack(seconds: float, concurrency: int, one: Callable[[], Awaitable[None]]) -> int:
    stop = time.monotonic() + seconds
    sent = 0

    async def worker() -> None:
        nonlocal sent
        while time.monotonic() < stop:
            await one()
            sent += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sent


def server_env(folder: Path, port: int, **settings: str) -> dict[str, str]:
    """This process's environment plus a server on a SQLite file in ``folder``, at ``port``."""
    return dict(
        os.environ,
        CHORUS_DATABASE_URL=f"sqlite+aiosqlite:///{folder}/chorus.db",
        CHORUS_DATA_DIR=str(folder),
        CHORUS_JWT_SECRET=SECRET,
        CHORUS_PORT=str(port),
        **settings,
    )


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """``chorus serve`` as a user runs it, once ``/healthz`` answers."""
    with log.open("w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "chorus.cli", "serve", "--log-level", "warning"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    for _ in range(200):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"chorus serve did not start; see {log}")


def mpd_slice(path: Path, tracks: int) -> Path:
    """A Million Playlist Dataset slice of one playlist (pid 1) with ``tracks`` tracks."""
    items = [
        {
            "pos": i,
            "track_uri": f"spotify:track:bench{i:04d}",
            "track_name": f"Track {i}",
            "artist_name": "Artist",
            "album_name": "Album",
            "duration_ms": 1000,
        }
        for i in range(tracks)
    ]
    playlist = {"pid": 1, "name": "Beside", "collaborative": "false", "tracks": items}
    path.write_text(json.dumps({"playlists": [playlist]}))
    return path


def cli_import(env: dict[str, str], path: Path) -> str:
    """``chorus import mpd`` of ``path`` for alice; the global id of its (first) playlist."""
    done = subprocess.run(
        [*CLI, "import", "mpd", str(path), "--owner", "alice"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()[0]


def chinook_music(env: dict[str, str]) -> str:
    """``chorus import chinook`` for alice; the global id of its first "Music" playlist."""
    done = subprocess.run(
        [*CLI, "import", "chinook", "--owner", "alice"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return next(line.split()[0] for line in done.stdout.splitlines() if "Music" in line)


def create_playlist(port: int) -> str:
    created = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        headers={"Authorization": f"Bearer {token()}"},
        json={
            "query": 'mutation { createPlaylist(input: {operationId: "hostile-pl",'
            ' title: "Hostile", visibility: PUBLIC}) { playlist { id } } }'
        },
    )
    return str(created.json()["data"]["createPlaylist"]["playlist"]["id"])


Window = tuple[str, tuple[float, float], tuple[float, float], int, dict[str, int]]


async def run_classes(
    attacks: Attacks, seconds: float, concurrency: int, folder: Path
) -> list[Window]:
    """Each class: a quiet second, then the attack; the windows and what was answered."""
    await attacks.post(attacks.add("hostile-replay-1"))  # the edit the replays retry
    classes: list[tuple[str, Callable[[], Awaitable[None]] | None]] = [
        ("1 validation cost (fragment bomb)", attacks.validation_cost),
        ("1 50 fragments merged side by side, no token", attacks.merged_fragments),
        ("1 30 x __schema, no token", attacks.introspection_aliases),
        ("1 over the token limit (10 KB), no token", attacks.over_the_token_limit),
        ("1 1,000 operations, no token", attacks.many_operations),
        ("1 1,600 unknown input fields, no token", attacks.unknown_input_fields),
        ("2 nested JSON (100k brackets)", attacks.nested_json),
        ("3 subscription over HTTP", attacks.subscription_over_http),
        ("4 token claims of the wrong type", attacks.token_claims),
        ("5 1 MiB header / 20,000 headers", attacks.transport),
        ("5 slowloris: 50 sockets, a header line per 0.5 s", None),
        ("6 replays past the rate limit", attacks.replays),
        ("7 expensive read (30 x changes(first: 100) with entries)", attacks.read_cost),
        ("7 wide read (24 x entries(first: 100), all fields)", attacks.wide_page_read),
        ("7 subscription over the cost limit", attacks.subscription_cost),
        ("8 CORS preflight, unlisted origin", attacks.cors),
        ("9 metrics label flood, no token", attacks.metrics_flood),
        ("10 second serve on the same SQLite", None),
        ("10 chorus import beside serve, a subscriber", None),
        ("11 malformed X-Request-Id", attacks.request_ids),
    ]
    windows: list[Window] = []
    await asyncio.sleep(1.0)
    for name, one in classes:
        attacks.seen.clear()
        quiet = (time.time(), time.time() + 1.0)
        await asyncio.sleep(1.0)
        start = time.time()
        if one is not None:
            sent = await attack(seconds, concurrency, one)
        elif name.startswith("5 slowloris"):
            await asyncio.gather(*(attacks.slowloris(seconds) for _ in range(50)))
            sent = 50
        elif name.startswith("10 chorus import"):
            await attacks.cli_edit(folder)
            sent = 1
        else:
            await asyncio.to_thread(attacks.second_serve, seconds)
            sent = 1
        end = time.time()
        if one == attacks.metrics_flood:
            await attacks.metrics_labels()  # after the window: the scrape is no attack
        windows.append((name, quiet, (start, end), sent, dict(attacks.seen)))
    await attacks.client.aclose()
    return windows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--bomb-fragments",
        type=int,
        default=16,
        help="fragments of the fragment bomb, each spreading the next twice (~1 KB at 16)",
    )
    parser.add_argument(
        "--attacker-nice",
        type=int,
        default=10,
        help="the attackers' nice increment once the server and prober run (0: none)",
    )
    parser.add_argument(
        "--classes",
        choices=("all", "feed"),
        default="all",
        help="feed: only class 12 (one user's feedEvents), on its own server",
    )
    parser.add_argument("--feed-follows", type=int, default=1_000)
    parser.add_argument("--feed-edits", type=int, default=20)
    args = parser.parse_args()
    if args.classes == "feed":
        from _hostile_feed import feed_class

        feed_class(args.feed_follows, args.feed_edits, quiet_s=args.seconds)
        return
    port = args.port or free_port()
    folder = Path(tempfile.mkdtemp(prefix="chorus-hostile-"))
    env = server_env(
        folder,
        port,
        CHORUS_RATE_LIMIT_PER_MINUTE="30",
        CHORUS_CORS_ORIGINS=ORIGIN_OK,
        CHORUS_METRICS_TOKEN=METRICS_TOKEN,
    )
    server = start_server(env, port, folder / "server.log")
    samples_file = folder / "probe.txt"
    prober = multiprocessing.Process(
        target=probe, args=(port, str(samples_file), time.time() + 12 * (args.seconds + 1) + 60)
    )
    try:
        attacks = Attacks(port, env, create_playlist(port), args.bomb_fragments)
        attacks.cli_playlist = cli_import(env, mpd_slice(folder / "first.json", 100))
        attacks.chinook_music = chinook_music(env)
        prober.start()
        os.nice(args.attacker_nice)  # the attackers (and the CLI they start) yield the cores
        windows = asyncio.run(run_classes(attacks, args.seconds, args.concurrency, folder))
        time.sleep(0.5)
    finally:
        if prober.is_alive():
            prober.terminate()
            prober.join()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    with samples_file.open() as lines:
        samples = [
            (float(t), float(ms)) for t, ms in (line.split() for line in lines if line.strip())
        ]
    print(
        f"/healthz probed every 10 ms: {len(samples)} probes; each attack {args.seconds:g} s "
        f"with {args.concurrency} attackers at nice +{args.attacker_nice}; "
        f"server log {folder / 'server.log'}\n"
    )
    print(
        "| class | quiet worst ms | attack p99 ms | attack worst ms | ratio | sent "
        "| server answered |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, quiet, window, sent, seen in windows:
        q, a = worst(samples, *quiet), worst(samples, *window)
        top = sorted(seen.items(), key=lambda kv: -kv[1])[:3]
        answered = ", ".join(f"{k} x{v}" for k, v in top)
        print(
            f"| {name} | {q:.1f} | {p99(samples, *window):.1f} | {a:.1f} | {a / q:.1f} "
            f"| {sent} | {answered} |"
        )
    from _hostile_feed import feed_class  # class 12 runs on a server of its own

    feed_class(args.feed_follows, args.feed_edits, quiet_s=args.seconds)


if __name__ == "__main__":
    main()
