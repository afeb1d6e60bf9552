"""The bare peer of ``bench/scale.py``: a cold read's HTTP and Redis round trips, and nothing else.

A raw ASGI app on uvicorn (httptools, the event loop uvicorn picks, as
``chorus serve`` runs). Per request it reads the body, decodes it as JSON,
asks Redis what a full-profile cold read asks (docs/full-profile.md): one
``MGET`` of the playlist's head and snapshot keys, and, for a ``Head`` query,
one ``EVALSHA`` of a script that reads two keys, as the heads' script does.
That is 1.5 round trips per request where Chorus's cold reads make 1.2–1.3
(``redis-cli monitor``: an ``MGET`` per snapshot read, shared by the reads
waiting for it, and a heads script for most answers). It sends the answer
Chorus gave to that query for that playlist, which the bench stored in those
keys (:func:`store_answers`), with ``Content-Type: application/json``.

No GraphQL, no token, no limits, no cache: run as k processes behind the same
HAProxy and the same wrk as Chorus, it shows what more processes cost on this
machine by themselves (preemption, caches lost at each switch), so Chorus's
CPU per request at k processes is read against it.

    python bench/bare_scale.py PORT REDIS_URL
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from _bare import read_body, run, spawned

HEAD_KEY = "bench:bare:{{{id}}}:head"
"""A playlist's ``Head`` answer (Chorus's bytes)."""
SNAPSHOT_KEY = "bench:bare:{{{id}}}:snapshot"
"""A playlist's ``Page`` answer (Chorus's bytes)."""
GENERATION_KEY = "bench:bare:generation"
SCRIPT = "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}"
"""Reads two keys, as the heads' script reads the generation and a head."""


def store_answers(redis_url: str, answers: dict[str, tuple[bytes, bytes]]) -> None:
    """Store each playlist's ``(Head answer, Page answer)`` where the peer reads them."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.set(GENERATION_KEY, "bench")
        for playlist, (head, page) in answers.items():
            keys = (HEAD_KEY.format(id=playlist), SNAPSHOT_KEY.format(id=playlist))
            client.mset(dict(zip(keys, (head, page), strict=True)))
    finally:
        client.close()


def app_for(redis_url: str) -> Any:
    """The ASGI app: ``POST`` a GraphQL request, Chorus's stored answer to its operation;
    any other method, an empty 200 (the bench's health check through HAProxy)."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(redis_url)
    script = client.register_script(SCRIPT)
    headers = [(b"content-type", b"application/json")]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        if scope["method"] != "POST":  # a health check (the bench waits for HAProxy so)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        request = json.loads(raw)
        playlist = request.get("variables", {}).get("id", "")
        keys = [HEAD_KEY.format(id=playlist), SNAPSHOT_KEY.format(id=playlist)]
        _, body = await client.mget(keys)  # a snapshot read: the head and the snapshot
        if request.get("operationName") == "Head":
            _, body = await script(keys=[GENERATION_KEY, keys[0]])  # as the heads' script
        body = body or b"{}"
        length = (b"content-length", b"%d" % len(body))
        await send({"type": "http.response.start", "status": 200, "headers": [*headers, length]})
        await send({"type": "http.response.body", "body": body})

    return app


@contextlib.contextmanager
def serving(port: int, redis_url: str) -> Iterator[int]:
    """This app in its own process at ``port``; yields its process id once it accepts
    connections."""
    with spawned([sys.executable, __file__, str(port), redis_url], port) as pid:
        yield pid


def main() -> None:
    port, redis_url = sys.argv[1:3]
    run(app_for(redis_url), int(port), lifespan="off")


if __name__ == "__main__":
    main()
