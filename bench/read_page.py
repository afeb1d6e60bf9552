"""Read throughput: a 50-entry page with media through Chorus, against bare asyncpg.

Builds a 3,290-entry playlist of Chinook tracks in a fresh PostgreSQL
database, starts ``chorus serve`` on it (a subprocess, as a user runs it), and
for the same wall time sends, with the same concurrency:

* Chorus: ``playlist(id) { version entries(first: 50, after: …) { edges { cursor node
  { id positionKey media { title artists album durationMs } } } } }`` over HTTP;
* baseline: the SQL those reads need (the header row and the keyset page of
  50 live entries), run directly with asyncpg on a pool of the same size.

Chorus runs twice: with the response cache off (the baseline this bench has
always measured: every page executes) and on, after asking every page once
(docs/caching.md). Prints requests per second of each and their ratios to
asyncpg.

    python bench/read_page.py [--seconds 5] [--concurrency 16]
        [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

from chorus.auth import mint_token
from chorus.db.engine import Database
from chorus.db.migrate import upgrade_async
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.model import Visibility
from chorus.graphql.schema.common import ids
from hostile import start_server

SECRET = "bench-secret-" + "x" * 40
QUERY = """query Page($id: ID!, $after: String) {
  playlist(id: $id) { version entries(first: 50, after: $after) {
    edges { cursor node { id positionKey media { title artists album durationMs } } } } } }"""
PAGE_SQL = """SELECT entry_id, position_key, media_id, added_by, added_at, removed_at
FROM playlist_entry WHERE playlist_id = $1 AND removed_at IS NULL
AND (position_key, entry_id) > ($2, $3) ORDER BY position_key, entry_id LIMIT 51"""
HEADER_SQL = "SELECT * FROM playlist WHERE id = $1"


async def build(url: str) -> tuple[str, list[tuple[str, str]]]:
    await upgrade_async(url)
    db = Database(url)
    store = PlaylistStore(db)
    created = await store.create(
        CreatePlaylist("bench-create", "Bench", visibility=Visibility.PUBLIC), "alice"
    )
    pid = created.outcome.playlist_id
    positions: list[tuple[str, str]] = []
    version = 0
    for start in range(1, 3291, 100):
        media = tuple(f"chinook:track:{i}" for i in range(start, min(start + 100, 3291)))
        done = await store.execute(AddEntries(pid, f"bench-{start}", version, media), "alice")
        version = done.outcome.version
        positions += [(e.position_key, e.entry_id) for e in done.outcome.entries]
    await db.dispose()
    return pid, positions


async def run_for(seconds: float, concurrency: int, one: object) -> float:
    stop = time.monotonic() + seconds
    count = 0

    async def worker() -> None:
        nonlocal count
        while time.monotonic() < stop:
            await one()  # type: ignore[operator]
            count += 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.monotonic() - started)


async def chorus_rate(
    args: argparse.Namespace,
    gid: str,
    positions: list[tuple[str, str]],
    token: str,
    *,
    warm: bool,
) -> float:
    """Pages per second from the running server; ``warm``: every page asked once first."""
    base = f"http://127.0.0.1:{args.port}"
    limits = httpx.Limits(max_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:

        async def page(key: str, entry: str) -> None:
            body = {"query": QUERY, "variables": {"id": gid, "after": ids.entry_cursor(key, entry)}}
            r = await http.post("/graphql", json=body, headers={"Authorization": f"Bearer {token}"})
            data = r.json()
            assert "errors" not in data, data

        async def chorus_page() -> None:
            await page(*random.choice(positions))

        if warm:  # fill the response cache with every page the load asks for
            for start in range(0, len(positions), args.concurrency):
                await asyncio.gather(
                    *(page(*p) for p in positions[start : start + args.concurrency])
                )
        await run_for(1.0, args.concurrency, chorus_page)  # warm up
        return await run_for(args.seconds, args.concurrency, chorus_page)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    name = f"chorus_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.admin_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
    url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    server = None
    try:
        pid, positions = await build(url)
        gid = ids.to_global_id("Playlist", pid)
        data_dir = Path(tempfile.mkdtemp())
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")},
            "CHORUS_DATABASE_URL": url,
            "CHORUS_JWT_SECRET": SECRET,
            "CHORUS_DATA_DIR": str(data_dir),
            "CHORUS_PORT": str(args.port),
        }
        token = mint_token(SECRET, "bob")
        rates: dict[str, float] = {}
        for mode, extra in (("cold", {"CHORUS_RESPONSE_CACHE": "false"}), ("hot", {})):
            log = data_dir / f"server-{mode}.log"
            server = await asyncio.to_thread(start_server, {**env, **extra}, args.port, log)
            rates[mode] = await chorus_rate(args, gid, positions, token, warm=mode == "hot")
            server.terminate()
            server.wait(timeout=10)
            server = None

        pool = await asyncpg.create_pool(dsn, min_size=args.concurrency, max_size=args.concurrency)

        async def sql_page() -> None:
            key, entry = random.choice(positions)
            async with (
                pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                await conn.fetchrow(HEADER_SQL, pid)
                await conn.fetch(PAGE_SQL, pid, key, entry)

        await run_for(1.0, args.concurrency, sql_page)
        sql_rps = await run_for(args.seconds, args.concurrency, sql_page)
        await pool.close()

        cold, hot = rates["cold"], rates["hot"]
        print(f"50-entry page with media, {args.concurrency} concurrent, {args.seconds:.0f} s each")
        print(f"  chorus, cache off (HTTP + GraphQL + catalog): {cold:8.1f} req/s")
        print(f"  chorus, response cache warm:                  {hot:8.1f} req/s")
        print(f"  asyncpg (the same SQL, no HTTP):              {sql_rps:8.1f} req/s")
        print(f"  ratio chorus cache off / asyncpg (baseline):  {cold / sql_rps:8.3f}")
        print(f"  ratio chorus cache warm / asyncpg:            {hot / sql_rps:8.3f}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    asyncio.run(main())
