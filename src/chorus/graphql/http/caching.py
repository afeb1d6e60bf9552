"""HTTP caching of query answers: the operation asked, ``ETag``, ``304``, ``Cache-Control``.

:class:`~chorus.graphql.endpoint.ChorusGraphQL` reads each HTTP request's
operation here (:func:`read_operation`: POST JSON or GET query parameters,
with persisted documents resolved) before strawberry does, so that a cached
answer (:mod:`chorus.resolvers.cached_answers`) is served without executing.

Every query answer carries:

* ``ETag``: a digest of the body (the cache entry's, on a hit); a request
  whose ``If-None-Match`` names it gets ``304 Not Modified`` with no body —
  without executing when the answer is cached;
* ``Cache-Control: private, no-cache``: every answer needs a token, so no
  shared cache (CDN) may keep it, and a browser revalidates each time
  (cheap: a ``304``);
* ``Vary: Authorization, Accept``: the answer depends on who asks, and its
  media type on ``Accept`` (:mod:`chorus.graphql.http.negotiation`).

Mutations (and anything else that is not a query answer) carry
``Cache-Control: no-store``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from chorus.graphql.guards.nesting import decode_json
from chorus.graphql.guards.persisted import PersistedDocuments

QUERY_CACHE_CONTROL = "private, no-cache"
NO_STORE = "no-store"
VARY = "Authorization, Accept"


@dataclass(frozen=True, slots=True)
class HttpOperation:
    """One GraphQL operation as an HTTP request carries it.

    Attributes:
        document: the document's text (persisted documents resolved).
        document_sha256: its SHA-256 when the persisted-query protocol gave
            or computed it; ``None``: not computed yet.
        operation_name: ``operationName``, if any.
        variables: ``variables``, decoded.
    """

    document: str
    document_sha256: str | None
    operation_name: str | None
    variables: dict[str, Any] | None


async def read_operation(
    request: Request,
    decode: Callable[[bytes], object],
    persisted: PersistedDocuments,
    *,
    viewer: bool = False,
) -> HttpOperation | None:
    """The single operation of a GraphQL request, or ``None`` for strawberry to handle.

    ``None`` (strawberry answers, errors included) for anything but a POST
    of a JSON object or a GET with ``query`` or ``extensions`` parameters
    whose parts have the right types (``variables`` and ``extensions`` objects,
    ``operationName`` a string).

    Args:
        decode: the view's bounded JSON decoder of bodies.
        viewer: the request carries a valid token: a document may be looked
            up by its hash, and one sent with its hash is registered.

    Raises:
        PersistedQueryError: a persisted document that cannot run.
        ViewerNeeded: a document asked for by hash without a ``viewer``.
    """
    data: object
    if request.method == "GET":
        data = get_parameters(request.query_params)
        if data is None:
            return None
    elif request.method == "POST" and "application/json" in request.headers.get("content-type", ""):
        try:
            data = decode(await request.body())
        except ValueError:  # not JSON, not UTF-8, too deep: strawberry's errors say so
            return None
    else:
        return None
    if not isinstance(data, dict):
        return None
    variables, name = data.get("variables"), data.get("operationName")
    if not isinstance(variables, dict | None) or not isinstance(name, str | None):
        return None
    if not isinstance(data.get("extensions"), dict | None):
        return None  # strawberry refuses it (400): never answered from the cache
    document, sha = persisted.resolve(
        data.get("query"), data.get("extensions"), viewer=viewer, register=viewer
    )
    if not isinstance(document, str):
        return None
    return HttpOperation(document, sha, name, variables)


def get_parameters(params: Mapping[str, str]) -> dict[str, object] | None:
    """A GET's ``query``, ``operationName``, ``variables`` and ``extensions`` as the body a
    POST would carry (``variables`` and ``extensions`` decoded from JSON); ``None`` when it
    has neither ``query`` nor ``extensions``, or a JSON parameter does not decode."""
    if "query" not in params and "extensions" not in params:
        return None
    try:
        return {
            "query": params.get("query"),
            "operationName": params.get("operationName"),
            "variables": _json_param(params.get("variables")),
            "extensions": _json_param(params.get("extensions")),
        }
    except ValueError:
        return None


def _json_param(value: str | None) -> object:
    # The bounded, standard decoder of bodies: a GET's variables are no less hostile.
    return None if value is None else decode_json(value)


def not_modified(request: Request, etag: str) -> bool:
    """Whether the request's ``If-None-Match`` names ``etag`` (or is ``*``)."""
    return names_etag(request.headers.get("if-none-match"), etag)


def names_etag(header: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` value ``header`` names ``etag`` (or is ``*``)."""
    if header is None:
        return False
    for candidate in header.split(","):
        tag = candidate.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


def query_headers(etag: str) -> dict[str, str]:
    """The caching headers of a query answer whose body has ``etag``."""
    return {"ETag": etag, "Cache-Control": QUERY_CACHE_CONTROL, "Vary": VARY}


__all__ = [
    "NO_STORE",
    "QUERY_CACHE_CONTROL",
    "VARY",
    "HttpOperation",
    "get_parameters",
    "names_etag",
    "not_modified",
    "query_headers",
    "read_operation",
]
