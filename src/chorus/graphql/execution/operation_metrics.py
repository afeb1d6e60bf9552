"""Operation metrics: latency of queries and mutations, a count of subscriptions.

Every query and mutation is timed from the start of the operation (parse,
validation and execution, on HTTP and WebSocket alike) into
``chorus_graphql_request_seconds{operation_type, operation_name}``.
A subscription lives as long as its client wants, so it is counted
(``chorus_graphql_subscriptions_total``) when it starts, never timed.

Operation names are chosen by clients, so a name becomes a label only when
a client cannot mint it at will (:class:`OperationNames`): it is configured
(``CHORUS_METRICS_OPERATION_NAMES``), or it was first sent by an
authenticated caller in an operation that passed validation — at most
:data:`MAX_OPERATION_NAMES_PER_USER` names learned from one user and
:data:`MAX_OPERATION_NAMES` in all, per process. Any other name is
``other``; an operation without a name is ``anonymous``, and a request
whose operation cannot be determined (a syntax error, an unknown
``operationName``) is ``operation_type="unknown"``.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator

from graphql import GraphQLError, OperationDefinitionNode
from opentelemetry.trace import Span
from starlette.requests import Request
from starlette.responses import Response
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from chorus.logs import note_access
from chorus.metrics import PLANNED, REQUEST_SECONDS, SUBSCRIPTIONS, child
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import RequestError

MAX_OPERATION_NAMES = 200
"""Names learned from callers that get their own series, per process (configured ones aside)."""

MAX_OPERATION_NAMES_PER_USER = 20
"""Names one user may add to the labels, per process."""

ANONYMOUS = "anonymous"
OTHER = "other"
UNKNOWN = "unknown"

OPERATION_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]{0,99}")
"""A GraphQL name of at most 100 characters: what may become a label."""

_REFUSED = frozenset({"GRAPHQL_VALIDATION_FAILED", "RATE_LIMITED"})
"""Codes of an operation refused when execution starts (its cost): not learned from."""


class OperationNames:
    """The operation-name label: configured names, plus names learned from authenticated callers.

    Args:
        always: names that always have their own series (each a GraphQL name).
        limit: learned names, in all.
        per_user: learned names per user.

    A learned name keeps its series for the life of the process, whoever
    sends it later; the sets never shrink.
    """

    def __init__(
        self,
        always: Iterable[str] = (),
        *,
        limit: int = MAX_OPERATION_NAMES,
        per_user: int = MAX_OPERATION_NAMES_PER_USER,
    ) -> None:
        self._always = frozenset(always)
        self._limit = limit
        self._per_user = per_user
        self._learned: set[str] = set()
        self._taught: Counter[str] = Counter()

    def label(self, name: str | None, learned_from: str | None = None) -> str:
        """The label of an operation named ``name``.

        Args:
            name: the operation's name, as the client sent it.
            learned_from: the authenticated user whose operation passed
                validation, who may add ``name`` to the labels; ``None``
                (no token, or a refused operation): nothing is learned.
        """
        if not name:
            return ANONYMOUS
        if name in self._always or name in self._learned:
            return name
        if (
            learned_from is None
            or len(self._learned) >= self._limit
            or self._taught[learned_from] >= self._per_user
            or not OPERATION_NAME.fullmatch(name)
        ):
            return OTHER
        self._learned.add(name)
        self._taught[learned_from] += 1
        return name


class OperationMetrics(SchemaExtension):
    """Times each query and mutation; counts each subscription as it starts.

    Register it first among the schema's extensions so the time covers the
    others (parsing, validation, limits).
    """

    def __init__(self, names: OperationNames) -> None:
        self.names = names
        self.validated = False

    def on_operation(self) -> Iterator[None]:
        started = time.perf_counter()
        context = self.execution_context.context
        if isinstance(context, RequestContext):  # a WebSocket's context outlives an operation
            context.operation.served_by = None
        try:
            yield
        finally:  # an operation strawberry refuses by raising is timed too
            self._observe(time.perf_counter() - started)

    def _observe(self, seconds: float) -> None:
        operation_type = self._operation_type()
        if operation_type == OperationType.SUBSCRIPTION.value:
            return
        # UNKNOWN: the requested name is not even in the document.
        name = UNKNOWN if operation_type == UNKNOWN else self._label()
        context = self.execution_context.context
        served_by = context.operation.served_by if isinstance(context, RequestContext) else None
        observe_operation(operation_type, name, served_by, seconds)

    def on_execute(self) -> Iterator[None]:
        # Strawberry executes only what parsed and passed validation.
        self.validated = not self.execution_context.pre_execution_errors
        context = self.execution_context.context
        if isinstance(context, RequestContext):
            # The HTTP view caches and tags only query answers (graphql/http/caching.py).
            context.operation.type = self._operation_type()
            context.operation.name = self.execution_context.operation_name
        if self._operation_type() == OperationType.SUBSCRIPTION.value:
            child(SUBSCRIPTIONS, self._label()).inc()
        yield
        result = self.execution_context.result
        if result is not None and refused_at_start(result.data, result.errors):
            self.validated = False  # over the cost limit or budget: nothing ran

    def _label(self) -> str:
        context = self.execution_context
        return self.names.label(context.operation_name, self._learned_from())

    def _learned_from(self) -> str | None:
        request = self.execution_context.context
        if not self.validated or not isinstance(request, RequestContext):
            return None
        return learned_from(request)

    def _operation_type(self) -> str:
        if self._none_chosen():
            return UNKNOWN
        try:
            return self.execution_context.operation_type.value
        except RuntimeError:  # no document, or no operation of the requested name
            return UNKNOWN

    def _none_chosen(self) -> bool:
        """Several operations and none named: the request chose none (it is refused).

        Strawberry's ``operation_name`` is then the document's first operation's, which
        would label the refusal with a name that did not run."""
        context = self.execution_context
        document = context.graphql_document
        if document is None or getattr(context, "_provided_operation_name", None) is not None:
            return False
        return sum(isinstance(d, OperationDefinitionNode) for d in document.definitions) > 1


def observe_operation(
    operation_type: str, label: str, served_by: str | None, seconds: float
) -> None:
    """Count one query or mutation (``operation_type``, its ``label``) that took ``seconds``,
    in ``chorus_graphql_request_seconds``, and how it was served (``plan``, ``abandoned``,
    ``unplanned``; ``None``: not counted) in ``chorus_graphql_planned_total``."""
    child(REQUEST_SECONDS, operation_type, label).observe(seconds)
    if served_by is not None:
        child(PLANNED, label, served_by).inc()


def learned_from(request: RequestContext) -> str | None:
    """The viewer an operation name may be learned from (:class:`OperationNames`) once the
    operation passed validation: ``None`` without a (valid) token."""
    try:
        return request.viewer()
    except RequestError:  # no (valid) token, or none could be checked
        return None


def refused_at_start(data: object, errors: Iterable[GraphQLError] | None) -> bool:
    """Whether a result (``data``, ``errors``) is a refusal when execution started (over
    the cost limit or budget): nothing ran, so its name is not learned."""
    return data is None and any(map(_refused, errors or ()))


def _refused(error: GraphQLError) -> bool:
    return (error.extensions or {}).get("code") in _REFUSED


__all__ = [
    "MAX_OPERATION_NAMES",
    "MAX_OPERATION_NAMES_PER_USER",
    "OPERATION_NAME",
    "OperationMetrics",
    "OperationNames",
    "describe_answer",
    "learned_from",
    "observe_operation",
    "refused_at_start",
]


MAX_SPAN_NAME = 100
"""The longest operation name put on a span (characters; clients choose names)."""


def describe_operation(span: Span | None, request: Request, response: Response) -> None:
    """Note an HTTP operation for its access line and name its span ``<type> <name>``.

    The name is the executed operation's (sent, or the document's only one),
    else the one sent (an answer from the response cache, a refused request),
    at most :data:`MAX_SPAN_NAME` characters on the span. The span gets
    OpenTelemetry's ``graphql.operation.name`` and ``graphql.operation.type``
    (``query``, ``mutation``; missing when the request never reached an
    operation) and the response's status.
    """
    sent, identity = getattr(request.state, "chorus_operation", (None, None))
    context: RequestContext | None = getattr(request.state, "chorus_context", None)
    user = identity.user_id if identity is not None else None
    describe_answer(span, sent, user, context, response.status_code)


def describe_answer(
    span: Span | None,
    sent: str | None,
    user: str | None,
    context: RequestContext | None,
    status: int,
) -> None:
    """:func:`describe_operation` of an answer whose parts are known: ``sent`` the
    operation name sent, ``user`` the viewer, ``context`` the executed operation's
    (``None``: none ran), ``status`` the HTTP status; ``span`` ``None``: tracing is off."""
    name = (context.operation.name if context is not None else None) or sent
    note_access(user, name)
    if span is None or not span.is_recording():
        return
    kind = context.operation.type if context is not None else None
    if kind is None and status in (200, 304) and sent is not None:
        kind = "query"  # answered from the response cache, which keeps only queries
    name = (name or "")[:MAX_SPAN_NAME]
    span.update_name(" ".join(part for part in (kind or "graphql", name) if part))
    if name:
        span.set_attribute("graphql.operation.name", name)
    if kind is not None:
        span.set_attribute("graphql.operation.type", kind)
    span.set_attribute("http.response.status_code", status)
