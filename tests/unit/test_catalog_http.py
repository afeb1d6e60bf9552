"""HttpCatalog and the catalog service in process (httpx transports, no sockets).

The same client runs against a real uvicorn server in
``tests/integration/test_catalog_http.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest

from chorus.catalog import (
    CatalogUnavailable,
    EmbeddedCatalog,
    HttpCatalog,
    Media,
    MediaPage,
    create_catalog_app,
)

SECRET = "Traceback: password=hunter2 at db.internal:5432"
"""A server error text that must never reach the caller."""


def _media(media_id: str, **overrides: Any) -> dict[str, Any]:
    wire = {
        "id": media_id,
        "title": f"Title {media_id}",
        "artists": ["Artist"],
        "album": None,
        "duration_ms": 1000,
        "available": True,
    }
    return {**wire, **overrides}


def mock(handler: Callable[[httpx.Request], httpx.Response]) -> HttpCatalog:
    return HttpCatalog("http://catalog.test", transport=httpx.MockTransport(handler))


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_catalog_app(EmbeddedCatalog())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://catalog.test"
    ) as c:
        yield c


# --- the client --------------------------------------------------------------


async def test_get_many_batches_at_most_100_ids_per_request() -> None:
    batches: list[list[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/media"
        ids = request.url.params.get_list("id")
        batches.append(ids)
        return httpx.Response(200, json={"media": [_media(i) for i in ids if i != "m-7"]})

    catalog = mock(handler)
    wanted = [f"m-{i}" for i in range(250)]
    found = await catalog.get_many([*wanted, "m-3"])  # a repeat is asked once
    await catalog.aclose()
    assert sorted(len(b) for b in batches) == [50, 100, 100]
    assert sorted(i for b in batches for i in b) == sorted(wanted)
    assert set(found) == set(wanted) - {"m-7"}
    assert found["m-3"] == Media("m-3", "Title m-3", ("Artist",), None, 1000, True)


async def test_long_ids_make_smaller_batches() -> None:
    sizes: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sizes.append(len(request.url.params.get_list("id")))
        assert len(str(request.url)) < 8_000
        return httpx.Response(200, json={"media": []})

    catalog = mock(handler)
    await catalog.get_many([f"{i:03d}" + "é" * 120 for i in range(100)])
    await catalog.aclose()
    assert sum(sizes) == 100
    assert len(sizes) > 1


async def test_get_many_of_nothing_sends_nothing() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    assert await mock(handler).get_many([]) == {}
    assert await mock(handler).get_many(["", "x" * 129]) == {}


async def test_media_the_client_did_not_ask_for_are_dropped() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"media": [_media("a"), _media("intruder")]})

    assert set(await mock(handler).get_many(["a"])) == {"a"}


async def test_search_sends_query_offset_and_limit() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/prefix/search"
        assert dict(request.url.params) == {"q": "50% off & more", "offset": "10", "limit": "5"}
        return httpx.Response(200, json={"items": [_media("x")], "total": 11, "offset": 10})

    catalog = HttpCatalog("http://catalog.test/prefix", transport=httpx.MockTransport(handler))
    page = await catalog.search("50% off & more", offset=10, limit=5)
    assert page == MediaPage((Media("x", "Title x", ("Artist",), None, 1000),), 11, 10)
    assert not page.has_next


BAD_REPLIES: list[tuple[str, httpx.Response]] = [
    ("500", httpx.Response(500, text=SECRET)),
    ("503 json", httpx.Response(503, json={"error": SECRET})),
    ("404", httpx.Response(404, text=SECRET)),
    ("redirect", httpx.Response(302, headers={"location": "http://elsewhere/"})),
    ("not json", httpx.Response(200, text=f"<html>{SECRET}</html>")),
    ("not utf-8", httpx.Response(200, content=b"\xff\xfe{")),
    ("a list", httpx.Response(200, json=[])),
    ("missing key", httpx.Response(200, json={"items": [], "offset": 0})),
    ("title number", httpx.Response(200, json={"media": [_media("a", title=3)]})),
    ("artists string", httpx.Response(200, json={"media": [_media("a", artists="Abba")]})),
    ("duration bool", httpx.Response(200, json={"media": [_media("a", duration_ms=True)]})),
    ("negative total", httpx.Response(200, json={"items": [], "total": -1, "offset": 0})),
    ("item not object", httpx.Response(200, json={"items": ["a"], "total": 1, "offset": 0})),
]


@pytest.mark.parametrize(("name", "reply"), BAD_REPLIES, ids=[n for n, _ in BAD_REPLIES])
@pytest.mark.parametrize("call", ["get_many", "search"])
async def test_a_bad_reply_is_catalog_unavailable(
    name: str, reply: httpx.Response, call: str
) -> None:
    catalog = mock(lambda _request: reply)
    operation = (
        catalog.get_many(["a"]) if call == "get_many" else catalog.search("a", offset=0, limit=9)
    )
    with pytest.raises(CatalogUnavailable) as raised:
        await operation
    assert SECRET not in str(raised.value)
    assert "password" not in repr(raised.value)


async def test_a_transport_error_is_catalog_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(CatalogUnavailable, match="could not be reached"):
        await mock(handler).get_many(["a"])


async def test_one_failed_batch_fails_the_call() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        ids = request.url.params.get_list("id")
        if "m-150" in ids:
            return httpx.Response(500)
        return httpx.Response(200, json={"media": [_media(i) for i in ids]})

    with pytest.raises(CatalogUnavailable, match="HTTP 500"):
        await mock(handler).get_many([f"m-{i}" for i in range(300)])


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        HttpCatalog("http://catalog.test", timeout_s=0)


# --- the service -------------------------------------------------------------


async def test_client_and_service_agree(client: httpx.AsyncClient) -> None:
    embedded = EmbeddedCatalog()
    remote = HttpCatalog(
        "http://catalog.test",
        transport=httpx.ASGITransport(app=create_catalog_app(embedded)),
    )
    ids = ["chinook:track:1", "nope", "chinook:track:2"]
    assert await remote.get_many(ids) == await embedded.get_many(ids)
    assert await remote.search("Love", offset=3, limit=7) == await embedded.search(
        "Love", offset=3, limit=7
    )
    await remote.aclose()


async def test_media_answers_in_the_order_asked(client: httpx.AsyncClient) -> None:
    reply = await client.get(
        "/media", params=[("id", "chinook:track:9"), ("id", "x"), ("id", "chinook:track:3")]
    )
    assert reply.status_code == 200
    assert [m["id"] for m in reply.json()["media"]] == ["chinook:track:9", "chinook:track:3"]


async def test_search_defaults(client: httpx.AsyncClient) -> None:
    reply = await client.get("/search", params={"q": ""})
    body = reply.json()
    assert reply.status_code == 200
    assert (len(body["items"]), body["total"], body["offset"]) == (50, 3_503, 0)


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("/search", {"offset": "0"}, "q is required"),
        ("/search", {"q": "a", "limit": "0"}, "limit"),
        ("/search", {"q": "a", "limit": "101"}, "limit"),
        ("/search", {"q": "a", "limit": "ten"}, "limit"),
        ("/search", {"q": "a", "limit": "-5"}, "limit"),
        ("/search", {"q": "a", "offset": "-1"}, "offset"),
        ("/search", {"q": "a", "offset": "1.5"}, "offset"),
        ("/search", {"q": "x" * 201}, "q must be"),
        ("/media", [("id", f"m{i}") for i in range(101)], "at most 100 ids"),
        ("/media", [("id", "")], "every id"),
        ("/media", [("id", "x" * 129)], "every id"),
    ],
)
async def test_bad_parameters_are_400_with_a_json_error(
    client: httpx.AsyncClient, path: str, params: Any, message: str
) -> None:
    reply = await client.get(path, params=params)
    assert reply.status_code == 400
    assert message in reply.json()["error"]


async def test_limit_100_and_100_ids_are_allowed(client: httpx.AsyncClient) -> None:
    search = await client.get("/search", params={"q": "", "limit": "100", "offset": "3500"})
    assert search.status_code == 200
    assert len(search.json()["items"]) == 3
    ids = tuple(("id", f"chinook:track:{i}") for i in range(1, 101))
    media = await client.get("/media", params=ids)
    assert len(media.json()["media"]) == 100


class _Down:
    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        raise CatalogUnavailable("database down")

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        raise CatalogUnavailable("database down")

    async def aclose(self) -> None:
        pass


async def test_an_unavailable_backing_catalog_is_503() -> None:
    transport = httpx.ASGITransport(app=create_catalog_app(_Down()))
    async with httpx.AsyncClient(transport=transport, base_url="http://catalog.test") as c:
        assert (await c.get("/media", params={"id": "a"})).status_code == 503
        assert (await c.get("/search", params={"q": "a"})).status_code == 503
    remote = HttpCatalog("http://catalog.test", transport=transport)
    with pytest.raises(CatalogUnavailable, match="HTTP 503"):
        await remote.search("a", offset=0, limit=1)


async def test_only_get_is_served(client: httpx.AsyncClient) -> None:
    assert (await client.post("/media")).status_code == 405
    assert (await client.get("/")).status_code == 404
