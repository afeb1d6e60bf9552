"""The GraphQL endpoint: strawberry's ASGI view with Chorus's context and transports.

HTTP: the viewer comes from ``Authorization: Bearer``; bodies strawberry cannot read (not
UTF-8, not a JSON object, nested deeper than ``guards.nesting.MAX_JSON_DEPTH``, an integer
of thousands of digits, ``NaN``, ``1e999``, a byte order mark), and subscriptions (they
need a WebSocket), get HTTP 400 with a GraphQL-shaped ``BAD_REQUEST``.

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

import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, cast

from cross_web import AsyncHTTPRequestAdapter, HTTPException
from graphql import OperationType
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLRequestData
from strawberry.http.types import HTTPMethod
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types.execution import ExecutionResult
from strawberry.types.graphql import OperationType as StrawberryOperationType
from strawberry.types.unset import UnsetType

from chorus import auth
from chorus.auth import Identity, InvalidToken, TokenVerifier, bearer_token
from chorus.graphql.execution.operation_metrics import OperationNames, describe_operation
from chorus.graphql.execution.result_shape import is_request_error
from chorus.graphql.guards import nesting
from chorus.graphql.guards.document_limits import RequestLimits
from chorus.graphql.guards.documents import DocumentCache, parse_options
from chorus.graphql.guards.persisted import PersistedDocuments, PersistedQueryError, ViewerNeeded
from chorus.graphql.http import ide, negotiation
from chorus.graphql.http.answers import run_unraced, served
from chorus.graphql.http.body import (
    BodiesDecodedAhead,
    decode_query_params,
    refuse_repeated_parts,
)
from chorus.graphql.http.caching import (
    NO_STORE,
    HttpOperation,
    not_modified,
    query_headers,
    read_operation,
)
from chorus.graphql.http.introspection import IntrospectionAnswers
from chorus.graphql.http.refusals import (
    http_refusal,
    parse_refusal,
    refusal_without_viewer,
    transport_refusal,
)
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.kept_execution import KeptExecution
from chorus.graphql.websocket.handler import TOO_MANY_CONNECTIONS, TransportWSHandler, authorization
from chorus.jwks import JWKSVerifier
from chorus.logs import current_request_id
from chorus.metrics import RESPONSE_CACHE, child
from chorus.middleware import error_response
from chorus.resolvers import cached_answers
from chorus.resolvers.context import RequestContext, RequestIdentity, Services
from chorus.resolvers.request_errors import NO_TOKEN
from chorus.settings.server import ServeRole
from chorus.tracing import tracer

Runner = Callable[[Request], Awaitable[Response]]
"""How a request is executed into its response (the view's :meth:`ChorusGraphQL.run`)."""

_NO_VIEWER: ContextVar[str | None] = ContextVar("chorus_no_viewer", default=NO_TOKEN)
"""Why this HTTP request has no viewer (``None``: it has one; not checked yet: none).

Set by :meth:`ChorusGraphQL._answer` once the token is checked; read where a
persisted document could be looked up by hash, which needs a viewer."""


class ChorusGraphQL(GraphQL[RequestContext, None]):
    """The ``/graphql`` endpoint; ``tokens`` verifies bearer tokens (HS256 or the provider's).

    WebSockets speak ``graphql-transport-ws`` only (DESIGN.md §GraphQL
    contract): the legacy Apollo ``graphql-ws`` subprotocol, which strawberry
    also offers, has none of
    :class:`~chorus.graphql.websocket.handler.TransportWSHandler`'s limits, so a
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
        fast_field_execution: bool = True,
        compiled_execution: bool = True,
        introspection_answers: bool = True,
        role: ServeRole = "all",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("subscription_protocols", (GRAPHQL_TRANSPORT_WS_PROTOCOL,))
        self.operation_names = operation_names or OperationNames()
        self.documents = DocumentCache()
        limits = limits or RequestLimits()
        schema = build_schema(
            limits,
            self.operation_names,
            self.documents,
            threaded_validation=True,
            fast_field_execution=fast_field_execution,
            compiled_execution=compiled_execution,
        )
        super().__init__(schema, **kwargs)
        # A kept, planned operation the lean route executes skips Schema.execute.
        self._kept_execution = (
            KeptExecution(schema, self.documents, self.operation_names, limits)
            if compiled_execution
            else None
        )
        self._tokens = tokens
        self.role = role  # a gateway's sockets run subscriptions only (chorus.graphql.roles)
        self._max_tokens = limits.max_tokens
        self._ahead = BodiesDecodedAhead(self.documents, self._max_tokens)
        self._max_connections_per_user = max_connections_per_user
        self.persisted = persisted or PersistedDocuments()
        self.introspections = IntrospectionAnswers(enabled=introspection_answers)
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
        return self.context_for(request, services, identity, error)

    @staticmethod
    def context_for(
        request: Request, services: Services, identity: Identity | None, error: str | None
    ) -> RequestContext:
        """An HTTP request's context, kept on ``request.state`` for the HTTP cache to read
        after execution; ``error``: why there is no ``identity`` (:meth:`identify`)."""
        context = RequestContext(services, identity.user_id if identity else None, error)
        context.identity.auth_unavailable = isinstance(error, auth.Unavailable)
        request.state.chorus_context = context
        return context

    @property
    def graphql_ide_html(self) -> str:
        """GraphiQL from Chorus's own assets (:mod:`chorus.graphql.http.ide`), not a CDN."""
        return ide.PAGE

    async def render_graphql_ide(self, request: Request) -> Response:
        """The GraphiQL page, protected (:func:`~chorus.graphql.http.ide.protect`); it says
        ``Vary: Accept``, since the same URL answers another ``Accept`` with JSON."""
        response = await super().render_graphql_ide(request)
        ide.protect(response.headers, ide.CONTENT_SECURITY_POLICY)
        response.headers["Vary"] = "Accept"
        return response

    def should_render_graphql_ide(self, request: Any) -> bool:
        """GraphiQL for a browser's ``GET`` with no ``query``: its ``Accept`` names
        ``text/html``. Strawberry also renders it for ``*/*`` (curl's, httpx's, fetch's
        default), which the media types' table answers as JSON (docs/api.md): such a GET
        gets the JSON refusal of a request with no query instead. A GET with only
        persisted-query extensions is a query, not a browser."""
        return bool(
            super().should_render_graphql_ide(request)
            and "text/html" in request.headers.get("accept", "")
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
        """Strawberry's answer; a request error's has no ``data`` entry (nor, later, an
        ``ETag``: ``Cache-Control: no-store``).

        Which results are request errors: :mod:`chorus.graphql.execution.result_shape`.
        """
        request.state.chorus_errors = bool(result.errors)
        # A request error is no query's answer: never tagged (ETag, 304) nor kept.
        request.state.chorus_request_error = refused = is_request_error(result)
        answer = await super().process_result(request, result)
        if refused:
            answer.pop("data", None)
        return answer

    async def on_ws_connect(self, context: RequestContext) -> UnsetType | dict[str, object] | None:
        params = context.connection_params or {}
        identity, error = await self.identify(authorization(params))
        if identity is None:
            raise ConnectionRejectionError({"reason": error or "send a bearer token"})
        viewer = identity.user_id
        if self.at_connection_limit(viewer):
            raise ConnectionRejectionError({"reason": TOO_MANY_CONNECTIONS})
        self.connections[viewer] += 1
        context.identity = RequestIdentity(viewer, expires_at=identity.expires_at)
        context.renew_reads()
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
        viewer = context.identity.viewer_id
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
        refused = transport_refusal(request, media, self.should_render_graphql_ide(request))
        if refused is not None:
            await refused(scope, receive, send)
            return
        # One span per operation, not per field: resolver spans would cost more
        # than the hot read itself (docs/observability.md).
        with tracer.start_as_current_span("graphql") as span:
            try:
                response = await self._answer(request)
            except HTTPException as error:
                response = http_refusal(request, error, self.role)
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
        refuse_repeated_parts(request)
        unparsable = await self._ahead.prepare(await request.body())
        if unparsable is not None:
            return parse_refusal(unparsable)
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
            return served(request, *introspected)
        services: Services = request.app.state.services
        kept = self.kept_operation(operation)
        # The operation's own name, as its metrics name it, where the document is kept.
        name = kept[1] if kept is not None else operation.operation_name
        request.state.chorus_operation = name, identity
        mutates = kept is not None and kept[0] is OperationType.MUTATION
        if identity is None or not cached_answers.enabled(services) or mutates:
            return await self._execute(request, services, operation, None, name)
        asked = cached_answers.AnswerRequest.of(
            operation.document_sha256 or cached_answers.document_hash(operation.document),
            operation.operation_name,
            operation.variables,
            identity.user_id,
        )
        cached = await cached_answers.lookup(services, asked)
        if cached is None:
            return await self.answer_missed(request, services, operation, asked, name)
        return served(request, cached.body, cached.etag, self.operation_names.label(name))

    async def answer_missed(
        self,
        request: Request,
        services: Services,
        operation: HttpOperation,
        asked: cached_answers.AnswerRequest | None,
        name: str | None,
        run: Runner | None = None,
    ) -> Response:
        """A viewer's operation the response cache did not answer: executed by ``run``
        (default :meth:`run`, strawberry's view) and, a query's answer, kept if it may.

        ``asked``: its keys in the response cache; ``None`` when the cache is not used
        (off, a query budget on, a mutation). ``name``: the operation's own name, as
        far as it is known (its metrics label: :class:`OperationNames`). Each key is
        executed once at a time (single flight): a request that waited on another's
        run looks the cache up again.
        """
        if asked is None:
            return await self._execute(request, services, operation, None, name, run)
        async with cached_answers.flight(services, asked) as leads:
            if leads:
                return await self._execute(request, services, operation, asked, name, run)
            cached = await cached_answers.lookup(services, asked)
        if cached is None:
            return await self._execute(request, services, operation, asked, name, run)
        # Labelled now: the run waited on may have taught the name.
        return served(request, cached.body, cached.etag, self.operation_names.label(name))

    async def run_kept_query(
        self,
        request: Request,
        services: Services,
        identity: Identity,
        operation: HttpOperation,
        extensions: dict[str, Any] | None,
    ) -> Response:
        """:meth:`run` of a request the lean route has read (:mod:`chorus.graphql.http.lean`):
        the JSON body decoded into ``operation`` and ``extensions``, the token verified as
        ``identity``, the document a kept query's. What is left of strawberry's view runs
        here, in its order: the context, the execution (the operation types HTTP
        ``request.method`` allows; by
        :class:`~chorus.graphql.schema.kept_execution.KeptExecution` when the document
        passed validation by this request's rules and nothing refuses it, else by the
        schema's ``execute`` with every extension), :meth:`process_result`, the
        response."""
        sub_response = await self.get_sub_response(request)
        context = self.context_for(request, services, identity, None)
        method = cast(HTTPMethod, request.method)
        allowed = StrawberryOperationType.from_http(method)
        if not self.allow_queries_via_get and method == "GET":
            allowed = allowed - {StrawberryOperationType.QUERY}
        result = None
        if self._kept_execution is not None:
            result = await self._kept_execution.execute(
                operation.document,
                operation.variables,
                context,
                operation.operation_name,
                allowed,
                extensions,
            )
        if result is None:
            result = await self.schema.execute(
                operation.document,
                root_value=None,
                variable_values=operation.variables,
                context_value=context,
                operation_name=operation.operation_name,
                allowed_operation_types=allowed,
                operation_extensions=extensions,
            )
        response_data = await self.process_result(request, result)
        if result.errors:
            self._handle_errors(result.errors, response_data)
        return self.create_response(response_data=response_data, sub_response=sub_response)

    def kept_operation(self, operation: HttpOperation) -> tuple[OperationType, str | None] | None:
        """``operation``'s type and own name (the document's only operation's when none was
        sent) if its document is kept, else ``None``. A kept mutation skips the response
        cache (keys, single flight); one not kept yet goes the cache's way, which declines
        it. The lean route takes kept queries and mutations only."""
        options = parse_options(self._max_tokens)
        return self.documents.kept_operation(operation.document, operation.operation_name, options)

    async def _execute(
        self,
        request: Request,
        services: Services,
        operation: HttpOperation,
        asked: cached_answers.AnswerRequest | None,
        name: str | None,
        run: Runner | None = None,
    ) -> Response:
        """Execute through ``run`` (default :meth:`run`, strawberry's view); tag a query
        answer (``ETag`` …) and keep it if it may. Counted once, as executed: ``miss``
        (kept) or ``bypass``, a ``304`` included, under the operation's name as its
        execution knew it (``name`` else)."""
        response, context, taken = await run_unraced(run or self.run, request, services)
        if (
            context is None
            or context.operation.type != "query"
            or response.status_code != 200
            or response.media_type != "application/json"
            or getattr(request.state, "chorus_request_error", False)
        ):
            response.headers["Cache-Control"] = NO_STORE
            return response
        body = bytes(response.body)
        if context.operation.introspection_only and not getattr(
            request.state, "chorus_errors", True
        ):
            self.introspections.keep(operation, body)
        # The name execution chose (the document's only operation's), learned by now.
        label = self.operation_names.label(context.operation.name or name)
        kept = None
        if asked is not None and not getattr(request.state, "chorus_errors", True):
            kept = await cached_answers.remember(
                services, asked, context, body, taken=taken, operation=label
            )
        child(RESPONSE_CACHE, label, "miss" if kept is not None else "bypass").inc()
        etag = kept.etag if kept is not None else cached_answers.etag_of(body)
        headers = query_headers(etag)
        if not_modified(request, etag):
            return Response(status_code=304, headers=headers)
        response.headers.update(headers)
        return response

    encode_json = staticmethod(nesting.encode_json)

    def decode_json(self, data: str | bytes) -> object:
        """A body or frame as JSON (:meth:`BodiesDecodedAhead.decode`)."""
        return self._ahead.decode(data)

    def parse_query_params(self, params: Any) -> dict[str, Any]:
        """A GET's parameters (:func:`~chorus.graphql.http.body.decode_query_params`)."""
        return decode_query_params(params, self.parse_json)

    def parse_json(self, data: str | bytes) -> object:
        """An HTTP request body: a JSON object (or a list, a batch strawberry refuses).

        WebSocket frames do not come through here; their shape is checked in
        :meth:`~chorus.graphql.websocket.handler.TransportWSHandler.handle_message`.
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


__all__ = ["ChorusGraphQL"]
