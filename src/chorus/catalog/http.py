"""A client for the catalog running as its own service (:mod:`chorus.catalog.service`).

Every failure — connection refused, timeout, a status other than 2xx, a body
that is not the JSON agreed in :mod:`chorus.catalog.replies` — becomes
:class:`~chorus.catalog.protocol.CatalogUnavailable` with a message of ours;
the server's own error text is never passed on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from chorus.catalog.matching import check_page
from chorus.catalog.protocol import CatalogUnavailable, Media, MediaPage
from chorus.catalog.replies import media_from_wire, page_from_wire
from chorus.domain.limits import MAX_ID_LENGTH

MAX_IDS_PER_REQUEST = 100
"""The service refuses more ids in one ``GET /media``."""
MAX_QUERY_BYTES = 6_000
"""Keeps one request line well under common server limits (h11: 16 KiB)."""

T = TypeVar("T")


def _chunks(media_ids: Sequence[str]) -> Iterator[list[str]]:
    """Ids in request-sized chunks: ≤ 100 ids and ≤ ~6 KB of query string each."""
    chunk: list[str] = []
    size = 0
    for media_id in media_ids:
        cost = len(quote(media_id, safe="")) + 4  # "id=" and "&"
        if chunk and (len(chunk) == MAX_IDS_PER_REQUEST or size + cost > MAX_QUERY_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(media_id)
        size += cost
    if chunk:
        yield chunk


class HttpCatalog:
    """:class:`~chorus.catalog.protocol.Catalog` over HTTP.

    Args:
        base_url: where the service answers, e.g. ``"http://catalog:8001"``
            (a path prefix is kept: ``"http://gw/catalog"`` → ``/catalog/media``).
        timeout_s: seconds one call may take in all, batches included; past
            it the call raises :class:`CatalogUnavailable`.
        transport: an httpx transport to use instead of the network (tests,
            ``httpx.ASGITransport``).

    One connection pool serves every call; close it with :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 2.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout_s,
            transport=transport,
            headers={"accept": "application/json"},
        )

    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        """Metadata of ``media_ids``, fetched in batches of ≤ 100 ids, concurrently.

        Returns:
            ``{media id: Media}``; unknown ids are absent, and so is anything
            the service sent that was not asked for.

        Raises:
            CatalogUnavailable: any batch failed, or the call took longer
                than ``timeout_s``.
        """
        # An id the service would refuse cannot name any media: absent, not an error.
        wanted = [i for i in dict.fromkeys(media_ids) if 1 <= len(i) <= MAX_ID_LENGTH]
        if not wanted:
            return {}
        replies = await self._within_timeout(
            [self._get_json("media", [("id", i) for i in chunk]) for chunk in _chunks(wanted)]
        )
        asked = set(wanted)
        found: dict[str, Media] = {}
        for reply in replies:
            items = reply.get("media") if isinstance(reply, dict) else None
            if not isinstance(items, list):
                raise CatalogUnavailable("the catalog sent a malformed reply")
            for item in items:
                media = _parse(media_from_wire, item)
                if media.id in asked:
                    found[media.id] = media
        return found

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        """One page of ``GET /search`` (the service allows ``limit`` up to 100).

        Raises:
            ValueError: ``offset < 0`` or ``limit < 1``.
            CatalogUnavailable: the service failed or took longer than ``timeout_s``.
        """
        check_page(offset, limit)
        params = [("q", query), ("offset", str(offset)), ("limit", str(limit))]
        (reply,) = await self._within_timeout([self._get_json("search", params)])
        return _parse(page_from_wire, reply)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def _within_timeout(self, calls: list[Coroutine[Any, Any, T]]) -> list[T]:
        """Run ``calls`` concurrently; the first failure cancels the others."""
        try:
            async with asyncio.timeout(self._timeout_s):
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(c) for c in calls]
        except TimeoutError:
            raise CatalogUnavailable(
                f"the catalog did not answer within {self._timeout_s:g} s"
            ) from None
        except ExceptionGroup as failures:
            first = failures.exceptions[0]
            if isinstance(first, CatalogUnavailable):
                raise first from first.__cause__
            raise
        return [t.result() for t in tasks]

    async def _get_json(self, path: str, params: Sequence[tuple[str, str]]) -> Any:
        try:
            response = await self._client.get(path, params=tuple(params))
        except httpx.TimeoutException as exc:
            raise CatalogUnavailable(
                f"the catalog did not answer within {self._timeout_s:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            # The cause (ours, e.g. "connection refused") stays for the logs.
            raise CatalogUnavailable("the catalog could not be reached") from exc
        if not response.is_success:
            raise CatalogUnavailable(f"the catalog answered HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError as exc:
            raise CatalogUnavailable("the catalog sent a malformed reply") from exc


def _parse(parse: Callable[[Any], T], value: Any) -> T:
    try:
        return parse(value)
    except ValueError as exc:
        raise CatalogUnavailable("the catalog sent a malformed reply") from exc
