"""Top-level errors: every one gets ``extensions.code``; unexpected ones are masked.

* parse failures → ``GRAPHQL_PARSE_FAILED`` (token limit included);
* validation failures → ``GRAPHQL_VALIDATION_FAILED`` (shape, depth, alias and cost
  limits included; the cost budget's refusal keeps its own ``RATE_LIMITED``);
* a variable whose value does not coerce (a request error, coded by
  :meth:`~chorus.graphql.execution.executor.ChorusExecutionContext.build`) and an
  argument or directive argument that does not coerce from the request's values
  during execution (a field error) → ``BAD_USER_INPUT``: the input is wrong, the
  document is valid;
* :class:`~chorus.resolvers.request_errors.RequestError` → its own code and message;
* no operation of the name asked (a WebSocket ``subscribe``; HTTP answers
  400 before execution) → ``BAD_REQUEST``;
* :class:`~chorus.db.engine.DatabaseUnavailable` (the database is away) →
  ``SERVICE_UNAVAILABLE`` with a fixed message; the cause is logged, one line;
* a :class:`~chorus.domain.errors.DomainError` that ends a subscription
  stream → its ``ErrorCode`` (``FORBIDDEN`` when access was lost);
* anything else → ``INTERNAL_SERVER_ERROR`` with a fixed message: no SQL, no
  stack, no path leaves the server. The original is logged with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from graphql import GraphQLError, GraphQLSyntaxError
from strawberry.extensions import SchemaExtension
from strawberry.schema.exceptions import CannotGetOperationTypeError

from chorus.db.engine import DatabaseUnavailable
from chorus.domain.errors import DomainError
from chorus.metrics import count_error
from chorus.resolvers.request_errors import RequestError, ServiceUnavailable

log = logging.getLogger("chorus.graphql")

INTERNAL_MESSAGE = "Internal server error."
DATABASE_UNAVAILABLE_MESSAGE = (
    "The database is not available; try again shortly "
    "(retry a mutation with the same operationId: it commits at most once)."
)


def classify(error: GraphQLError) -> GraphQLError:
    """``error`` with ``extensions.code`` set, masked when unexpected."""
    original = error.original_error
    if isinstance(error, GraphQLSyntaxError):
        code = "GRAPHQL_PARSE_FAILED"
    elif isinstance(original, RequestError):
        code = original.code
    elif isinstance(original, DomainError):
        code = original.code.value  # a stream that failed: FORBIDDEN, NOT_FOUND, …
    elif original is None:
        code = (error.extensions or {}).get("code") or (
            "BAD_USER_INPUT"
            if _argument_coercion(error, error.path)
            else "GRAPHQL_VALIDATION_FAILED"
        )
    elif isinstance(original, GraphQLError):
        inner = classify(original)
        if original.original_error is not None:
            return inner
        # A wrapper saying where (graphql-core's "Variable '$id' has invalid
        # value: …" around "Expected value of non-null type 'ID!' …"; a located
        # field error around an argument's): its message names what, the inner one not.
        extensions = inner.extensions
        if _argument_coercion(original, error.path):
            extensions = {**(extensions or {}), "code": "BAD_USER_INPUT"}
        return GraphQLError(
            error.message.replace("not to be None.", "not to be null."),  # JSON's word
            nodes=error.nodes,
            source=error.source,
            positions=error.positions,
            path=error.path,
            extensions=extensions,
        )
    elif isinstance(original, CannotGetOperationTypeError):
        # No operation of that name (or several and none named): the client's
        # request is wrong, as over HTTP, where strawberry answers 400.
        return GraphQLError(original.as_http_error_reason(), extensions={"code": "BAD_REQUEST"})
    elif isinstance(original, DatabaseUnavailable):
        log.warning("database unavailable at %s: %s", error.path, original)
        return GraphQLError(
            DATABASE_UNAVAILABLE_MESSAGE,
            nodes=error.nodes,
            positions=error.positions,
            path=error.path,
            extensions={"code": ServiceUnavailable.code},
        )
    else:
        log.error("unexpected error at %s", error.path, exc_info=original)
        return GraphQLError(
            INTERNAL_MESSAGE,
            nodes=error.nodes,
            positions=error.positions,
            path=error.path,
            extensions={"code": "INTERNAL_SERVER_ERROR"},
        )
    return GraphQLError(
        error.message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions={**(error.extensions or {}), "code": code},
    )


def bad_user_input(error: GraphQLError) -> None:
    """Code ``error``, and the errors it wraps, ``BAD_USER_INPUT`` (:func:`classify` keeps a
    code already given): for errors whose kind only their maker knows (a variable's
    coercion, :meth:`~chorus.graphql.execution.executor.ChorusExecutionContext.build`)."""
    while isinstance(error, GraphQLError):
        error.extensions = {**(error.extensions or {}), "code": "BAD_USER_INPUT"}
        error = error.original_error  # type: ignore[assignment]


def _argument_coercion(error: GraphQLError, path: object) -> bool:
    """Whether ``error`` is graphql-core's own, raised while executing a field (it has a
    ``path``) because an argument (or a directive's) did not coerce from the request's
    values: the client's input, not the document (validation never gives a path)."""
    return (
        path is not None
        and error.original_error is None
        and not (error.extensions or {}).get("code")
        and error.message.startswith("Argument '")
    )


class ErrorPolicy(SchemaExtension):
    """Applies :func:`classify` to every error of every operation."""

    streamed = False
    """Whether the operation's results went out as a stream (a WebSocket's): each was
    classified and counted as it went (:meth:`on_stream_result`)."""

    def on_operation(self) -> Iterator[None]:
        yield
        if self.streamed:
            # Everything sent was classified, logged and counted on its way; strawberry
            # still holds the last result and its errors (both the classified and the
            # original ones), which would be logged and counted twice more.
            return
        # Strawberry may hold the same errors in both lists: classify (and log) each once.
        once = Classified()
        result = self.execution_context.result
        if result is not None and result.errors:
            result.errors = once(result.errors)
        pre = self.execution_context.pre_execution_errors
        if pre:
            self.execution_context.pre_execution_errors = once(pre)
        once.count()

    def on_stream_result(self, result: Any) -> Iterator[None]:
        """Each result of a stream (a subscription's events, an operation over a WebSocket),
        before it reaches the client."""
        self.streamed = True
        if result.errors:
            result.errors = [classify(e) for e in result.errors]
            _count(result.errors)
        yield


class Classified:
    """:func:`classify` of an operation's errors, each error once however many lists hold
    it (logged once, counted once by :meth:`count`)."""

    def __init__(self) -> None:
        self._done: dict[int, GraphQLError] = {}

    def __call__(self, errors: Iterable[GraphQLError]) -> list[GraphQLError]:
        """``errors`` classified, in order."""
        done = self._done
        out = []
        for error in errors:
            found = done.get(id(error))
            if found is None:
                found = done[id(error)] = classify(error)
            out.append(found)
        return out

    def count(self) -> None:
        """Count each error classified, once, in ``chorus_graphql_errors_total``."""
        _count(self._done.values())


def _count(errors: Iterable[GraphQLError]) -> None:
    """Count each of ``errors`` (classified: each has its code) in ``/metrics``."""
    for error in errors:
        count_error((error.extensions or {}).get("code"))
