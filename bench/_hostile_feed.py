"""Class 12 of ``bench/hostile.py``: one user's ``feedEvents`` subscriptions (issue 30, finding 2).

eve follows ``follows`` PUBLIC playlists and opens 10 sockets of 20
``feedEvents`` subscriptions each (the per-user and per-socket maxima), while
another user's uncached query runs back to back and ``/healthz`` is probed
every 10 ms; then ``edits`` edits at 5 a second on one followed playlist.
Measured in the same run: the quiet figures first (no socket), then the
attack. Its own server (no mutation rate limit: the set-up follows 1,000
playlists), its own prober.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import websockets

from hostile import WS_PROTOCOL, free_port, inside, probe, server_env, start_server, token

SOCKETS, PER_SOCKET = 10, 20
FEED = (
    "subscription { feedEvents { ... on FeedItem { version }"
    " ... on FeedResyncRequired { reason } } }"
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class FeedAttack:
    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/graphql"
        self.client = httpx.AsyncClient(timeout=60)
        self.answers: dict[str, int] = {}
        self.items = 0

    async def gql(self, user: str, query: str, **variables: Any) -> Any:
        r = await self.client.post(
            self.url,
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {token(user)}"},
        )
        body = r.json()
        assert "errors" not in body, body
        return body["data"]

    async def setup(self, follows: int) -> str:
        """``follows`` PUBLIC playlists of "own", each followed by eve; the first one's id."""
        ids: list[str] = []
        gate = asyncio.Semaphore(8)

        async def one(i: int) -> None:
            async with gate:
                made = await self.gql(
                    "own",
                    "mutation($i: CreatePlaylistInput!) { createPlaylist(input: $i)"
                    " { playlist { id } } }",
                    i={"operationId": f"feed-{i}", "title": f"F{i}", "visibility": "PUBLIC"},
                )
                pid = made["createPlaylist"]["playlist"]["id"]
                ids.append(pid)
                await self.gql(
                    "eve",
                    "mutation($i: FollowInput!) { follow(input: $i) { changed } }",
                    i={"kind": "PLAYLIST", "targetId": pid},
                )

        await asyncio.gather(*(one(i) for i in range(follows)))
        return ids[0]

    async def victim(self, stop: asyncio.Event, latencies: list[float]) -> None:
        """Another user's query, new each time (no cached answer), back to back."""
        while not stop.is_set():
            alias = "q" + uuid.uuid4().hex[:8]
            started = time.monotonic()
            await self.gql(
                "vic", f"{{ {alias}: viewer {{ playlists(first: 5) {{ totalCount }} }} }}"
            )
            latencies.append((time.monotonic() - started) * 1000)

    async def socket(self, n: int, stack: contextlib.AsyncExitStack) -> Any:
        ws = await stack.enter_async_context(
            websockets.connect(f"ws://127.0.0.1:{self.port}/graphql", subprotocols=[WS_PROTOCOL])
        )
        await ws.send(
            json.dumps(
                {
                    "type": "connection_init",
                    "payload": {"Authorization": f"Bearer {token('eve')}"},
                }
            )
        )
        await ws.recv()
        for k in range(PER_SOCKET):
            message = {"id": f"{n}-{k}", "type": "subscribe", "payload": {"query": FEED}}
            await ws.send(json.dumps(message))
        return ws

    async def read(self, ws: Any) -> None:
        with contextlib.suppress(websockets.WebSocketException):
            async for raw in ws:
                message = json.loads(raw)
                if message["type"] == "next":
                    self.items += 1
                else:
                    codes = [e.get("extensions", {}).get("code") for e in message["payload"]]
                    key = f"{message['type']} {','.join(c for c in codes if c)}"
                    self.answers[key] = self.answers.get(key, 0) + 1

    async def edit(self, playlist_id: str, edits: int) -> None:
        for n in range(edits):
            await self.gql(
                "own",
                "mutation($i: AddEntriesInput!) { addEntries(input: $i) { version } }",
                i={
                    "playlistId": playlist_id,
                    "operationId": f"feed-edit-{n}",
                    "baseVersion": n,
                    "mediaIds": ["chinook:track:1"],
                },
            )
            await asyncio.sleep(0.2)  # 5 a second

    async def health(self) -> dict[str, Any]:
        body: dict[str, Any] = (
            await self.client.get(f"http://127.0.0.1:{self.port}/healthz")
        ).json()
        return body


