"""The GraphQL endpoint: strawberry's ASGI view with Chorus's context and transports.

HTTP: the viewer comes from ``Authorization: Bearer``; bodies strawberry
cannot read (not UTF-8, not a JSON object, nested deeper than
:data:`~chorus.graphql.nesting.MAX_JSON_DEPTH`, an integer of thousands of
digits, not standard JSON: ``NaN``, ``1e999``, a byte order mark), and subscriptions (they need
a WebSocket), get HTTP 400 with a GraphQL-shaped ``BAD_REQUEST``.

WebSocket (``graphql-transport-ws``): the token comes in the
``connection_init`` payload (``{"Authorization": "Bearer …"}``); a missing or
invalid one closes the socket with 4403. Each user may hold a bounded number
of connections per process, each a bounded number of operations. A stream
that fails after it started (access lost) ends with the protocol's ``error``
message, whose error carries ``extensions.code``. A frame nested too deep,
or with an integer too long to convert, closes the socket with 4400 like
any frame that is not JSON.

Both: the request id (:mod:`chorus.logs`) is the HTTP response's
``X-Request-Id`` and the ``connection_ack`` payload's ``requestId``; a page
on another origin may open a socket only from an origin of
``CHORUS_CORS_ORIGINS``, the list HTTP's CORS answers from too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

from cross_web import AsyncHTTPRequestAdapter, HTTPException
from graphql import DocumentNode, GraphQLError, get_operation_ast
from graphql.language.ast import OperationType as DocumentOperation
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLRequestData
from strawberry.schema.exceptions import InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types.execution import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.unset import UnsetType

from chorus import auth
from chorus.auth import Identity, InvalidToken, TokenVerifier, bearer_token
from chorus.graphql import ide, negotiation, nesting
from chorus.graphql.access import refusal_without_viewer
from chorus.graphql.caching import (
    NO_STORE,
    HttpOperation,
    not_modified,
    query_headers,
    read_operation,
)
from chorus.graphql.documents import DocumentCache, parse_ahead, parse_options
from chorus.graphql.limits import RequestLimits
from chorus.graphql.metrics import OperationNames, describe_operation
from chorus.graphql.nesting import MAX_JSON_DEPTH, decode_json
from chorus.graphql.persisted import PersistedDocuments, PersistedQueryError, ViewerNeeded
from chorus.graphql.schema import build_schema
from chorus.graphql.websocket import TOO_MANY_CONNECTIONS, TransportWSHandler, authorization
from chorus.jwks import JWKSVerifier
from chorus.logs import current_request_id
from chorus.metrics import RESPONSE_CACHE, RESPONSE_CACHE_SERVED_BYTES
from chorus.middleware import error_response
from chorus.resolvers import responses
from chorus.resolvers.context import RequestContext, Services
from chorus.resolvers.errors import NO_TOKEN
from chorus.tracing import tracer

OFF_LOOP_BYTES = 2048
"""Bodies larger than this are decoded, and their document parsed, in a worker thread.

The document waits in :class:`~chorus.graphql.documents.DocumentCache` for its request."""

RACED_READ_ATTEMPTS = 3
"""Runs of a query that read one playlist at two versions before its answer is sent as is.

Each part of such an answer still names its own version (``entries.version``)."""

_DECODED_KEPT = 16
"""Large bodies whose decoding is kept for the request that sent them (oldest dropped)."""

_NO_VIEWER: ContextVar[str | None] = ContextVar("chorus_no_viewer", default=NO_TOKEN)
"""Why this HTTP request has no viewer (``None``: it has one; not checked yet: none).

