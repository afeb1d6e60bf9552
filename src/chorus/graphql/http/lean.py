"""The lean route: kept documents answered from raw ASGI, in front of Starlette and strawberry.

The response cache's hit (``chorus.resolvers.cached_answers``) is the
commonest answer of a reading API, and its bytes are ready: what it costs
is the request path in front of them. A kept document's query the cache
does not answer, and a kept mutation, cost the path too: Starlette's router,
the view reading the body and the token again, strawberry's view around
``Schema.execute`` (~18% of a cold read's CPU, measured A/B). :class:`LeanRoute`
answers both, and hands every other request, unchanged (its body replayed),
to the app behind it — Starlette's router and
:class:`~chorus.graphql.endpoint.ChorusGraphQL`, whose answers and error
shapes stay the reference.

It takes a request only when :meth:`ChorusGraphQL._answer` would take it the
same way, with the same checks, in the same order:

* ``POST /graphql`` with a JSON body (``Content-Type`` naming
  ``application/json``), or ``GET /graphql`` with a ``query`` or
  ``extensions`` parameter, each parameter once; a role that serves HTTP;
* an ``Accept`` answered by JSON or ``application/graphql-response+json``
  (:func:`~chorus.graphql.http.negotiation.negotiate`); no
  ``Content-Encoding``, no ``Transfer-Encoding`` but chunked; one
  ``Authorization`` with a valid bearer token;
* a body of at most :data:`~chorus.graphql.http.body.OFF_LOOP_BYTES`
  decoded by the view's bounded decoder into an object of the right types;
  persisted documents resolved (and registered) as the view does;
* a document the view has kept (it parsed and passed validation before), whose
  operation is a query, or a mutation sent by ``POST``.

A query with no kept introspection answer is looked up in the response cache
as the view looks it up (on, no query budget on). A current entry: its bytes
(or ``304``) are sent with the view's headers and media type, the hit is
counted, the access line noted and the ``graphql`` span named as the view
does. No entry (or no lookup), and every kept mutation: the request is
executed as the view executes it after its checks — the view's own miss
(:meth:`~chorus.graphql.endpoint.ChorusGraphQL.answer_missed`: single flight,
raced reads run again, the answer kept and tagged) around what is left of
strawberry's view (:meth:`~chorus.graphql.endpoint.ChorusGraphQL.run_kept_query`:
the context, the execution with every extension's effect — by
:class:`~chorus.graphql.schema.kept_execution.KeptExecution`, else
``Schema.execute`` —, the result's shape),
inside the ``graphql`` span, the media type negotiated. Anything else, and
an exception before a query's answer started, goes to the app behind, which
decides afresh (a read has no effects: run again, it costs only time); an
exception while an edit runs fails the request, as in the view (an edit is
never run twice: ``follow`` and ``setPresence`` carry no operation id). The
middleware (request id, CORS, body size limit, access log, tracing) sits
outside: it applies to both alike.

A body's decoding (the bounded decoder's result and its canonical
variables) is kept per body bytes (:data:`DECODED_BODIES`, LRU): decoding is
pure, so a repeated body is not decoded again; every other check runs on
every request. ``CHORUS_LEAN_ROUTE=false`` turns the route off.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl

from graphql import OperationType
from opentelemetry.trace import get_current_span
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chorus.auth import Identity
from chorus.graphql.execution.operation_metrics import (
    OperationNames,
    describe_answer,
    describe_operation,
)
from chorus.graphql.guards.persisted import PersistedDocuments
from chorus.graphql.http import negotiation
from chorus.graphql.http.body import GET_PARAMETERS, OFF_LOOP_BYTES
from chorus.graphql.http.caching import (
    QUERY_CACHE_CONTROL,
    VARY,
    HttpOperation,
    get_parameters,
    names_etag,
)
from chorus.graphql.http.introspection import IntrospectionAnswers
from chorus.metrics import RESPONSE_CACHE, RESPONSE_CACHE_SERVED_BYTES, child
from chorus.resolvers import cached_answers
from chorus.resolvers.cached_answers import canonical_variables
from chorus.tracing import enabled as tracing_enabled
from chorus.tracing import tracer

DECODED_BODIES = 1024
"""Request bodies (or GET query strings) whose decoding is kept (least recently used go)."""

_PATH = "/graphql"

_ASKED_PER_BODY = 16
"""Viewers whose cache keys are kept per decoded body (all forgotten when more come)."""

_Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


class _Decoded:
    """What one body asks, decoded once: the parts
    :func:`~chorus.graphql.http.caching.read_operation` reads, the variables' canonical
    text, and the document's SHA-256 once a request needed it."""

    __slots__ = (
        "_canonical",
        "asked",
        "extensions",
        "name",
        "operation",
        "query",
        "sha256",
        "variables",
    )

    def __init__(self, query: object, name: str | None, variables: Any, extensions: Any) -> None:
        self.query = query
        self.name = name
        self.extensions = extensions
        self._canonical: str | None = None
        self.sha256: str | None = None  # of ``query``, once a request needs it
        self.variables: dict[str, Any] | None = variables
        self.asked: dict[tuple[str, str], cached_answers.AnswerRequest] = {}
        """The response cache's keys of this body, by (document hash, viewer)."""
        self.operation: HttpOperation | None = None
        """The operation of the last request of this body (kept while its document and
        hash are the ones resolved again: frozen, so shared)."""

    @property
    def canonical(self) -> str:
        """The variables' canonical text (:func:`canonical_variables`), made when a query
        first needs it: a mutation's body never does (it is not cached)."""
        canonical = self._canonical
        if canonical is None:
            canonical = self._canonical = canonical_variables(self.variables)
        return canonical


