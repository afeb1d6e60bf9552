"""HttpCatalog against the catalog service under a real uvicorn server.

The service (``create_catalog_app(EmbeddedCatalog())``) runs in a background
thread on a free port; a second tiny app misbehaves on purpose (slow, 500,
garbage). Each test starts and stops what it uses.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from chorus.catalog import (
    CatalogUnavailable,
    EmbeddedCatalog,
    HttpCatalog,
    Media,
    MediaPage,
    create_catalog_app,
)
from tests.deadlines import patience

SECRET = "psycopg.OperationalError: password authentication failed for user admin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(app: ASGIApp) -> Iterator[str]:
    """Run ``app`` under uvicorn in a thread; yields its base URL, stops it after."""
    port = _free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, lifespan="off", ws="none", log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + patience(10)
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True  # don't wait for the slow handler
        thread.join(timeout=10)
        assert not thread.is_alive(), "the test server did not stop"


class CountingCatalog:
    """The embedded catalogue, recording each get_many batch the service receives."""

    def __init__(self) -> None:
        self.inner = EmbeddedCatalog()
        self.batches: list[int] = []

    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        self.batches.append(len(media_ids))
        return await self.inner.get_many(media_ids)

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        return await self.inner.search(query, offset=offset, limit=limit)

    async def aclose(self) -> None:
        pass


@pytest.fixture
def counting() -> CountingCatalog:
    return CountingCatalog()


@pytest.fixture
def service(counting: CountingCatalog) -> Iterator[str]:
    with serve(create_catalog_app(counting)) as url:
        yield url


async def _slow(request: Request) -> Response:
    await asyncio.sleep(5)
    return JSONResponse({"media": [], "items": [], "total": 0, "offset": 0})


async def _error(request: Request) -> Response:
    return PlainTextResponse(SECRET, status_code=500)


async def _garbage(request: Request) -> Response:
    return Response(f'{{"media": [{SECRET}', media_type="application/json")


def _routes(endpoint: Callable[[Request], Awaitable[Response]]) -> list[BaseRoute]:
    return [Route("/media", endpoint), Route("/search", endpoint)]


FAULTY = Starlette(
    routes=[
        Mount("/slow", routes=_routes(_slow)),
        Mount("/error", routes=_routes(_error)),
        Mount("/garbage", routes=_routes(_garbage)),
    ]
)


@pytest.fixture(scope="module")
def faulty() -> Iterator[str]:
    with serve(FAULTY) as url:
        yield url


async def test_250_ids_go_in_batches_of_at_most_100(
    service: str, counting: CountingCatalog
) -> None:
    catalog = HttpCatalog(service)
    ids = [f"chinook:track:{i}" for i in range(1, 251)]
    try:
        found = await catalog.get_many([*ids, "chinook:track:9999", "spotify:track:none"])
    finally:
        await catalog.aclose()
    assert sorted(counting.batches) == [52, 100, 100]
    assert set(found) == set(ids)
    assert found == await EmbeddedCatalog().get_many(ids)


async def test_search_pages_through_every_match(service: str) -> None:
    catalog = HttpCatalog(service)
    expected = await EmbeddedCatalog().search("love", offset=0, limit=1_000)
    seen: list[Media] = []
    offset = 0
    try:
        while True:
            page = await catalog.search("love", offset=offset, limit=10)
            assert page.total == expected.total
            assert page.offset == offset
            seen.extend(page.items)
            offset += len(page.items)
            if not page.has_next:
                break
    finally:
        await catalog.aclose()
    assert seen == list(expected.items)
    assert len({m.id for m in seen}) == len(seen) > 10


async def test_a_stopped_server_is_catalog_unavailable(counting: CountingCatalog) -> None:
    with serve(create_catalog_app(counting)) as url:
        catalog = HttpCatalog(url, timeout_s=1.0)
        assert await catalog.get_many(["chinook:track:1"])
    started = time.monotonic()
    with pytest.raises(CatalogUnavailable, match="could not be reached"):
        await catalog.get_many(["chinook:track:1"])
    with pytest.raises(CatalogUnavailable):
        await catalog.search("a", offset=0, limit=5)
    assert time.monotonic() - started < 1.0
    await catalog.aclose()


@pytest.mark.parametrize("call", ["get_many", "search"])
async def test_a_slow_catalog_times_out_quickly(faulty: str, call: str) -> None:
    catalog = HttpCatalog(f"{faulty}/slow", timeout_s=0.2)
    operation = (
        catalog.get_many(["a", "b"])
        if call == "get_many"
        else catalog.search("a", offset=0, limit=5)
    )
    started = time.monotonic()
    with pytest.raises(CatalogUnavailable, match=r"did not answer within 0\.2 s"):
        await operation
    assert time.monotonic() - started < 1.0
    await catalog.aclose()


async def test_a_slow_batch_fails_the_whole_call_in_time(faulty: str) -> None:
    catalog = HttpCatalog(f"{faulty}/slow", timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(CatalogUnavailable):
        await catalog.get_many([f"m{i}" for i in range(450)])  # 5 concurrent batches
    assert time.monotonic() - started < 1.0
    await catalog.aclose()


@pytest.mark.parametrize("path", ["error", "garbage"])
@pytest.mark.parametrize("call", ["get_many", "search"])
async def test_500_and_malformed_json_are_catalog_unavailable(
    faulty: str, path: str, call: str
) -> None:
    catalog = HttpCatalog(f"{faulty}/{path}")
    operation = (
        catalog.get_many(["a"]) if call == "get_many" else catalog.search("a", offset=0, limit=5)
    )
    with pytest.raises(CatalogUnavailable) as raised:
        await operation
    await catalog.aclose()
    assert SECRET not in str(raised.value)
    assert "password" not in str(raised.value)
