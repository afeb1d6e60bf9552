"""Chorus's JSON answers to HTTP requests refused outside execution."""

from __future__ import annotations

from cross_web import HTTPException
from graphql import GraphQLError
from starlette.requests import Request
from starlette.responses import Response
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types.graphql import OperationType

from chorus.auth import Unavailable
from chorus.graphql.guards.nesting import encode_json
from chorus.graphql.http import negotiation
from chorus.graphql.http.caching import NO_STORE
from chorus.metrics import count_error
from chorus.middleware import error_response
from chorus.resolvers.request_errors import no_viewer
from chorus.settings.server import ServeRole


def parse_refusal(error: GraphQLError) -> Response:
    """The answer to a document that does not parse, as strawberry and ``ErrorPolicy`` give it.

    HTTP 200, ``{"errors": [...]}`` with ``GRAPHQL_PARSE_FAILED`` (a request
    error: no ``data`` entry), never cached.
    """
    formatted = {**error.formatted, "extensions": {"code": "GRAPHQL_PARSE_FAILED"}}
    count_error("GRAPHQL_PARSE_FAILED")
    body = encode_json({"errors": [formatted]})
    return Response(body, media_type="application/json", headers={"Cache-Control": NO_STORE})


def refusal_without_viewer(reason: str | None) -> Response:
    """The answer to a request needing a viewer that has none, outside execution.

    Byte for byte what :class:`ViewerBeforeValidation` makes strawberry answer:
    HTTP 200, ``{"errors": [{"message", "extensions": {"code"}}]}`` (a request
    error: no ``data`` entry)
    (``UNAUTHENTICATED`` with the token's reason, ``SERVICE_UNAVAILABLE``
    when ``reason`` is an :class:`~chorus.auth.Unavailable`), never cached.
    """
    refused = no_viewer(reason, unavailable=isinstance(reason, Unavailable))
    error = {"message": refused.message, "extensions": {"code": refused.code}}
    count_error(refused.code)
    body = encode_json({"errors": [error]})
    return Response(body, media_type="application/json", headers={"Cache-Control": NO_STORE})


SUBSCRIPTION_ON_A_GATEWAY = (
    "subscriptions need a WebSocket, which this process (CHORUS_SERVE_ROLE=api) refuses: "
    "use graphql-transport-ws on a gateway (CHORUS_SERVE_ROLE=gateway)"
)
"""The message of a subscription sent over HTTP to an ``api`` process (HTTP 400,
``BAD_REQUEST``): its own URL would refuse the WebSocket with 421."""


def http_refusal(request: Request, error: HTTPException, role: ServeRole = "all") -> Response:
    """Strawberry's refusal of a request as Chorus's JSON error.

    A mutation over GET is 405 with ``Allow: POST``, as the GraphQL-over-HTTP
    specification says (strawberry answers 400). A subscription is 400
    ``BAD_REQUEST`` saying to open a WebSocket: on this URL, or on a gateway
    when ``role`` is ``api``. An ``operationName`` the document does not hold is a
    request error (GraphQL §6.1, ``GetOperation``): 200 under ``application/json``, as
    the GraphQL-over-HTTP specification asks of a well-formed request, and 400 once
    :func:`~chorus.graphql.http.negotiation.as_graphql_response` answers it as
    ``application/graphql-response+json``; no ``data`` entry either way.
    """
    cause = error.__cause__
    if isinstance(cause, CannotGetOperationTypeError):
        return error_response(200, error.reason, "BAD_REQUEST")
    if (
        role == "api"
        and isinstance(cause, InvalidOperationTypeError)
        and cause.operation_type is OperationType.SUBSCRIPTION
    ):
        return error_response(error.status_code, SUBSCRIPTION_ON_A_GATEWAY, "BAD_REQUEST")
    if (
        request.method == "GET"
        and isinstance(cause, InvalidOperationTypeError)
        and cause.operation_type is OperationType.MUTATION
    ):
        refused = error_response(405, "a mutation needs POST", "METHOD_NOT_ALLOWED")
        refused.headers["Allow"] = "POST"
        return refused
    return error_response(error.status_code, error.reason, "BAD_REQUEST")


def transport_refusal(request: Request, media: str | None, wants_ide: bool) -> Response | None:
    """The refusal of a request whose transport Chorus does not speak, if it is one.

    406: no answer type the client accepts (a browser asking for GraphiQL
    aside); 415: a ``Content-Encoding``; 501: a ``Transfer-Encoding`` other
    than chunked.
    """
    if media is None and not wants_ide:
        message = f"answers are {negotiation.GRAPHQL_RESPONSE} or {negotiation.JSON}"
        return error_response(406, message, "BAD_REQUEST")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        # It would be read as text and refused as "not UTF-8": say what is wrong.
        message = f"Content-Encoding {encoding[:40]!r} is not supported: send the body as is"
        return error_response(415, message, "BAD_REQUEST")
    transfer = request.headers.get("transfer-encoding", "")
    if any(c.strip().lower() not in ("", "chunked") for c in transfer.split(",")):
        # uvicorn undoes only chunked; a gzip coding under it reached JSON as bytes.
        message = f"Transfer-Encoding {transfer[:40]!r} is not supported: only chunked"
        return error_response(501, message, "BAD_REQUEST")
    return None


__all__ = ["http_refusal", "parse_refusal", "refusal_without_viewer", "transport_refusal"]
