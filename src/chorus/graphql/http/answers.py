"""Sending an answer: a kept one (or ``304``), or one run again until it read no race.

A kept answer is the response cache's (:mod:`chorus.resolvers.cached_answers`) or
an introspection answer (:mod:`chorus.graphql.http.introspection`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from chorus.graphql.http.caching import not_modified, query_headers
from chorus.metrics import RESPONSE_CACHE, RESPONSE_CACHE_SERVED_BYTES, child
from chorus.resolvers import cached_answers
from chorus.resolvers.cached_answers import Ticket
from chorus.resolvers.context import RequestContext, Services

RACED_READ_ATTEMPTS = 3
"""Runs of a query that read one playlist at two versions before its answer is sent as is.

Each part of such an answer still names its own version (``entries.version``)."""


def served(request: Request, body: bytes, etag: str, label: str | None = None) -> Response:
    """A kept answer ``body`` with its ``ETag``, or ``304`` when the client holds it.

    ``label``: the operation's metric label when the answer comes from the
    response cache (counted as a hit or ``not_modified``); ``None`` counts nothing.
    """
    headers = query_headers(etag)
    if not_modified(request, etag):
        if label is not None:
            child(RESPONSE_CACHE, label, "not_modified").inc()
        return Response(status_code=304, headers=headers)
    if label is not None:
        child(RESPONSE_CACHE, label, "hit").inc()
        RESPONSE_CACHE_SERVED_BYTES.inc(len(body))
    return Response(body, media_type="application/json", headers=headers)


async def run_unraced(
    run: Callable[[Request], Awaitable[Response]], request: Request, services: Services
) -> tuple[Response, RequestContext | None, Ticket]:
    """``run(request)``, again (up to :data:`RACED_READ_ATTEMPTS` runs) while its reads raced.

    Returns the last response, its request context (``None``: none was made)
    and the response cache's ticket taken just before that run.
    """
    taken = cached_answers.ticket(services)
    response = await run(request)
    context: RequestContext | None = getattr(request.state, "chorus_context", None)
    for _ in range(RACED_READ_ATTEMPTS - 1):
        if context is None or context.operation.type != "query" or not context.reads.record.raced:
            break
        # An edit committed between two reads of one playlist (its header,
        # then a page): the answer would show two versions as one. Reads
        # have no effects, so the query runs again, at no cost to the viewer.
        budget = services.query_budget
        viewer, spent = context.identity.viewer_id, context.reads.budget.query_cost
        if viewer is not None and spent:
            budget.refund(viewer, spent)
        taken = cached_answers.ticket(services)
        response = await run(request)
        context = getattr(request.state, "chorus_context", None)
    return response, context, taken


__all__ = ["RACED_READ_ATTEMPTS", "run_unraced", "served"]