Set by :meth:`ChorusGraphQL._answer` once the token is checked; read where a
persisted document could be looked up by hash, which needs a viewer."""

_PREPARING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chorus-prepare")
"""One thread: several would each take the GIL in turn, and the loop would wait behind all."""


class IntrospectionAnswers:
    """Answers of introspection-only operations, by document, operation name and variables.

    Such an answer is the schema's, the same for everyone, token or not, for as
    long as the process runs: it is kept (LRU, :data:`MAX_INTROSPECTIONS`) and
    served without parsing or executing. Executing GraphiQL's introspection
    query took ~17 ms of the loop: 100 clients without a token sending it held
    ``/healthz`` for seconds. An answer that names the viewer's budget
    (``throttleStatus``) is not kept.
    """

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str | None, str], tuple[bytes, str]] = OrderedDict()

    @staticmethod
    def _key(operation: HttpOperation) -> tuple[str, str | None, str] | None:
        try:
            variables = json.dumps(operation.variables, sort_keys=True)
        except (TypeError, ValueError):
            return None
        return operation.document, operation.operation_name, variables

    def get(self, operation: HttpOperation) -> tuple[bytes, str] | None:
        """The kept body and its ``ETag``, if any."""
        key = self._key(operation)
        found = self._kept.get(key) if key is not None else None
        if found is not None and key is not None:
            self._kept.move_to_end(key)
        return found

    def keep(self, operation: HttpOperation, body: bytes) -> None:
        """Keep ``body``, an error-free answer of the introspection-only ``operation``."""
        key = self._key(operation)
        if key is None or len(body) > MAX_INTROSPECTION_BYTES or b"throttleStatus" in body:
            return
        self._kept[key] = body, responses.etag_of(body)
        self._kept.move_to_end(key)
        while len(self._kept) > MAX_INTROSPECTIONS:
            self._kept.popitem(last=False)


MAX_INTROSPECTIONS = 32
"""Introspection answers kept (a client generator's, GraphiQL's, a few tools')."""

MAX_INTROSPECTION_BYTES = 1 << 20
"""A longer introspection answer is not kept."""


GET_PARAMETERS = ("query", "operationName", "variables", "extensions")


def _refuse_repeated_parts(request: Request) -> None:
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


def parse_refusal(error: GraphQLError) -> Response:
    """The answer to a document that does not parse, as strawberry and ``ErrorPolicy`` give it.

    HTTP 200, ``{"data": null, "errors": [...]}`` with ``GRAPHQL_PARSE_FAILED``,
    never cached.
    """
    formatted = {**error.formatted, "extensions": {"code": "GRAPHQL_PARSE_FAILED"}}
    body = nesting.encode_json({"data": None, "errors": [formatted]})
    return Response(body, media_type="application/json", headers={"Cache-Control": NO_STORE})


class ChorusGraphQL(GraphQL[RequestContext, None]):
    """The ``/graphql`` endpoint; ``tokens`` verifies bearer tokens (HS256 or the provider's).

    WebSockets speak ``graphql-transport-ws`` only (DESIGN.md §GraphQL
    contract): the legacy Apollo ``graphql-ws`` subprotocol, which strawberry
    also offers, has none of :class:`~chorus.graphql.websocket.TransportWSHandler`'s limits, so a
    socket that asks only for it is closed with 4406.
    """

    graphql_transport_ws_handler_class = TransportWSHandler

    def __init__(
        self,
        tokens: TokenVerifier | JWKSVerifier,
        *,
        max_connections_per_user: int = 20,
        limits: RequestLimits | None = None,
        operation_names: OperationNames | None = None,
        persisted: PersistedDocuments | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("subscription_protocols", (GRAPHQL_TRANSPORT_WS_PROTOCOL,))
        self._operation_names = operation_names or OperationNames()
        self.documents = DocumentCache()
        schema = build_schema(
            limits, self._operation_names, self.documents, threaded_validation=True
        )
        super().__init__(schema, **kwargs)
        self._tokens = tokens
        self._max_tokens = (limits or RequestLimits()).max_tokens
        self._decoded: dict[bytes, object] = {}
        self._max_connections_per_user = max_connections_per_user
        self.persisted = persisted or PersistedDocuments()
        self.introspections = IntrospectionAnswers()
        self.connections: Counter[str] = Counter()

    async def identify(self, header: object) -> tuple[Identity | None, str | None]:
        """``(identity, None)`` for a valid token, ``(None, reason)`` otherwise.

        Awaits only when the identity provider's keys must be fetched (in a thread).
        """
        try:
            if header is not None and not isinstance(header, str):
                raise InvalidToken("use 'Authorization: Bearer <token>'")
            token = bearer_token(header)
            return (await self._tokens.identify(token) if token else None), None
        except auth.KeysUnavailable as error:
            return None, auth.Unavailable(error)
        except InvalidToken as error:
            return None, str(error)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> RequestContext:
        services: Services = request.app.state.services
        if isinstance(request, WebSocket):
            return RequestContext(services, None, "send the token in connection_init")
        identity, error = await self.identify(request.headers.get("authorization"))
        context = RequestContext(services, identity.user_id if identity else None, error)
        context.auth_unavailable = isinstance(error, auth.Unavailable)
        request.state.chorus_context = context  # what the HTTP cache reads after execution
        return context

    @property
    def graphql_ide_html(self) -> str:
        """GraphiQL from Chorus's own assets (:mod:`chorus.graphql.ide`), not a CDN."""
        return ide.PAGE

    async def render_graphql_ide(self, request: Request) -> Response:
        response = await super().render_graphql_ide(request)
        ide.protect(response.headers, ide.CONTENT_SECURITY_POLICY)
        return response

    def should_render_graphql_ide(self, request: Any) -> bool:
        # A GET with only persisted-query extensions is a query, not a browser.
        return bool(
            super().should_render_graphql_ide(request)
            and request.query_params.get("extensions") is None
        )

    async def parse_http_body(
        self, request: AsyncHTTPRequestAdapter
    ) -> GraphQLRequestData | list[GraphQLRequestData]:
        """Strawberry's reading of the request, with persisted documents resolved.

        Raises:
            PersistedQueryError: see :meth:`PersistedDocuments.resolve`.
            HTTPException: 400, ``extensions`` that is not an object.
        """
        data = await super().parse_http_body(request)
        if isinstance(data, GraphQLRequestData):
            if data.extensions is not None and not isinstance(data.extensions, dict):
                raise HTTPException(400, "extensions must be a JSON object")
            if data.operation_name is not None and not isinstance(data.operation_name, str):
                # graphql-core would look for an operation named "5".
                raise HTTPException(400, "operationName must be a string")
            # Registering (a caller with a valid token only) was done by
            # read_operation, where the request's identity is known already.
            viewer = _NO_VIEWER.get() is None
            query, _ = self.persisted.resolve(data.query, data.extensions, viewer=viewer)
            if query is not data.query and isinstance(query, str):
                data = dataclasses.replace(data, query=query)
        return data

    async def process_result(self, request: Request, result: ExecutionResult) -> Any:
        request.state.chorus_errors = bool(result.errors)
        return await super().process_result(request, result)

    async def on_ws_connect(self, context: RequestContext) -> UnsetType | dict[str, object] | None:
        params = context.connection_params or {}
        identity, error = await self.identify(authorization(params))
        if identity is None:
            raise ConnectionRejectionError({"reason": error or "send a bearer token"})
        viewer = identity.user_id
        if self.at_connection_limit(viewer):
            raise ConnectionRejectionError({"reason": TOO_MANY_CONNECTIONS})
        self.connections[viewer] += 1
        context.viewer_id, context.auth_error = viewer, None
        context.expires_at = identity.expires_at
        context.renew_loaders()
        return {"requestId": current_request_id()}

    async def reject_websocket(self, request: WebSocket) -> WebSocket:
        """A handshake from an origin not allowed: 403 with a JSON error saying why.

        Strawberry's refusal is a bare 403 (closing before accepting); the
        ASGI denial response, where the server offers it, carries the body.
        """
        if "websocket.http.response" not in request.scope.get("extensions", {}):
            return await super().reject_websocket(request)
        await request.send_denial_response(
            error_response(
                403,
                "a page on this origin may not open a WebSocket here "
                "(CHORUS_CORS_ORIGINS lists the origins that may)",
                "FORBIDDEN",
            )
        )
        return request

    def at_connection_limit(self, user_id: str) -> bool:
        return self.connections[user_id] >= self._max_connections_per_user

    def release(self, context: RequestContext) -> None:
        """A WebSocket closed: give its viewer's connection back."""
        viewer = context.viewer_id
        if viewer is not None and self.connections[viewer] > 0:
            self.connections[viewer] -= 1
            if not self.connections[viewer]:
                del self.connections[viewer]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Strawberry answers a body it cannot read (not JSON, not an object,
        # no query) with plain text; clients expect a GraphQL error with a code.
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope, receive=receive)
        media = negotiation.negotiate(request.headers.get("accept"))
        if media is None and not self.should_render_graphql_ide(request):
            message = f"answers are {negotiation.GRAPHQL_RESPONSE} or {negotiation.JSON}"
            await error_response(406, message, "BAD_REQUEST")(scope, receive, send)
            return
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            # It would be read as text and refused as "not UTF-8": say what is wrong.
            message = f"Content-Encoding {encoding[:40]!r} is not supported: send the body as is"
            await error_response(415, message, "BAD_REQUEST")(scope, receive, send)
            return
        transfer = request.headers.get("transfer-encoding", "")
        if any(c.strip().lower() not in ("", "chunked") for c in transfer.split(",")):
            # uvicorn undoes only chunked; a gzip coding under it reached JSON as bytes.
            message = f"Transfer-Encoding {transfer[:40]!r} is not supported: only chunked"
            await error_response(501, message, "BAD_REQUEST")(scope, receive, send)
            return
        # One span per operation, not per field: resolver spans would cost more
        # than the hot read itself (docs/observability.md).
        with tracer.start_as_current_span("graphql") as span:
            try:
                response = await self._answer(request)
            except HTTPException as error:
                response = _http_refusal(request, error)
            except PersistedQueryError as error:
                response = error_response(error.status, error.message, error.code)
            except ViewerNeeded:
                response = refusal_without_viewer(_NO_VIEWER.get())
            describe_operation(span, request, response)
        if media == negotiation.GRAPHQL_RESPONSE and response.media_type != "text/html":
            response = negotiation.as_graphql_response(response)
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        """An HTTP request's response: from the response cache when it may, else executed."""
        _refuse_repeated_parts(request)
        body = await request.body()
        if len(body) > OFF_LOOP_BYTES:
            # Decoding and parsing are pure Python: a big body's would hold the
            # event loop (and /healthz) for tens of ms; in a thread the loop
            # keeps its turns. Both results are kept for the request to use.
            loop = asyncio.get_running_loop()
            decoded, document = await loop.run_in_executor(
                _PREPARING, _prepare, body, self._max_tokens
            )
            # On the loop: neither the memo nor the document cache is shared with threads.
            self._decoded[body] = decoded
            while len(self._decoded) > _DECODED_KEPT:
                self._decoded.pop(next(iter(self._decoded)))
            if isinstance(document, GraphQLError):
                # Strawberry would parse it again on the loop to make this very
                # answer: a few clients sending 10 KB over the token limit held
                # /healthz for seconds.
                return parse_refusal(document)
            if document is not None and isinstance(decoded, dict):
                query = decoded["query"]
                self.documents.hold(query, parse_options(self._max_tokens), document)
        identity, reason = await self.identify(request.headers.get("authorization"))
        _NO_VIEWER.set(None if identity is not None else reason or NO_TOKEN)
        # Only a caller with a valid token looks a persisted document up by
        # hash (else any client could learn which ones are registered) or
        # registers one (else anyone could fill the store).
        operation = await read_operation(
            request, self.decode_json, self.persisted, viewer=identity is not None
        )
        if operation is None:
            return await self.run(request)
        introspected = self.introspections.get(operation)
        if introspected is not None:
            body, etag = introspected
            if not_modified(request, etag):
                return Response(status_code=304, headers=query_headers(etag))
            return Response(body, media_type="application/json", headers=query_headers(etag))
        services: Services = request.app.state.services
        # Learned names come from OperationMetrics, once an operation passed validation.
        label = self._operation_names.label(operation.operation_name)
        request.state.chorus_operation = operation.operation_name, identity
        if identity is None or not responses.enabled(services) or self._mutates(operation):
            return await self._execute(request, services, operation, None, label)
        asked = responses.AnswerRequest.of(
            operation.document_sha256 or responses.document_hash(operation.document),
            operation.operation_name,
            operation.variables,
            identity.user_id,
        )
        cached = await responses.lookup(services, asked)
        if cached is None:
            async with responses.flight(services, asked) as leads:
                if leads:
                    return await self._execute(request, services, operation, asked, label)
                cached = await responses.lookup(services, asked)
            if cached is None:
                return await self._execute(request, services, operation, asked, label)
        headers = query_headers(cached.etag)
        if not_modified(request, cached.etag):
            RESPONSE_CACHE.labels(label, "not_modified").inc()
            return Response(status_code=304, headers=headers)
        RESPONSE_CACHE.labels(label, "hit").inc()
        RESPONSE_CACHE_SERVED_BYTES.inc(len(cached.body))
        return Response(cached.body, media_type="application/json", headers=headers)

    def _mutates(self, operation: HttpOperation) -> bool:
        """Whether ``operation`` is a mutation of a document kept (validated once).

        A mutation is never answered from the response cache: its keys
        (two hashes of its variables) and single flight are skipped. A
        document not kept yet goes the cache's way, which declines it.
        """
        document = self.documents.kept(operation.document, parse_options(self._max_tokens))
        if document is None:
            return False
        chosen = get_operation_ast(document, operation.operation_name)
        return chosen is not None and chosen.operation is DocumentOperation.MUTATION

    async def _execute(
        self,
        request: Request,
        services: Services,
        operation: HttpOperation,
        asked: responses.AnswerRequest | None,
        label: str,
    ) -> Response:
        """Execute through strawberry; tag a query answer (``ETag`` …) and keep it if it may."""
        taken = responses.ticket(services)
        response = await self.run(request)
        context: RequestContext | None = getattr(request.state, "chorus_context", None)
        for _ in range(RACED_READ_ATTEMPTS - 1):
            if context is None or context.operation_type != "query" or not context.reads.raced:
                break
            # An edit committed between two reads of one playlist (its header,
            # then a page): the answer would show two versions as one. Reads
            # have no effects, so the query runs again, at no cost to the viewer.
            budget = services.query_budget
            if budget is not None and context.viewer_id is not None and context.query_cost:
                budget.refund(context.viewer_id, context.query_cost)
            taken = responses.ticket(services)
            response = await self.run(request)
            context = getattr(request.state, "chorus_context", None)
        if (
            context is None
            or context.operation_type != "query"
            or response.status_code != 200
            or response.media_type != "application/json"
        ):
            response.headers["Cache-Control"] = NO_STORE
            return response
        body = bytes(response.body)
        if context.introspection_only and not getattr(request.state, "chorus_errors", True):
            self.introspections.keep(operation, body)
        kept = None
        if asked is not None and not getattr(request.state, "chorus_errors", True):
            kept = await responses.remember(
                services, asked, context, body, taken=taken, operation=label
            )
        RESPONSE_CACHE.labels(label, "miss" if kept is not None else "bypass").inc()
        etag = kept.etag if kept is not None else responses.etag_of(body)
        headers = query_headers(etag)
        if not_modified(request, etag):
            RESPONSE_CACHE.labels(label, "not_modified").inc()
            return Response(status_code=304, headers=headers)
        response.headers.update(headers)
        return response

    encode_json = staticmethod(nesting.encode_json)

    def decode_json(self, data: str | bytes) -> object:
        """A body or frame as JSON, nested at most :data:`MAX_JSON_DEPTH` deep.

        A large body decoded ahead (:func:`_prepare`) is not decoded again.

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

    def parse_query_params(self, params: Any) -> dict[str, Any]:
        """A GET's parameters, ``variables`` and ``extensions`` decoded as JSON.

        Raises:
            HTTPException: 400 naming the parameter that is not JSON (strawberry
                says "Unable to parse request body as JSON" of a GET's URL).
        """
        decoded: dict[str, Any] = dict(params)
        for name in ("variables", "extensions"):
            text = decoded.get(name)
            if not text:
                continue
            try:
                decoded[name] = self.parse_json(text)
            except HTTPException as error:
                reason = error.reason.removeprefix("the request body ")
                if reason == "Unable to parse request body as JSON":
                    reason = "is not JSON"
                raise HTTPException(400, f"the {name} query parameter {reason}") from None
        return decoded

    def parse_json(self, data: str | bytes) -> object:
        """An HTTP request body: a JSON object (or a list, a batch strawberry refuses).

        WebSocket frames do not come through here; their shape is checked in
        :meth:`~chorus.graphql.websocket.TransportWSHandler.handle_message`.
        """
        try:
            body = super().parse_json(data)
        except HTTPException as error:
            cause = error.__cause__
            if isinstance(cause, nesting.JSONRefused):
                raise HTTPException(400, f"the request body {cause.phrase}") from None
            raise
        if not isinstance(body, dict | list):
            raise HTTPException(400, "the request body must be a JSON object")
        return body


def _http_refusal(request: Request, error: HTTPException) -> Response:
    """Strawberry's refusal of a request as Chorus's JSON error.

    A mutation over GET is 405 with ``Allow: POST``, as the GraphQL-over-HTTP
    specification says (strawberry answers 400).
    """
    cause = error.__cause__
    if (
        request.method == "GET"
        and isinstance(cause, InvalidOperationTypeError)
        and cause.operation_type is OperationType.MUTATION
    ):
        refused = error_response(405, "a mutation needs POST", "METHOD_NOT_ALLOWED")
        refused.headers["Allow"] = "POST"
        return refused
    return error_response(error.status_code, error.reason, "BAD_REQUEST")


__all__ = ["ChorusGraphQL"]
