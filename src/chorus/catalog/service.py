"""The catalog as its own HTTP service: two read-only endpoints over any Catalog.

``GET /media?id=a&id=b…``
    up to 100 ids (each 1–128 characters) → ``{"media": [Media, …]}``, known
    ids only, in the order asked, each once.
``GET /search?q=…&offset=0&limit=50``
    ``q`` required (may be empty, ≤ 200 characters), ``offset`` ≥ 0 (default
    0), ``limit`` 1–100 (default 50) → ``{"items": [...], "total": n, "offset": o}``.

A bad parameter answers 400 ``{"error": "<what is wrong>"}``; a backing
catalog that is itself unavailable answers 503. Shapes: :mod:`chorus.catalog.replies`.
Run it with any ASGI server, e.g. ``uvicorn --factory`` on a function that
returns ``create_catalog_app(EmbeddedCatalog(db))``; the caller owns (and
closes) the catalog.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from chorus.catalog.protocol import (
    MAX_SEARCH_OFFSET,
    MAX_SEARCH_QUERY_LENGTH,
    Catalog,
    CatalogUnavailable,
)
from chorus.catalog.replies import ErrorReply, MediaReply, SearchReply, media_to_wire
from chorus.domain.limits import MAX_ID_LENGTH

MAX_IDS = 100
MAX_LIMIT = 100
DEFAULT_LIMIT = 50
_DIGITS = re.compile(r"[0-9]{1,9}")


class _BadRequest(Exception):
    pass


def _error(status: int, message: str) -> JSONResponse:
    body: ErrorReply = {"error": message}
    return JSONResponse(body, status_code=status)


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or not low <= int(raw) <= high:
        raise _BadRequest(f"{name} must be an integer from {low} to {high}")
    return int(raw)


def create_catalog_app(
    catalog: Catalog, *, on_shutdown: Callable[[], Awaitable[None]] | None = None
) -> Starlette:
    """An ASGI app serving ``GET /media`` and ``GET /search`` from ``catalog``.

    Args:
        catalog: any :class:`~chorus.catalog.protocol.Catalog`, typically an
            :class:`~chorus.catalog.embedded.EmbeddedCatalog`. The app does
            not close it.
        on_shutdown: awaited when the server stops (e.g. disposing the
            database the catalog reads).

    Returns:
        A Starlette app; errors never expose internal details (``debug`` off).
    """

    async def media(request: Request) -> JSONResponse:
        ids = request.query_params.getlist("id")
        if len(ids) > MAX_IDS:
            return _error(400, f"at most {MAX_IDS} ids per request")
        if any(not 1 <= len(i) <= MAX_ID_LENGTH for i in ids):
            return _error(400, f"every id must be 1 to {MAX_ID_LENGTH} characters")
        try:
            found = await catalog.get_many(ids)
        except CatalogUnavailable:
            return _error(503, "the catalog is unavailable")
        body: MediaReply = {
            "media": [media_to_wire(found[i]) for i in dict.fromkeys(ids) if i in found]
        }
        return JSONResponse(body)

    async def search(request: Request) -> JSONResponse:
        query = request.query_params.get("q")
        if query is None:
            return _error(400, "q is required (it may be empty)")
        if len(query) > MAX_SEARCH_QUERY_LENGTH:
            return _error(400, f"q must be at most {MAX_SEARCH_QUERY_LENGTH} characters")
        try:
            offset = _int_param(request, "offset", 0, 0, MAX_SEARCH_OFFSET)
            limit = _int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        except _BadRequest as exc:
            return _error(400, str(exc))
        try:
            page = await catalog.search(query, offset=offset, limit=limit)
        except CatalogUnavailable:
            return _error(503, "the catalog is unavailable")
        body: SearchReply = {
            "items": [media_to_wire(m) for m in page.items],
            "total": page.total,
            "offset": page.offset,
        }
        return JSONResponse(body)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if on_shutdown is not None:
                await on_shutdown()

    return Starlette(
        routes=[
            Route("/media", media, methods=["GET"]),
            Route("/search", search, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