@dataclass(frozen=True, slots=True)
class _Kept:
    """A kept query or mutation of a viewer that the lean route executes: what its
    checks found."""

    operation: HttpOperation
    extensions: dict[str, Any] | None
    identity: Identity
    asked: cached_answers.AnswerRequest | None
    """Its keys in the response cache; ``None``: the cache is not looked up."""
    media: str
    name: str | None
    """The operation's own name (the document's only operation's when none was sent)."""
    services: Any
    mutates: bool = False


class View(Protocol):
    """What the lean route uses of :class:`~chorus.graphql.endpoint.ChorusGraphQL`."""

    @property
    def role(self) -> str: ...

    @property
    def persisted(self) -> PersistedDocuments: ...

    @property
    def introspections(self) -> IntrospectionAnswers: ...

    @property
    def operation_names(self) -> OperationNames: ...

    async def identify(self, header: object) -> tuple[Identity | None, str | None]: ...

    def decode_json(self, data: str | bytes) -> object: ...

    def kept_operation(
        self, operation: HttpOperation
    ) -> tuple[OperationType, str | None] | None: ...

    async def answer_missed(
        self,
        request: Request,
        services: Any,
        operation: HttpOperation,
        asked: cached_answers.AnswerRequest | None,
        name: str | None,
        run: Callable[[Request], Awaitable[Response]] | None = None,
    ) -> Response: ...

    async def run_kept_query(
        self,
        request: Request,
        services: Any,
        identity: Identity,
        operation: HttpOperation,
        extensions: dict[str, Any] | None,
    ) -> Response: ...


