"""Operation metrics: latency of queries and mutations, a count of subscriptions.

Every query and mutation is timed from the start of the operation (parse,
validation and execution, on HTTP and WebSocket alike) into
``chorus_graphql_request_seconds{operation_type, operation_name}``.
A subscription lives as long as its client wants, so it is counted
(``chorus_graphql_subscriptions_total``) when it starts, never timed.

Operation names are chosen by clients, so the label is bounded: the first
:data:`MAX_OPERATION_NAMES` distinct names keep their own series, later
ones share ``other``; an operation without a name is ``anonymous``, and a
request whose operation cannot be determined (a syntax error, an unknown
``operationName``) is ``operation_type="unknown"``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from chorus.metrics import REQUEST_SECONDS, SUBSCRIPTIONS
from chorus.resolvers.context import RequestContext

MAX_OPERATION_NAMES = 200
"""Distinct operation names with their own series, per process."""

ANONYMOUS = "anonymous"
OTHER = "other"
UNKNOWN = "unknown"

_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]{0,99}")


class OperationNames:
    """The operation-name label: client-chosen names, at most ``limit`` of them.

    A name counts once it is seen; the set never shrinks, so a name keeps
    its series for the life of the process.
    """

    def __init__(self, limit: int = MAX_OPERATION_NAMES) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def label(self, name: str | None) -> str:
        if not name:
            return ANONYMOUS
        if name in self._seen:
            return name
        if len(self._seen) >= self._limit or not _NAME.fullmatch(name):
            return OTHER
        self._seen.add(name)
        return name


_names = OperationNames()


def operation_label(name: str | None) -> str:
    """The bounded ``operation_name`` label of this process's metrics for ``name``."""
    return _names.label(name)


class OperationMetrics(SchemaExtension):
    """Times each query and mutation; counts each subscription as it starts.

    Register it first among the schema's extensions so the time covers the
    others (parsing, validation, limits).
    """

    def on_operation(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:  # an operation strawberry refuses by raising is timed too
            self._observe(time.perf_counter() - started)

    def _observe(self, seconds: float) -> None:
        operation_type = self._operation_type()
        if operation_type == OperationType.SUBSCRIPTION.value:
            return
        if operation_type == UNKNOWN:  # the requested name is not even in the document
            name = UNKNOWN
        else:
            name = _names.label(self.execution_context.operation_name)
        REQUEST_SECONDS.labels(operation_type, name).observe(seconds)

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context.context
        if isinstance(context, RequestContext):
            # The HTTP view caches and tags only query answers (graphql/caching.py).
            context.operation_type = self._operation_type()
        if self._operation_type() == OperationType.SUBSCRIPTION.value:
            SUBSCRIPTIONS.labels(_names.label(self.execution_context.operation_name)).inc()
        yield

    def _operation_type(self) -> str:
        try:
            return self.execution_context.operation_type.value
        except RuntimeError:  # no document, or no operation of the requested name
            return UNKNOWN


__all__ = ["MAX_OPERATION_NAMES", "OperationMetrics", "OperationNames"]
