"""The query cost limit: an operation over ``max_query_cost`` is refused, the rest charged.

The cost is :func:`~chorus.graphql.guards.cost.operation_cost`'s, computed
when execution starts and memoised per document and variables; the viewer's
budget per minute (``CHORUS_QUERY_COST_PER_MINUTE``) is charged with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from graphql import ExecutionResult, GraphQLError, get_operation_ast
from graphql.execution.values import get_variable_values
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from chorus.graphql.execution.result_shape import is_request_error
from chorus.graphql.guards.cost import OperationCost, operation_cost
from chorus.graphql.guards.document_limits import RequestLimits
from chorus.resolvers.context import RequestContext


class QueryCostLimit(SchemaExtension):
    """Refuses an operation over the cost limit or the viewer's budget; reports its cost.

    Runs when execution starts (validation passed, variables known):
    over ``max_query_cost`` → ``GRAPHQL_VALIDATION_FAILED``; over what is
    left of the viewer's budget (``CHORUS_QUERY_COST_PER_MINUTE``, when
    set) → ``RATE_LIMITED`` with ``retryAfterMs`` (when the bucket will hold the
    cost), nothing charged. Either way nothing executes. A subscription is
    refused the same way (its ``error`` message) and charged once, as it starts.
    A mutation is charged too but never refused here (edits spend
    ``CHORUS_RATE_LIMIT_PER_MINUTE``): over the budget, its payload's
    ``playlist`` is refused with ``RATE_LIMITED`` and the edit still runs.
    The response's ``extensions.cost`` says ``requestedQueryCost``,
    ``actualQueryCost`` (with what versions read held beyond the estimate)
    and ``maximum``, plus ``throttleStatus`` when the budget is on.
    """

    def __init__(self, limits: RequestLimits) -> None:
        self.limits = limits
        self.report: dict[str, Any] | None = None

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        if isinstance(context.context, RequestContext):
            context.context.begin_operation()
        document = context.graphql_document
        if document is not None:
            found = operation_cost(
                context.schema._schema,
                document,
                context.operation_name,
                context.variables,
                self.limits,
            )
            if context.operation_type is OperationType.SUBSCRIPTION:
                # Over the limit, or over the viewer's budget (charged once, as it starts):
                # strawberry sends an error raised here as the stream's one result (the
                # subscription's ``error`` message).
                refused = self._refusal(found) if found is not None else None
                # No extensions.cost on a stream's events: each is sent as rendered once
                # for its delivery group (graphql/execution/delivery.py).
                self.report = None
                if refused is not None:
                    raise refused
            else:
                refusal = self._refusal(found) if found is not None else None
                if refusal is not None:
                    context.result = ExecutionResult(data=None, errors=[refusal])
                elif found is not None and isinstance(context.context, RequestContext):
                    allowance = self.limits.max_query_cost - found.cost
                    context.context.reads.budget.cost_allowance = allowance
                    context.context.operation.introspection_only = found.introspection_only
        yield

    def _variables_coerce(self) -> bool:
        """Whether the request's variables coerce to the operation's types. Asked only before
        a refusal or a charge: variables that do not coerce run nothing, and graphql-core
        answers them ``BAD_USER_INPUT`` whatever the cost (the cost counted what they were
        sent as, a string for a page size at the default page size)."""
        context = self.execution_context
        document = context.graphql_document
        operation = get_operation_ast(document, context.operation_name) if document else None
        if operation is None:
            return True
        coerced = get_variable_values(
            context.schema._schema,
            operation.variable_definitions or (),
            context.variables or {},
            max_errors=1,
        )
        return not isinstance(coerced, list)

    def _over(self, cost: int) -> GraphQLError:
        return GraphQLError(
            f"the query costs {cost}; the limit is {self.limits.max_query_cost} "
            "(ask for smaller pages or fewer fields)",
            extensions={"code": "GRAPHQL_VALIDATION_FAILED"},
        )

    def _refusal(self, found: OperationCost) -> GraphQLError | None:
        cost, maximum = found.cost, self.limits.max_query_cost
        self.report = {"requestedQueryCost": cost, "maximum": maximum}
        if cost > maximum:
            return self._over(cost) if self._variables_coerce() else None
        request = self.execution_context.context
        if not isinstance(request, RequestContext) or request.identity.viewer_id is None:
            return None
        budget, viewer = request.services.query_budget, request.identity.viewer_id
        if not budget.limited or not self._variables_coerce():
            return None
        allowed = found.introspection_only or budget.allow(viewer, cost)
        available = budget.available(viewer)
        self.report["throttleStatus"] = {
            "maximumAvailable": budget.per_minute,
            "currentlyAvailable": int(available),
            "restoreRate": budget.per_minute / 60,
        }
        if self.execution_context.operation_type is OperationType.MUTATION:
            # Edits have their own budget (CHORUS_RATE_LIMIT_PER_MINUTE), which a
            # retry of a committed edit does not spend: refusing it here would
            # refuse the retry that learns whether it committed. What its
            # payload reads is a query, though: over budget, ``playlist`` is refused.
            if allowed and not found.introspection_only:
                request.reads.budget.query_cost = cost
            request.reads.budget.payload_retry_after_ms = (
                None if allowed else budget.retry_after_ms(viewer, cost)
            )
            return None
        if allowed:
            if not found.introspection_only:
                request.reads.budget.query_cost = cost
            return None
        return GraphQLError(
            f"the query costs {cost}, over the {int(available)} left of the budget of "
            f"{budget.per_minute} a minute; retry later",
            # As the mutation limit's userError says it; HTTP's Retry-After from it
            # (graphql/http/negotiation.py).
            extensions={
                "code": "RATE_LIMITED",
                "retryAfterMs": budget.retry_after_ms(viewer, cost),
            },
        )

    def get_results(self) -> dict[str, Any]:
        if self.report is None:
            return {}
        return cost_results(
            self.report, self.execution_context.context, self.execution_context.result
        )


def cost_results(report: dict[str, Any], request: object, result: object) -> dict[str, Any]:
    """The response's ``extensions`` for an operation whose cost ``report`` is
    ``{"requestedQueryCost", "maximum"}`` (and ``throttleStatus``), once ``result`` (its
    execution result) is known: ``actualQueryCost`` added when it ran and was charged."""
    if (
        isinstance(request, RequestContext)
        and request.reads.budget.cost_allowance is not None
        # Nothing ran when its variables did not coerce: nothing to report.
        and not is_request_error(result)
        # An edit over the budget: its payload's reads were refused, nothing charged.
        and not request.reads.budget.payload_reads_refused
    ):
        # What it took as it ran: the versions it read may have held more
        # entries than the requested cost counts them at.
        report["actualQueryCost"] = report["requestedQueryCost"] + request.reads.budget.extra_cost
    return {"cost": report}
