"""The bare peer of ``bench/peers.py``'s hot row: a cached answer behind HTTP, and nothing else.

A raw ASGI app on uvicorn (httptools, the event loop uvicorn picks, as
``chorus serve`` runs) that reads the request body, looks it up by its exact
bytes in a table of answers, and sends the stored answer: the same body bytes
and the same headers (``Date``, ``Server`` and ``Content-Length`` are
uvicorn's or recomputed) Chorus gave for that request from its response cache.
No GraphQL, no authentication, no limits, no cache key built from a parsed
document: the least any Python server on uvicorn does to answer from a cache,
so Chorus's hot row is measured against it as well as against PostGraphile.

    python bench/bare_page.py PORT ANSWERS_JSON [--chorus-transport]

``ANSWERS_JSON`` is a file holding a list of ``[request body, status, headers,
response body]`` (texts; ``headers`` a list of ``[name, value]``). A body not
in it is answered 404. ``--chorus-transport`` serves it on Chorus's HTTP protocol
(``chorus.transport``: a response's head goes out with its body, one write) rather
than uvicorn's (two writes), so ``bench/peers.py`` can show what that alone is worth.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _bare import read_body, run, spawned

SKIPPED = {"date", "server", "content-length", "transfer-encoding", "connection"}
"""Response headers uvicorn writes itself (or that belong to the connection)."""


def app_for(answers: list[list[Any]]) -> Any:
    """The ASGI app: ``POST`` any path; the answer stored for the body, or 404."""
    table: dict[bytes, tuple[int, list[tuple[bytes, bytes]], bytes]] = {}
    for request, status, headers, body in answers:
        out = body.encode()
        kept = [(k.lower().encode(), v.encode()) for k, v in headers if k.lower() not in SKIPPED]
        kept.append((b"content-length", b"%d" % len(out)))
        table[request.encode()] = (status, kept, out)
    missing = (404, [(b"content-length", b"0")], b"")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        status, headers, out = table.get(await read_body(receive), missing)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


@contextlib.contextmanager
def serving(
    answers: list[list[Any]], port: int, table: Path, *, chorus_transport: bool = False
) -> Iterator[int]:
    """This app in its own process at ``port``, answering ``answers`` (written to ``table``,
    the format of the module docstring), on Chorus's transport if ``chorus_transport``;
    yields its process id once it accepts connections."""
    table.write_text(json.dumps(answers))
    command = [sys.executable, __file__, str(port), str(table)]
    with spawned(command + (["--chorus-transport"] if chorus_transport else []), port) as pid:
        yield pid


def main() -> None:
    port, answers = sys.argv[1:3]
    with open(answers) as f:
        table = json.load(f)
    chorus_transport = sys.argv[3:] == ["--chorus-transport"]
    run(app_for(table), int(port), lifespan="off", chorus_transport=chorus_transport)


if __name__ == "__main__":
    main()
