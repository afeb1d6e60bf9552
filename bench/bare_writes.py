"""The bare peer of ``bench/writes.py``: the add transaction behind HTTP, and nothing else.

A raw ASGI app on uvicorn (httptools, the event loop uvicorn picks, as
``chorus serve`` runs) that reads the load's JSON body, runs the pgbench
script's transaction on an asyncpg pool (lock the playlist row, insert the
entry, bump the version, insert the log row, insert the outbox row; prepared
statements, the log and outbox payloads copied from rows Chorus committed)
and answers in ``addEntries``' shape. No GraphQL, no authentication, no
validation, no idempotency lookup, no rebase, no owner queue, no relay, no
SQLAlchemy: what any Python HTTP server pays on this machine for the same
commit, driven by the same load process. It is the ceiling a Python server
can reach here, so Chorus is measured against it as well as against pgbench.

    python bench/bare_writes.py PORT DSN ROWS_JSON

``ROWS_JSON`` is a file holding ``[payload, result, event]`` (JSON texts).
A ``playlistId`` is the playlist row's id itself (the bench makes its own
playlists for this peer, as for pgbench).
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import asyncpg

from _bare import read_body, run

LOCK = "SELECT version FROM playlist WHERE id = $1 FOR UPDATE"
ENTRY = (
    "INSERT INTO playlist_entry (playlist_id, entry_id, position_key, media_id, added_by, "
    "added_at) VALUES ($1, $2, $3, $4, $5, now())"
)
HEADER = (
    "UPDATE playlist SET version = version + 1, entry_count = entry_count + 1, "
    "updated_at = now() WHERE id = $1 RETURNING version"
)
LOG = (
    "INSERT INTO playlist_mutation (playlist_id, version, operation_id, actor_id, payload, "
    "request_hash, result, committed_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7::jsonb, now())"
)
OUTBOX = (
    "INSERT INTO outbox (playlist_id, version, payload, created_at, published_at) "
    "VALUES ($1, $2, $3::jsonb, now(), now())"
)
MEDIA = "chinook:track:1"
USER = "bench"


def app_for(dsn: str, payload: str, result: str, event: str) -> Any:
    """The ASGI app: ``POST`` any path with the load's body; a pool of 10 connections."""
    pool: asyncpg.Pool | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal pool
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                pool = await asyncpg.create_pool(dsn, min_size=10, max_size=10)
                await send({"type": "lifespan.startup.complete"})
            if pool is not None:
                await pool.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = json.loads(await read_body(receive))["variables"]["input"]
        playlist = request["playlistId"]
        assert pool is not None
        async with pool.acquire() as conn, conn.transaction():
            await conn.fetchval(LOCK, playlist)
            await conn.execute(ENTRY, playlist, uuid.uuid4().hex, uuid.uuid4().hex[:8], MEDIA, USER)
            version = await conn.fetchval(HEADER, playlist)
            await conn.execute(
                LOG, playlist, version, request["operationId"], USER, payload, uuid.uuid4().hex,
                result,
            )  # fmt: skip
            await conn.execute(OUTBOX, playlist, version, event)
        answer = {"version": version, "rebased": True, "replayed": False, "userErrors": []}
        out = json.dumps({"data": {"addEntries": answer}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


def main() -> None:
    port, dsn, rows = sys.argv[1:4]
    with open(rows) as f:
        payload, result, event = json.load(f)
    run(app_for(dsn, payload, result, event), int(port), lifespan="on")


if __name__ == "__main__":
    main()
