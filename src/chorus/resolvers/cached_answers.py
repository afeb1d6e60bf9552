"""The response-cache fast path: when a whole answer is served from memory instead of executed.

:mod:`chorus.caches.responses` keeps answers; this module alone decides
when one may be served or kept. The plain path it shortcuts is the whole
GraphQL execution, and stays the reference (``tests/e2e/test_response_cache.py``
asks both on the same data, racing edits included). The rule:

1. Only a query of an authenticated viewer (a token verified before any
   lookup) is looked up, and only while no per-user query budget is on (a
   hit would have to charge it).
2. A hit is an entry under the *shared* key or under the viewer's own key
   (:func:`~chorus.caches.responses.response_key`) whose every playlist is
   still at the version it read, as the head registry
   (:mod:`chorus.caches.heads`) says, and whose media are fresh.
3. Misses of one key are computed once; the others wait and look again.
4. An answer is kept when it had no error and its :class:`~chorus.resolvers.reads.ReadSet`
   allows it: shared when it read only PUBLIC playlists and no
   viewer-dependent field, else the viewer's own. Every version it read is
   made known to the registry first (:meth:`~chorus.caches.heads.Heads.read_at`).

A membership change, a visibility change and a delete each move the
playlist's version, so no kept answer outlives anyone's access.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from chorus.caches.generation import Ticket
from chorus.caches.responses import (
    CachedAnswer,
    ResponseKey,
    canonical_variables,
    document_hash,
    etag_of,
    response_key,
)
from chorus.resolvers.context import RequestContext, Services


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    """What a query asks, as the cache sees it: its two keys.

    Attributes:
        shared_key: the key of an answer every authenticated viewer gets alike.
        viewer_key: the key of an answer only this viewer gets.
    """

    shared_key: ResponseKey
    viewer_key: ResponseKey

    @classmethod
    def of(
        cls,
        document_sha256: str,
        operation_name: str | None,
        variables: Mapping[str, Any] | None,
        viewer_id: str,
        *,
        canonical: str | None = None,
    ) -> AnswerRequest:
        """The keys of a query (:func:`~chorus.caches.responses.response_key`).

        Args:
            document_sha256: :func:`document_hash` of the document's text.
            operation_name: the requested operation, if named.
            variables: the request's variables, decoded.
            viewer_id: the verified token's user.
            canonical: the variables' canonical text, when known already.
        """
        if canonical is None:
            canonical = canonical_variables(variables)
        return cls(
            response_key(document_sha256, operation_name, variables, None, canonical=canonical),
            response_key(
                document_sha256, operation_name, variables, viewer_id, canonical=canonical
            ),
        )


def enabled(services: Services) -> bool:
    """Whether this process looks answers up at all."""
    return (
        services.responses is not None
        and services.heads is not None
        and not services.query_budget.limited
    )


async def lookup(services: Services, request: AnswerRequest) -> CachedAnswer | None:
    """The current cached answer to ``request``, or ``None`` (execute it)."""
    cache, heads = services.responses, services.heads
    if cache is None or heads is None:
        return None
    for key in (request.shared_key, request.viewer_key):
        entry = cache.get(key)
        if entry is not None:
            if await heads.current(entry.versions, entry.generation):
                return entry
            cache.drop(key)  # a version or the generation moved on: never current again
    return None


@asynccontextmanager
async def flight(services: Services, request: AnswerRequest) -> AsyncIterator[bool]:
    """Single flight per viewer key: ``True`` for the caller that computes."""
    cache = services.responses
    if cache is None:
        yield True
        return
    async with cache.flight(request.viewer_key) as leads:
        yield leads


def ticket(services: Services) -> Ticket:
    """The head registry's mark, taken before the answer is computed."""
    return services.heads.ticket() if services.heads is not None else Ticket()


async def remember(
    services: Services,
    request: AnswerRequest,
    ctx: RequestContext,
    body: bytes,
    *,
    taken: Ticket,
    operation: str,
) -> CachedAnswer | None:
    """Keep an error-free answer ``ctx`` computed, if its reads allow; the entry or ``None``.

    Args:
        body: the serialized response.
        taken: :func:`ticket` before the answer was computed.
        operation: the operation-name label of the metrics.
    """
    cache, heads, reads = services.responses, services.heads, ctx.reads.record
    if cache is None or heads is None or reads.uncacheable is not None:
        return None
    if not await heads.read_at(reads.versions, taken):
        return None
    key = request.shared_key if reads.shared else request.viewer_key
    return cache.put(
        key,
        body,
        etag=etag_of(body),
        versions=reads.versions,
        shared=reads.shared,
        media=reads.media,
        operation=operation,
        generation=taken.generation,
    )


__all__ = [
    "AnswerRequest",
    "Ticket",
    "canonical_variables",
    "document_hash",
    "enabled",
    "etag_of",
    "flight",
    "lookup",
    "remember",
    "ticket",
]
