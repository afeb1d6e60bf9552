"""One user's subscriptions all catching up from version 0, while ``/healthz`` is probed.

Starts ``chorus serve`` (embedded profile, a fresh SQLite database), commits
``--versions`` versions of ``--entries`` entries each, then opens
``--sockets`` WebSockets of one user with ``--subscriptions`` each, every one
``playlistEvents(sinceVersion: 0)``, and reads until each socket is quiet for
``--quiet`` seconds. Prints the frames and bytes received, the resyncs, the
p99 and worst ``/healthz`` latency (probed every 10 ms during the storm), and
the server's RSS after (issue 10, a fresh attacker's catch-up storm).

    python bench/catch_up_storm.py [--versions 1000] [--sockets 10] [--subscriptions 20]

Targets 127.0.0.1 only; bounded by the limits a user has (10 sockets × 20).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import jwt
import websockets

SECRET = "bench-storm-" + "x" * 40
EVENTS = """
subscription Events($playlistId: ID!, $sinceVersion: Int!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: $sinceVersion) {
    ... on PlaylistChanged {
      version changes { ... on EntriesAdded { entries { id positionKey mediaId media { title } } } }
    }
    ... on ResyncRequired { currentVersion reason }
  }
}
"""
ADD = "mutation($i: AddEntriesInput!) { addEntries(input: $i) { version } }"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def storm(args: argparse.Namespace, port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/graphql"
    token = jwt.encode({"sub": "alice", "exp": int(time.time()) + 3600}, SECRET, "HS256")
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(200):
            try:
                await client.get(f"http://127.0.0.1:{port}/healthz")
                break
            except httpx.HTTPError:
                await asyncio.sleep(0.1)
        created = await client.post(
            url,
            headers=auth,
            json={
                "query": 'mutation { createPlaylist(input: {operationId: "storm",'
                ' title: "Storm", visibility: PUBLIC}) { playlist { id } } }'
            },
        )
        playlist_id = created.json()["data"]["createPlaylist"]["playlist"]["id"]

        async def adder(first: int) -> None:
            for n in range(first, args.versions, 8):
                media = [
                    f"chinook:track:{1 + (n * args.entries + j) % 3000}"
                    for j in range(args.entries)
                ]
                variables = {"playlistId": playlist_id, "operationId": f"add-{n}", "baseVersion": 0}
                await client.post(
                    url,
                    headers=auth,
                    json={"query": ADD, "variables": {"i": {**variables, "mediaIds": media}}},
                )

        await asyncio.gather(*(adder(k) for k in range(8)))
        latencies: list[float] = []
        stop = asyncio.Event()

        async def probe() -> None:
            async with httpx.AsyncClient(timeout=60) as prober:
                while not stop.is_set():
                    started = time.perf_counter()
                    await prober.get(f"http://127.0.0.1:{port}/healthz")
                    latencies.append((time.perf_counter() - started) * 1000)
                    await asyncio.sleep(0.01)

        got = {"frames": 0, "bytes": 0, "resyncs": 0}

        async def one_socket() -> None:
            async with websockets.connect(
                url.replace("http", "ws", 1),
                subprotocols=[websockets.Subprotocol("graphql-transport-ws")],
                max_size=None,
            ) as ws:
                await ws.send(json.dumps({"type": "connection_init", "payload": auth}))
                await ws.recv()
                for n in range(args.subscriptions):
                    variables = {"playlistId": playlist_id, "sinceVersion": 0}
                    payload = {"query": EVENTS, "variables": variables}
                    await ws.send(
                        json.dumps({"id": str(n), "type": "subscribe", "payload": payload})
                    )
                try:
                    while True:
                        frame = await asyncio.wait_for(ws.recv(), args.quiet)
                        got["frames"] += 1
                        got["bytes"] += len(frame)
                        got["resyncs"] += '"reason"' in str(frame)
                except TimeoutError:
                    pass

        prober = asyncio.create_task(probe())
        started = time.time()
        await asyncio.gather(*(one_socket() for _ in range(args.sockets)))
        stop.set()
        await prober
    latencies.sort()
    return {
        **got,
        "seconds": time.time() - started - args.quiet,
        "p99": latencies[int(len(latencies) * 0.99)],
        "worst": latencies[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--versions", type=int, default=1_000)
    parser.add_argument("--entries", type=int, default=5, help="entries added per version")
    parser.add_argument("--sockets", type=int, default=10)
    parser.add_argument("--subscriptions", type=int, default=20)
    parser.add_argument(
        "--quiet", type=float, default=20.0, help="seconds of silence that end a socket"
    )
    args = parser.parse_args()
    port = free_port()
    folder = tempfile.mkdtemp(prefix="chorus-storm-")
    env = dict(
        os.environ,
        CHORUS_DATABASE_URL=f"sqlite+aiosqlite:///{folder}/chorus.db",
        CHORUS_DATA_DIR=folder,
        CHORUS_JWT_SECRET=SECRET,
        CHORUS_PORT=str(port),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "chorus.cli", "serve", "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        result = asyncio.run(storm(args, port))
        with open(f"/proc/{server.pid}/status") as status:
            rss_kib = int(status.read().split("VmRSS:")[1].split()[0])
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"| {args.versions} versions, {args.sockets} × {args.subscriptions} from v0 "
        f"| {result['frames']:.0f} frames ({result['bytes'] / 1e6:.0f} MB), "
        f"{result['resyncs']:.0f} resyncs | {result['seconds']:.1f} s "
        f"| {result['p99']:.0f} ms | {result['worst']:.0f} ms | {rss_kib // 1024} MiB |"
    )


if __name__ == "__main__":
    main()