class LeanRoute:
    """``/graphql``'s kept documents answered before ``app`` (see the module docstring).

    Args:
        app: the application behind (Starlette with the GraphQL view).
        view: the GraphQL view whose checks, caches and counters are used.
        state: the Starlette app's state, where the lifespan puts the services.
    """

    def __init__(self, app: ASGIApp, view: View, state: State) -> None:
        self.app = app
        self._view = view
        self._gateway = view.role == "gateway"  # a view's role is fixed when it is made
        # State keeps its attributes in this dict: read directly, no __getattr__ per request.
        self._services: dict[str, Any] = state._state
        # Apart: a GET's query string and a POST's body may be the same bytes.
        self._bodies: OrderedDict[bytes, _Decoded] = OrderedDict()
        self._queries: OrderedDict[bytes, _Decoded] = OrderedDict()
        self._kept: dict[tuple[str, str | None], tuple[OperationType, str | None]] = {}
        """(document, operation name sent) → the type and own name of a kept document's
        operation: a document's text names its operations for good (should the document
        cache forget the document, the view decides afresh). Bounded: all are forgotten
        at :data:`DECODED_BODIES`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != _PATH
            or scope.get("root_path")
            or scope["method"] not in ("GET", "POST")
            or self._gateway
        ):
            await self.app(scope, receive, send)
            return
        services = self._services.get("services")
        if services is None:
            await self.app(scope, receive, send)
            return
        body = b""
        if scope["method"] == "POST":
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
        answer: _Answer | _Kept | Response | None
        try:
            answer = await self._answer(scope, body, services)
            if isinstance(answer, _Kept) and not answer.mutates:
                answer = await self._executed(scope, answer)
        except Exception:
            answer = None  # the app behind runs the request (a read, again) as it does
        if isinstance(answer, _Kept):
            # An edit is run once: what fails in it fails the request, as in the view
            # (an edit without an operation id, follow or setPresence, is not replayed).
            answer = await self._executed(scope, answer)
        # Sent outside the try: a client gone mid-answer is not the app's to answer again.
        if isinstance(answer, Response):
            await answer(scope, receive, send)
            return
        if answer is not None:
            status, headers, out = answer
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": out})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed or scope["method"] != "POST":
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _answer(self, scope: Scope, body: bytes, services: Any) -> _Answer | _Kept | None:
        """The kept answer of this request (status, headers, body), if there is one; a kept
        query the response cache did not answer (or does not look up), or a kept mutation,
        as :class:`_Kept`; ``None``: the app behind takes the request."""
        accept = authorization = content_type = if_none_match = None
        tokens = 0
        # The first of each, as Starlette's Headers.get reads them.
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                tokens += 1
            elif name == b"accept":
                accept = value if accept is None else accept
            elif name == b"content-type":
                content_type = value if content_type is None else content_type
            elif name == b"if-none-match":
                if_none_match = value if if_none_match is None else if_none_match
            elif name == b"content-encoding":
                if value.strip().lower() != b"identity":
                    return None
            elif name == b"transfer-encoding" and any(
                c.strip().lower() not in (b"", b"chunked") for c in value.split(b",")
            ):
                return None
        if tokens != 1 or authorization is None or len(body) > OFF_LOOP_BYTES:
            return None
        media = negotiation.negotiate(accept.decode("latin-1") if accept is not None else None)
        if media is None:
            return None
        if scope["method"] == "POST":
            if content_type is None or b"application/json" not in content_type:
                return None
            decoded = self._decoded_body(body)
        else:
            decoded = self._decoded_query(scope["query_string"])
        if decoded is None:
            return None
        if isinstance(decoded.query, str):
            sent = self._kept.get((decoded.query, decoded.name))
            if sent is not None and sent[0] is OperationType.SUBSCRIPTION:
                return None  # the view refuses it: no token checked twice
        view = self._view
        identity, _ = await view.identify(authorization.decode("latin-1"))
        if identity is None:
            return None
        document, sha = view.persisted.resolve(
            decoded.query, decoded.extensions, viewer=True, register=True
        )
        if not isinstance(document, str):
            return None
        kind = (document, decoded.name)
        operation = decoded.operation
        if (
            operation is None
            or operation.document is not document
            or operation.document_sha256 != sha
        ):
            operation = decoded.operation = HttpOperation(
                document, sha, decoded.name, decoded.variables
            )
        kept = self._kept.get(kind)
        if kept is None:
            kept = view.kept_operation(operation)
            if kept is None:
                return None  # not kept yet: the view parses and validates it
            if len(self._kept) >= DECODED_BODIES:
                self._kept.clear()
            self._kept[kind] = kept
        kept_type, name = kept
        if kept_type is OperationType.SUBSCRIPTION:
            return None  # the view refuses it (subscriptions need a WebSocket)
        if kept_type is OperationType.MUTATION:
            if scope["method"] != "POST":
                return None  # the view's 405
            return _Kept(operation, decoded.extensions, identity, None, media, name, services, True)
        if view.introspections.get(operation, decoded.canonical) is not None:
            return None
        if not cached_answers.enabled(services):
            return _Kept(operation, decoded.extensions, identity, None, media, name, services)
        if sha is None:
            if document is not decoded.query:
                return None
            sha = decoded.sha256
            if sha is None:
                sha = decoded.sha256 = cached_answers.document_hash(document)
        asked = decoded.asked.get((sha, identity.user_id))
        if asked is None:
            asked = cached_answers.AnswerRequest.of(
                sha, decoded.name, decoded.variables, identity.user_id, canonical=decoded.canonical
            )
            if len(decoded.asked) >= _ASKED_PER_BODY:
                decoded.asked.clear()
            decoded.asked[(sha, identity.user_id)] = asked
        cached = await cached_answers.lookup(services, asked)
        if cached is None:
            return _Kept(operation, decoded.extensions, identity, asked, media, name, services)
        if media == negotiation.GRAPHQL_RESPONSE and b'"errors"' in cached.body:
            return None  # negotiation reads the body: the view's way
        label = view.operation_names.label(name)
        etag = cached.etag
        headers = [
            (b"etag", etag.encode("latin-1")),
            (b"cache-control", _CACHE_CONTROL),
            (b"vary", _VARY),
        ]
        if names_etag(if_none_match.decode("latin-1") if if_none_match is not None else None, etag):
            status, out = 304, b""
            child(RESPONSE_CACHE, label, "not_modified").inc()
        else:
            status, out = 200, cached.body
            child(RESPONSE_CACHE, label, "hit").inc()
            RESPONSE_CACHE_SERVED_BYTES.inc(len(out))
            headers.append((b"content-length", str(len(out)).encode("latin-1")))
            headers.append((b"content-type", media.encode("latin-1")))
        if get_current_span().is_recording():
            # Inside the request's recorded server span (the OpenTelemetry middleware is
            # there whenever tracing is on): its child, as the view's. Not recorded (no
            # tracing, or sampled out by the parent-based sampler): no span, at no cost.
            with tracer.start_as_current_span("graphql") as span:
                describe_answer(span, name, identity.user_id, None, status)
        else:
            describe_answer(None, name, identity.user_id, None, status)
        return status, headers, out

    async def _executed(self, scope: Scope, kept: _Kept) -> Response:
        """``kept`` executed as :meth:`ChorusGraphQL.__call__` executes it after its checks:
        in the ``graphql`` span, through the view's response-cache miss
        (:meth:`~chorus.graphql.endpoint.ChorusGraphQL.answer_missed`) with what is left
        of strawberry's view (:meth:`~chorus.graphql.endpoint.ChorusGraphQL.run_kept_query`),
        the media type negotiated."""
        view = self._view
        request = Request(scope)
        request.state.chorus_operation = kept.name, kept.identity

        async def run(request: Request) -> Response:
            return await view.run_kept_query(
                request, kept.services, kept.identity, kept.operation, kept.extensions
            )

        # No tracer provider: no span (the API's no-op span and its context managers
        # were ~1.5% of a cold read, py-spy).
        traced = tracer.start_as_current_span("graphql") if tracing_enabled() else nullcontext()
        with traced as span:
            response = await view.answer_missed(
                request, kept.services, kept.operation, kept.asked, kept.name, run
            )
            describe_operation(span, request, response)
        if kept.media == negotiation.GRAPHQL_RESPONSE:
            response = negotiation.as_graphql_response(response)
        return response

    def _decoded_body(self, body: bytes) -> _Decoded | None:
        found = self._bodies.get(body)
        if found is not None:
            self._bodies.move_to_end(body)
            return found
        try:
            data = self._view.decode_json(body)
        except (ValueError, RecursionError):
            return None
        return self._keep(self._bodies, body, data)

    def _decoded_query(self, query_string: bytes) -> _Decoded | None:
        found = self._queries.get(query_string)
        if found is not None:
            self._queries.move_to_end(query_string)
            return found
        # Starlette's reading of a query string (QueryParams), each parameter once.
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
        params: dict[str, str] = {}
        for name, value in pairs:
            if name in params and name in GET_PARAMETERS:
                return None
            params.setdefault(name, value)
        data = get_parameters(params)
        if data is None:
            return None
        return self._keep(self._queries, query_string, data)

    @staticmethod
    def _keep(kept: OrderedDict[bytes, _Decoded], key: bytes, data: object) -> _Decoded | None:
        if not isinstance(data, dict):
            return None
        variables, name, extensions = (
            data.get("variables"),
            data.get("operationName"),
            data.get("extensions"),
        )
        if not isinstance(variables, dict | None) or not isinstance(name, str | None):
            return None
        if not isinstance(extensions, dict | None):
            return None
        try:
            decoded = _Decoded(data.get("query"), name, variables, extensions)
        except (TypeError, ValueError):
            return None
        kept[key] = decoded
        while len(kept) > DECODED_BODIES:
            kept.popitem(last=False)
        return decoded


_CACHE_CONTROL = QUERY_CACHE_CONTROL.encode("latin-1")
_VARY = VARY.encode("latin-1")


__all__ = ["DECODED_BODIES", "LeanRoute", "View"]
