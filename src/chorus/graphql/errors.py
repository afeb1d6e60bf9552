"""Top-level errors: every one gets ``extensions.code``; unexpected ones are masked.

* parse failures → ``GRAPHQL_PARSE_FAILED`` (token limit included);
* validation failures → ``GRAPHQL_VALIDATION_FAILED`` (depth and alias limits included);
* :class:`~chorus.resolvers.errors.RequestError` → its own code and message;
* a :class:`~chorus.domain.errors.DomainError` that ends a subscription
  stream → its ``ErrorCode`` (``FORBIDDEN`` when access was lost);
* anything else → ``INTERNAL_SERVER_ERROR`` with a fixed message: no SQL, no
  stack, no path leaves the server. The original is logged with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from graphql import GraphQLError, GraphQLSyntaxError
from strawberry.extensions import SchemaExtension

from chorus.domain.errors import DomainError
from chorus.resolvers.errors import RequestError

log = logging.getLogger("chorus.graphql")

INTERNAL_MESSAGE = "Internal server error."


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
        code = (error.extensions or {}).get("code") or "GRAPHQL_VALIDATION_FAILED"
    elif isinstance(original, GraphQLError):
        return classify(original)
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


class ErrorPolicy(SchemaExtension):
    """Applies :func:`classify` to every error of every operation."""

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if result is not None and result.errors:
            result.errors = [classify(e) for e in result.errors]
        pre = self.execution_context.pre_execution_errors
        if pre:
            self.execution_context.pre_execution_errors = [classify(e) for e in pre]

    def on_stream_result(self, result: Any) -> Iterator[None]:
        """Each event of a subscription, before it reaches the client."""
        if result.errors:
            result.errors = [classify(e) for e in result.errors]
        yield
