"""GraphQL over HTTP: which media type an answer is sent as, and its status code.

The GraphQL-over-HTTP specification (docs/api.md, "GraphQL over HTTP")
defines two response media types:

* ``application/json`` — the legacy one: every well-formed GraphQL response
  is HTTP 200, its errors in the body. Chorus answers it when the client asks
  for it, for ``*/*`` or ``application/*``, and when there is no ``Accept``.
* ``application/graphql-response+json`` — answered when the client ranks it
  at least as high as ``application/json``. A *request error* (the document
  does not parse or validate, a variable does not coerce, the request is
  malformed: codes :data:`REQUEST_ERRORS`) is then HTTP 400 with no ``data``
  entry; an answer whose errors are all ``UNAUTHENTICATED`` and whose
  ``data`` is null is HTTP 401 with ``WWW-Authenticate: Bearer`` (the
  specification only recommends 2xx there; identity providers' clients
  expect 401). Field errors beside data stay 200.

An ``Accept`` that names neither type nor a wildcard gets HTTP 406.
"""

from __future__ import annotations

import json

from starlette.responses import Response

JSON = "application/json"
GRAPHQL_RESPONSE = "application/graphql-response+json"

REQUEST_ERRORS = frozenset({"GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED", "BAD_REQUEST"})
"""Error codes of a request that was not executed: HTTP 400 under :data:`GRAPHQL_RESPONSE`."""

_MAX_ACCEPT = 1024
"""Characters of ``Accept`` read; a longer header is read as ``application/json``."""


def negotiate(accept: str | None) -> str | None:
    """The media type to answer ``accept`` with: :data:`JSON`, :data:`GRAPHQL_RESPONSE` or ``None``.

    ``None``: nothing acceptable (HTTP 406). Quality values are honoured; a
    tie goes to :data:`GRAPHQL_RESPONSE`, the specification's preferred type.
    A malformed quality counts as 1.
    """
    if accept is None or not accept.strip() or len(accept) > _MAX_ACCEPT:
        return JSON
    best: dict[str, float] = {}
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    quality = 1.0
        media = media.lower()
        if media in {"*/*", "application/*"}:
            best[JSON] = max(best.get(JSON, 0.0), quality)  # a wildcard alone is legacy JSON
        elif media in {JSON, GRAPHQL_RESPONSE}:
            best[media] = max(best.get(media, 0.0), quality)
    json_q, graphql_q = best.get(JSON, 0.0), best.get(GRAPHQL_RESPONSE, 0.0)
    if graphql_q > 0 and graphql_q >= json_q:
        return GRAPHQL_RESPONSE
    return JSON if json_q > 0 else None


def as_graphql_response(response: Response) -> Response:
    """``response`` (a JSON GraphQL answer) as :data:`GRAPHQL_RESPONSE`, with the spec's status."""
    if response.status_code == 304 or not response.body:
        return response
    body = bytes(response.body)
    status = response.status_code
    headers = {
        k: v for k, v in response.headers.items() if k not in {"content-length", "content-type"}
    }
    if status == 200 and b'"errors"' in body:
        answer = json.loads(body)
        errors = answer.get("errors") if isinstance(answer, dict) else None
        if isinstance(errors, list) and errors and answer.get("data") is None:
            codes = {(e.get("extensions") or {}).get("code") for e in errors}
            if codes <= REQUEST_ERRORS:
                status = 400
                answer.pop("data", None)
                body = json.dumps(answer, separators=(",", ":")).encode()
            elif codes == {"UNAUTHENTICATED"}:
                status = 401
                headers["WWW-Authenticate"] = "Bearer"
    return Response(body, status_code=status, headers=headers, media_type=GRAPHQL_RESPONSE)
