"""An HTTP request's body and parameters before strawberry reads them.

A request that says one thing twice is refused (:func:`refuse_repeated_parts`);
a large body is decoded, and its document parsed, in a worker thread
(:class:`BodiesDecodedAhead`), so the event loop keeps its turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cross_web import HTTPException
from graphql import DocumentNode, GraphQLError
from starlette.requests import Request

from chorus.graphql.guards.documents import DocumentCache, parse_ahead, parse_options
from chorus.graphql.guards.nesting import MAX_JSON_DEPTH, decode_json

OFF_LOOP_BYTES = 2048
"""Bodies larger than this are decoded, and their document parsed, in a worker thread.

The document waits in :class:`~chorus.graphql.guards.documents.DocumentCache` for its request."""

DECODED_KEPT = 16
"""Large bodies whose decoding is kept for the request that sent them (oldest dropped)."""

_PREPARING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chorus-prepare")
"""One thread: several would each take the GIL in turn, and the loop would wait behind all."""

GET_PARAMETERS = ("query", "operationName", "variables", "extensions")


def refuse_repeated_parts(request: Request) -> None:
    """Refuse a request that says one thing twice: two ``Authorization`` headers, or a GET
    with a parameter given twice.

    Which one counts is not agreed between proxies, frameworks and servers (the
    first, the last, both joined), so a proxy could check one token or document
    and Chorus run another: refused, as duplicate JSON keys are.

    Raises:
        HTTPException: 400.
    """
    if len(request.headers.getlist("authorization")) > 1:
        raise HTTPException(400, "send one Authorization header")
    if request.method == "GET":
        for name in GET_PARAMETERS:
            if len(request.query_params.getlist(name)) > 1:
                raise HTTPException(400, f"send the '{name}' parameter once")


def _prepare(body: bytes, max_tokens: int) -> tuple[object, DocumentNode | GraphQLError | None]:
    """``body`` decoded (or the error decoding raised), and its document parsed (or the error).

    Runs in a worker thread: it touches nothing shared.
    """
    try:
        decoded: object = decode_json(body, MAX_JSON_DEPTH)
    except (ValueError, RecursionError) as error:
        return error, None
    if isinstance(decoded, dict) and isinstance(decoded.get("query"), str):
        return decoded, parse_ahead(decoded["query"], max_tokens)
    return decoded, None


class BodiesDecodedAhead:
    """Large bodies decoded in a worker thread, each kept for the request that sent it.

    Args:
        documents: where a parsed document waits for its request.
        max_tokens: the token limit documents are parsed under.
    """

    def __init__(self, documents: DocumentCache, max_tokens: int) -> None:
        self._documents = documents
        self._max_tokens = max_tokens
        self._decoded: dict[bytes, object] = {}

    async def prepare(self, body: bytes) -> GraphQLError | None:
        """Decode and parse ``body`` off the loop when it is large; its parse error, if any."""
        if len(body) <= OFF_LOOP_BYTES:
            return None
        # Decoding and parsing are pure Python: a big body's would hold the
        # event loop (and /healthz) for tens of ms; in a thread the loop
        # keeps its turns. Both results are kept for the request to use.
        loop = asyncio.get_running_loop()
        decoded, document = await loop.run_in_executor(_PREPARING, _prepare, body, self._max_tokens)
        # On the loop: neither the memo nor the document cache is shared with threads.
        self._decoded[body] = decoded
        while len(self._decoded) > DECODED_KEPT:
            self._decoded.pop(next(iter(self._decoded)))
        if isinstance(document, GraphQLError):
            # Strawberry would parse it again on the loop to make this very
            # answer: a few clients sending 10 KB over the token limit held
            # /healthz for seconds.
            return document
        if document is not None and isinstance(decoded, dict):
            query = decoded["query"]
            self._documents.hold(query, parse_options(self._max_tokens), document)
        return None

    def decode(self, data: str | bytes) -> object:
        """A body or frame as JSON, nested at most :data:`MAX_JSON_DEPTH` deep.

        A large body decoded ahead (:meth:`prepare`) is not decoded again.

        Raises:
            JSONTooDeep: nested deeper (a :class:`json.JSONDecodeError`).
            JSONNumberTooLong: an integer too long to convert (a
                :class:`json.JSONDecodeError` too).
        """
        if isinstance(data, bytes) and len(data) > OFF_LOOP_BYTES and data in self._decoded:
            # Taken, not copied: it was decoded for this one request (a copy
            # of a large body held the loop as long as decoding it would).
            decoded = self._decoded.pop(data)
            if isinstance(decoded, Exception):
                raise decoded
            return decoded
        return decode_json(data, MAX_JSON_DEPTH)


def decode_query_params(
    params: Mapping[str, Any], parse_json: Callable[[str], object]
) -> dict[str, Any]:
    """A GET's parameters, ``variables`` and ``extensions`` decoded by ``parse_json``.

    Raises:
        HTTPException: 400 naming the parameter that is not JSON (strawberry
            says "Unable to parse request body as JSON" of a GET's URL).
    """
    decoded: dict[str, Any] = dict(params)
    for name in ("variables", "extensions"):
        text = decoded.get(name)
        if not text:
            continue
        if text.strip(" \t\n\r") == "null":  # as a POST body's "variables": null
            decoded[name] = None
            continue
        try:
            decoded[name] = parse_json(text)
        except HTTPException as error:
            reason = error.reason.removeprefix("the request body ")
            if reason == "Unable to parse request body as JSON":
                reason = "is not JSON"
            raise HTTPException(400, f"the {name} query parameter {reason}") from None
    return decoded


__all__ = [
    "DECODED_KEPT",
    "GET_PARAMETERS",
    "OFF_LOOP_BYTES",
    "BodiesDecodedAhead",
    "decode_query_params",
    "refuse_repeated_parts",
]
