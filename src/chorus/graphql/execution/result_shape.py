"""Request errors and field errors: which answers carry a ``data`` entry.

The GraphQL specification (§7.1.1, "Response Format") tells the two apart:

* a **request error** is raised before execution begins — the document does
  not parse or validate, a variable does not coerce, the operation cannot
  be chosen (two anonymous ones, an unknown ``operationName``), a refusal
  before validation (no viewer, the cost limit). Its answer has **no**
  ``data`` entry;
* a **field error** is raised while executing a field (an argument that
  does not coerce inside execution included: a nullable variable given
  ``null`` where an input field is non-null). Its answer has ``data``,
  ``null`` when the error reached the root; each such error has a ``path``
  (§7.1.2: an error associated with a field must say which).

So the answer of an executed operation whose ``data`` is null is told from
a request error by its errors: a field error always has a ``path``, a
request error never does. Strawberry's :class:`PreExecutionError` is a
request error whatever it holds.

Used by HTTP (:meth:`chorus.graphql.endpoint.ChorusGraphQL.process_result`,
and the status codes of :mod:`chorus.graphql.http.negotiation`) and by
``graphql-transport-ws`` (:mod:`chorus.graphql.websocket.handler`: a request
error is the ``error`` message, an event's field errors a ``next``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphql import GraphQLError
from strawberry.types.execution import PreExecutionError


def is_request_error(result: Any) -> bool:
    """Whether ``result`` (an execution result) answers a request that was never executed.

    True for a :class:`PreExecutionError`, and for a result with no ``data``
    whose errors all lack a ``path``; false when there are no errors.
    """
    errors: Sequence[GraphQLError] | None = getattr(result, "errors", None)
    if not errors:
        return False
    if isinstance(result, PreExecutionError):
        return True
    return getattr(result, "data", None) is None and not any(e.path for e in errors)


__all__ = ["is_request_error"]
