"""GraphQL over HTTP: which media type an answer is sent as, and its status code.

The GraphQL-over-HTTP specification (docs/api.md, "GraphQL over HTTP")
defines two response media types:

* ``application/json`` — the legacy one: every well-formed GraphQL response
  is HTTP 200, its errors in the body. Chorus answers it when the client asks
  for it, for ``*/*`` or ``application/*``, and when there is no ``Accept``.
* ``application/graphql-response+json`` — answered when the client ranks it
  at least as high as ``application/json``. The status follows whether the
  operation was executed, which the body already says: a *request error*
  (:mod:`chorus.graphql.execution.result_shape`: the document does not parse
  or validate, a variable does not coerce, no viewer before validation …)
  has no ``data`` entry under either media type, and is answered 4xx/5xx
  (:func:`request_error_status`: 400, or the one status its codes name). An
  executed answer has ``data`` and is 200, even when a field error (one
  raised while coercing an argument inside execution included) nulled it —
  except one whose errors are all ``UNAUTHENTICATED`` and whose ``data`` is
  null: HTTP 401 with ``WWW-Authenticate: Bearer`` (the specification only
  recommends 2xx there; identity providers' clients expect 401).

An ``Accept`` that names neither type nor a wildcard gets HTTP 406.
"""

from __future__ import annotations

import json
import math

from starlette.responses import Response

JSON = "application/json"
GRAPHQL_RESPONSE = "application/graphql-response+json"

_REQUEST_ERROR_STATUSES: dict[object, int] = {
    "UNAUTHENTICATED": 401,
    "RATE_LIMITED": 429,
    "INTERNAL_SERVER_ERROR": 500,
    "SERVICE_UNAVAILABLE": 503,
}
"""Codes whose request errors, alone in an answer, have a status of their own (else 400)."""

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
    found = _NEGOTIATED.get(accept, _UNKNOWN)
    if found is _UNKNOWN:
        # Clients send one or two Accept values over and over: each is read once.
        if len(_NEGOTIATED) >= _NEGOTIATED_KEPT:
            _NEGOTIATED.clear()
        found = _NEGOTIATED[accept] = _negotiate(accept)
    return found  # type: ignore[return-value]


_NEGOTIATED: dict[str, str | None] = {}
_NEGOTIATED_KEPT = 256
"""Distinct ``Accept`` values whose answer is kept (all forgotten when more come)."""
_UNKNOWN = object()


def _negotiate(accept: str) -> str | None:
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


def request_error_status(codes: set[object]) -> int:
    """The status of a request error (no ``data``) whose errors have ``codes``.

    One code of :data:`_REQUEST_ERROR_STATUSES` for every error: its status
    (401 ``UNAUTHENTICATED``, 429 ``RATE_LIMITED``, 500, 503); anything else,
    parse, validation and variable errors among them: 400. The
    GraphQL-over-HTTP specification requires 4xx or 5xx for an answer
    without ``data``.
    """
    statuses = {_REQUEST_ERROR_STATUSES.get(code, 400) for code in codes}
    return statuses.pop() if len(statuses) == 1 else 400


def retry_after_s(errors: list[object]) -> int | None:
    """HTTP's ``Retry-After`` (whole seconds, rounded up) of ``RATE_LIMITED`` errors: the
    longest ``extensions.retryAfterMs`` among them; ``None`` when none says one."""
    waits = [
        wait
        for e in errors
        if isinstance(e, dict)
        and isinstance(wait := (e.get("extensions") or {}).get("retryAfterMs"), int)
        and not isinstance(wait, bool)
    ]
    return math.ceil(max(waits) / 1000) if waits else None


def as_graphql_response(response: Response) -> Response:
    """``response`` (a JSON GraphQL answer) as :data:`GRAPHQL_RESPONSE`, with the spec's status.

    The body is sent as it is: a request error has no ``data`` entry under
    :data:`JSON` already. A 401 says ``WWW-Authenticate: Bearer``; a 429 says
    ``Retry-After`` (:func:`retry_after_s`) when its errors say when.
    """
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
        if isinstance(errors, list) and errors:
            codes = {
                (e.get("extensions") or {}).get("code") if isinstance(e, dict) else None
                for e in errors
            }
            if "data" not in answer:
                status = request_error_status(codes)
            elif answer["data"] is None and codes == {"UNAUTHENTICATED"}:
                status = 401
            if status == 401:
                headers["WWW-Authenticate"] = "Bearer"
            elif status == 429:
                wait = retry_after_s(errors)
                if wait is not None:
                    headers["Retry-After"] = str(wait)
    return Response(body, status_code=status, headers=headers, media_type=GRAPHQL_RESPONSE)