async def run(port: int, pid: int, follows: int, edits: int, quiet_s: float) -> dict[str, Any]:
    attack = FeedAttack(port)
    target = await attack.setup(follows)
    out: dict[str, Any] = {"rss_before": rss_mb(pid)}
    quiet: list[float] = []
    stop = asyncio.Event()
    victim = asyncio.create_task(attack.victim(stop, quiet))
    out["quiet"] = (time.time(), time.time() + quiet_s)
    await asyncio.sleep(quiet_s)
    stop.set()
    await victim
    out["victim_quiet"] = quiet
    loud: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        start = time.time()
        sockets = [await attack.socket(n, stack) for n in range(SOCKETS)]
        readers = [asyncio.create_task(attack.read(ws)) for ws in sockets]
        await asyncio.sleep(1.0)  # the subscriptions stand (or are refused)
        out["health_attack"] = await attack.health()
        out["opening"] = (start, time.time())
        start = time.time()
        stop = asyncio.Event()
        victim = asyncio.create_task(attack.victim(stop, loud))
        await attack.edit(target, edits)
        await asyncio.sleep(1.0)  # the last edit is delivered
        stop.set()
        await victim
        out["attack"] = (start, time.time())
        out["rss_attack"] = rss_mb(pid)
        for ws in sockets:
            await ws.close()
        for reader in readers:
            reader.cancel()
    out["victim_attack"] = loud
    deadline = time.monotonic() + 30
    while (  # noqa: ASYNC110
        (h := await attack.health())["feed_subscriptions"] or h["live_streams"]
    ) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # a server's count, polled over HTTP: no event to await
    out["health_after"] = h
    out["rss_after"] = rss_mb(pid)
    out["items"], out["answers"] = attack.items, attack.answers
    await attack.client.aclose()
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def feed_class(follows: int, edits: int, quiet_s: float) -> None:
    """Run class 12 on its own server and print its table."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="chorus-hostile-feed-"))
    env = server_env(folder, port)
    server = start_server(env, port, folder / "server.log")
    samples_file = folder / "probe.txt"
    prober = multiprocessing.Process(
        target=probe, args=(port, str(samples_file), time.time() + 600)
    )
    try:
        prober.start()
        out = asyncio.run(run(port, server.pid, follows, edits, quiet_s))
    finally:
        prober.terminate()
        prober.join()
        server.terminate()
        server.wait(timeout=10)
    samples = [
        (float(t), float(ms))
        for t, ms in (line.split() for line in samples_file.read_text().splitlines() if line)
    ]
    hq, ha = inside(samples, *out["quiet"]), inside(samples, *out["attack"])
    ho = inside(samples, *out["opening"])
    vq, va = out["victim_quiet"], out["victim_attack"]
    h = out["health_attack"]
    print(
        f"\n12 feedEvents: eve follows {follows} PUBLIC playlists, {SOCKETS} sockets x "
        f"{PER_SOCKET} subscriptions, {edits} edits at 5/s on one; server log {folder}\n"
    )
    print("| measure | quiet | attack | ratio |")
    print("|---|---|---|---|")
    print(f"| /healthz worst ms, opening 200 subscriptions | {max(hq):.1f} | {max(ho):.1f} | "
          f"{max(ho) / max(hq):.1f} |")  # fmt: skip
    print(f"| /healthz worst ms, edits | {max(hq):.1f} | {max(ha):.1f} | {max(ha) / max(hq):.1f} |")
    print(f"| /healthz p99 ms | {pct(hq, 0.99):.1f} | {pct(ha, 0.99):.1f} | "
          f"{pct(ha, 0.99) / pct(hq, 0.99):.1f} |")  # fmt: skip
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        a, b = pct(vq, q), pct(va, q)
        print(f"| other user's uncached query {name} ms, edits | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    print(f"| other user's queries | {len(vq)} | {len(va)} | |")
    print(
        f"| server RSS MB (before / attack / after) | {out['rss_before']:.0f} | "
        f"{out['rss_attack']:.0f} | after: {out['rss_after']:.0f} |"
    )
    print(
        f"\nduring: live_streams {h['live_streams']}, feed_sources {h['feed_sources']}, "
        f"feed_subscriptions {h['feed_subscriptions']}; eve got {out['items']} items, "
        f"answers {out['answers']}; after the sockets: live_streams "
        f"{out['health_after']['live_streams']}, feed_sources "
        f"{out['health_after']['feed_sources']}, feed_subscriptions "
        f"{out['health_after']['feed_subscriptions']}; "
        f"victim median {statistics.median(va):.1f} ms"
    )
