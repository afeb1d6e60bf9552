"""A kept query or mutation executed without strawberry's ``Schema.execute`` around it.

Once a document is kept (it parsed and passed validation,
:mod:`chorus.graphql.guards.documents`) and its operation has a plan
(:mod:`chorus.graphql.execution.planned`), what strawberry adds around the
plan is bookkeeping: an execution context and thirteen extension instances
made per request, four stages of hooks entered and left, a parse and a
validation looked up in the cache, the result converted twice. That was ~10%
of the server's CPU for a kept ``addEntries`` (``bench/writes.py``, py-spy),
against 6% for the plan's own run.

:class:`KeptExecution` runs such an operation itself: it builds the schema's
own executor (``execution_context_class``: variables coerced by graphql-core,
the plan run, graphql-core as the fallback, a mutation's root fields replayed
rather than run again) and applies what each extension of
:func:`~chorus.graphql.schema.build.build_schema` would have done on that
path, in strawberry's order, through the same functions:

* ``OperationMetrics``: the operation's type and name on the request context,
  its time and how it was served counted (:func:`observe_operation`) under the
  label strawberry's run would give it;
* the parse and validation extensions (tokens, shape, viewer, validation
  rules): nothing to do for a document that passed them by this request's rules
  (:meth:`DocumentCache.validated`); the variables' shape is checked per
  request (:func:`variables_object_error`);
* ``QueryCostLimit``: the cost computed and reported (``extensions.cost``,
  :func:`cost_results`), the allowance set;
* ``VersionedFieldsOnly``: the answer marked uncacheable if a field no version
  names is selected;
* ``ErrorPolicy``: every error classified and counted (:class:`Classified`).

It declines (:meth:`KeptExecution.execute` answers ``None``) **before** it has
touched the request, whenever that path is not the one strawberry would take
without a refusal: a document not kept or not passed by this request's
rules, an operation type the method does not allow, a subscription,
variables that do not coerce or are too deep, no viewer, a cost over the
limit, a query budget on (it charges before execution, and a refusal is
strawberry's to give). The caller then calls ``Schema.execute``, which
answers as ever. ``tests/integration/test_lean_route_differential.py``
compares both, byte for byte and counter for counter.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from graphql import DocumentNode, GraphQLError, get_operation_ast
from graphql import ExecutionResult as CoreResult
from graphql.execution import MiddlewareManager
from strawberry.execution import optimized_is_awaitable
from strawberry.schema.schema import Schema
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.utils.await_maybe import await_maybe

from chorus.graphql.execution.cacheable_fields import VersionedFieldsOnly
from chorus.graphql.execution.error_masking import Classified
from chorus.graphql.execution.operation_metrics import (
    OperationNames,
    learned_from,
    observe_operation,
    refused_at_start,
)
from chorus.graphql.guards.cost import OperationCost, operation_cost
from chorus.graphql.guards.cost_limit import cost_results
from chorus.graphql.guards.document_limits import RequestLimits
from chorus.graphql.guards.documents import DocumentCache, parse_options
from chorus.graphql.guards.shape import variables_object_error
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import RequestError

_NO_MIDDLEWARE = MiddlewareManager()
"""What strawberry passes when no extension resolves fields (none of the schema's does)."""


class KeptExecution:
    """Executes kept, planned operations of ``schema`` (see the module docstring).

    Args:
        schema: the schema :func:`~chorus.graphql.schema.build.build_schema` built with
            ``documents``, ``names`` and ``limits``.
        documents: its kept documents.
        names: its operation names (the metrics' label).
        limits: its request limits (tokens, cost).
    """

    def __init__(
        self,
        schema: Schema,
        documents: DocumentCache,
        names: OperationNames,
        limits: RequestLimits,
    ) -> None:
        self._core = schema._schema
        # graphql-core's Executor API (strawberry types it as graphql-core's class).
        self._executor: Any = schema.execution_context_class
        self._documents = documents
        self._names = names
        self._limits = limits
        self._options = parse_options(limits.max_tokens)
        # Strawberry calls each extension's resolve hook per field; none of the schema's
        # has one, and the direct run relies on it.
        self._usable = not any(e._implements_resolve() for e in schema.get_extensions())

    async def execute(
        self,
        query: str,
        variables: dict[str, Any] | None,
        context: RequestContext,
        operation_name: str | None,
        allowed: Iterable[OperationType],
        extensions: dict[str, Any] | None,
    ) -> ExecutionResult | None:
        """What ``Schema.execute`` with these arguments would answer, or ``None`` (nothing
        done) when it declines. Never raises but as ``Schema.execute`` would."""
        started = time.perf_counter()
        if not self._usable:
            return None
        try:
            found = self._taken(query, variables, context, operation_name, allowed, extensions)
        except Exception:  # raised again by Schema.execute, which answers it its way
            return None
        if found is None:
            return None
        kind, name, document, cost, executor = found
        # Taken: from here on, what the extensions do, in their order.
        operation_state = context.operation
        operation_state.served_by = None
        operation_state.type = kind.value
        operation_state.name = name
        context.begin_operation()
        context.reads.budget.cost_allowance = self._limits.max_query_cost - cost.cost
        operation_state.introspection_only = cost.introspection_only
        report: dict[str, Any] = {
            "requestedQueryCost": cost.cost,
            "maximum": self._limits.max_query_cost,
        }
        VersionedFieldsOnly.refuse_unversioned(self._core, query, document, context)
        core: CoreResult | None
        try:
            done = await await_maybe(executor.execute_operation())
            if not isinstance(done, CoreResult):  # incremental results: never for these
                raise TypeError(f"{type(done).__name__} is not one execution result")
            core = done
            data, errors = done.data, done.errors
        except Exception as error:  # as Schema.execute answers what escaped execution
            core = None
            data, errors = None, [_as_graphql_error(error)]
        validated = core is None or not refused_at_start(core.data, core.errors)
        result = ExecutionResult(data=data, errors=errors)
        result.extensions = cost_results(report, context, core)
        if errors:
            once = Classified()
            result.errors = once(errors)
            once.count()
        label = self._names.label(name, learned_from(context) if validated else None)
        observe_operation(
            kind.value, label, operation_state.served_by, time.perf_counter() - started
        )
        return result

    def _taken(
        self,
        query: str,
        variables: dict[str, Any] | None,
        context: RequestContext,
        operation_name: str | None,
        allowed: Iterable[OperationType],
        extensions: dict[str, Any] | None,
    ) -> tuple[OperationType, str | None, DocumentNode, OperationCost, Any] | None:
        """The operation's type, strawberry's name for it, its document, its cost and its
        executor, if it is taken; ``None`` (or an exception) declines. Touches nothing."""
        documents, options = self._documents, self._options
        kept = documents.kept(query, options)
        operation = get_operation_ast(kept, operation_name) if kept is not None else None
        if operation is None:
            return None
        # Strawberry's operation_name: the one sent, else the document's first (here: only)
        # operation's; its validation rules depend on whether there is one.
        name = operation_name or (operation.name.value if operation.name else None)
        document = documents.validated(query, options, name is not None)
        if document is None:
            return None
        kind = OperationType(operation.operation.value)
        if kind is OperationType.SUBSCRIPTION or kind not in allowed:
            return None
        if variables_object_error(variables) is not None:
            return None
        try:
            context.viewer()
        except RequestError:
            return None
        cost = operation_cost(self._core, document, name, variables, self._limits)
        if cost is None or cost.cost > self._limits.max_query_cost:
            return None
        if context.services.query_budget.limited:
            return None
        executor = self._executor.build(
            self._core,
            document,
            None,
            context,
            variables,
            name,
            middleware=_NO_MIDDLEWARE,
            is_awaitable=optimized_is_awaitable,
            operation_extensions=extensions,
        )
        if isinstance(executor, list):
            return None  # the variables did not coerce: strawberry's answer
        return kind, name, document, cost, executor


def _as_graphql_error(error: Exception) -> GraphQLError:
    """Strawberry's ``_coerce_error``: an error that escaped execution, as a GraphQL error."""
    if isinstance(error, GraphQLError):
        return error
    return GraphQLError(str(error), original_error=error)


__all__ = ["KeptExecution"]
