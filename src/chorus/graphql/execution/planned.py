"""Planned execution: a kept query runs by its plan, graphql-core stays the reference.

:func:`planned_executor` makes, per schema, a subclass of the schema's
execution context whose ``execute_operation`` runs the operation's plan
(:mod:`chorus.graphql.execution.plans`) when there is one, and graphql-core's
execution otherwise. A plan is built the first time a **kept** document's
query operation is executed (:class:`PlanStore`: kept with the document in
:class:`~chorus.graphql.guards.documents.DocumentCache`, dropped with it) and
reused by every later request with the same ``@skip``/``@include`` variable
values. Everything before execution (parsing, validation, variables coerced
by graphql-core's ``coerce_variable_values``, the limits, the cost) and after
it (error masking, the response cache, ``ETag``) is the same for both.

A plan run that meets anything it cannot answer exactly is abandoned and the
request executed again by graphql-core (:class:`~chorus.graphql.execution.plans.Abandon`);
so is one that raises. Reads have no side effects: running one twice only
costs time. A kept mutation's plan runs each root resolver once
(:mod:`~chorus.graphql.execution.mutation_plans`); when it stops, graphql-core
executes the operation with the root fields already run replayed
(:func:`~chorus.graphql.execution.mutation_plans.replay_field`: their recorded
value completed, or their recorded error handled), never run again. A
subscription is planned per event (``execute_event``,
:mod:`~chorus.graphql.execution.event_plans`), never as a whole operation.

How each query and mutation was served is noted on the request context
(``Operation.served_by``: ``plan``, ``abandoned``, ``unplanned``) and counted
by :class:`~chorus.graphql.execution.operation_metrics.OperationMetrics` in
``chorus_graphql_planned_total{operation_name, served_by}``.
``CHORUS_COMPILED_EXECUTION=false`` builds no plans (nothing is counted).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol, cast

from graphql import DocumentNode, ExecutionResult, GraphQLSkipDirective, OperationType, visit
from graphql.language import DirectiveNode, VariableNode, Visitor
from graphql.pyutils import Path

from chorus.graphql.execution.event_plans import EventBuilder, event_type
from chorus.graphql.execution.mutation_plans import (
    MutationBuilder,
    MutationRoot,
    Replay,
    replay_field,
)
from chorus.graphql.execution.operation_metrics import OperationNames
from chorus.graphql.execution.plans import Builder, Run, run
from chorus.metrics import PLANNED, child
from chorus.resolvers.context import RequestContext

MAX_DIRECTIVE_VARIABLES = 4
"""Variables in ``@skip``/``@include`` an operation may have and be planned (one plan
per combination of their values: at most 16)."""

QueryRoot = Callable[[Any, Run], dict[str, Any]]
Root = QueryRoot | MutationRoot
Served = Callable[[str], None]
"""Notes how an operation or event was served (``plan``, ``abandoned``)."""


class PlanStore(Protocol):
    """Where the plans of a kept document live (the document cache)."""

    def plans(self, document: DocumentNode) -> dict[Any, Any] | None:
        """The plans of ``document`` if it is kept (it passed validation), else ``None``."""


class _OperationPlans:
    """The plans of one operation: by the values of its ``@skip``/``@include`` variables."""

    __slots__ = ("by_values", "variables")

    def __init__(self, variables: tuple[str, ...]) -> None:
        self.variables = variables
        self.by_values: dict[tuple[bool, ...], Root | None] = {}


_UNPLANNABLE = _OperationPlans(())
"""An operation with too many ``@skip``/``@include`` variables."""


class _DirectiveVariables(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def enter_directive(self, node: DirectiveNode, *_: Any) -> None:
        if node.name.value in (GraphQLSkipDirective.name, "include"):
            for argument in node.arguments or ():
                if isinstance(argument.value, VariableNode):
                    self.names.add(argument.value.name.value)


def _directive_variables(document: DocumentNode) -> tuple[str, ...]:
    finder = _DirectiveVariables()
    visit(document, finder)
    return tuple(sorted(finder.names))


def planned_executor(
    base: type[Any], store: PlanStore, operation_names: OperationNames | None = None
) -> type[Any]:
    """A subclass of the execution context ``base`` that runs kept queries by their plans,
    and subscription events by theirs when ``base`` is a
    :class:`~chorus.graphql.execution.delivery.DeliveryExecutor` (its ``execute_event``).

    Args:
        base: the schema's execution context class (graphql-core's ``Executor`` API).
        store: where a kept document's plans are kept.
        operation_names: the ``operation_name`` label of the events counted.
    """

    class PlannedExecutor(base):  # type: ignore[misc]
        plans = store
        names = operation_names or OperationNames()
        document: DocumentNode | None = None

        @classmethod
        def build(cls, schema: Any, document: DocumentNode, *args: Any, **kwargs: Any) -> Any:
            executor = super().build(schema, document, *args, **kwargs)
            if not isinstance(executor, list):
                executor.document = document
            return executor

        recorded: dict[str, Any] | None = None

        def execute_operation(self, serially: bool | None = None) -> Any:
            kind = self.operation.operation
            if kind is OperationType.SUBSCRIPTION or serially is not None:
                return super().execute_operation(serially)
            root = self._plan()
            if root is None:
                _note(self.context_value, "unplanned")
                return super().execute_operation(serially)
            if kind is OperationType.MUTATION:
                return self._mutate(cast(MutationRoot, root))
            return self._run(cast(QueryRoot, root), self._query_fallback, self._served_query)

        async def _mutate(self, root: MutationRoot) -> ExecutionResult:
            try:
                data = await root(self.root_value, self)
            except Replay as replay:
                _note(self.context_value, "abandoned")
                self.recorded = replay.recorded
                result = super().execute_operation(None)
                return await result if self.is_awaitable(result) else result  # type: ignore[no-any-return]
            _note(self.context_value, "plan")
            return self.build_response(data)  # type: ignore[no-any-return]

        def execute_field(
            self,
            parent_type: Any,
            source: Any,
            field_details_list: Any,
            path: Path,
            position_context: Any,
        ) -> Any:
            recorded = self.recorded
            if recorded is None or path.prev is not None or path.key not in recorded:
                return super().execute_field(
                    parent_type, source, field_details_list, path, position_context
                )
            outcome = recorded.pop(path.key)
            return replay_field(
                self, outcome, parent_type, field_details_list, path, position_context
            )

        def execute_event(self, serially: bool | None = None) -> Any:
            """One subscription event (``DeliveryExecutor.execute_event``),
            by the plan of the operation for the event's type, else by graphql-core."""
            fallback = super().execute_event
            found = event_type(self.schema, self.root_value)
            root = None
            if found is not None and not serially:
                root = self._plan(
                    ("event", found.name),
                    lambda: EventBuilder(
                        self.schema, self.fragments, self.operation, self.variable_values, found
                    ),
                )
            if root is None:
                self._count_event("unplanned")
                return fallback(serially)
            return self._run(cast(QueryRoot, root), lambda: fallback(None), self._count_event)

        def _count_event(self, served_by: str) -> None:
            name = self.operation.name.value if self.operation.name else None
            child(PLANNED, self.names.label(name), served_by).inc()

        def _plan(
            self, kind: Hashable = None, builder: Callable[[], Builder] | None = None
        ) -> Root | None:
            manager = self.middleware_manager
            if self.abort_signal is not None or (manager is not None and manager.middlewares):
                return None
            document = self.document
            kept = self.plans.plans(document) if document is not None else None
            if kept is None:
                return None
            name = self.operation.name.value if self.operation.name else None
            key = name if kind is None else (name, kind)
            found = kept.get(key)
            if found is None:
                assert document is not None
                variables = _directive_variables(document)
                found = kept[key] = (
                    _OperationPlans(variables)
                    if len(variables) <= MAX_DIRECTIVE_VARIABLES
                    else _UNPLANNABLE
                )
            if found is _UNPLANNABLE:
                return None
            coerced = self.variable_values.coerced
            values = tuple(coerced.get(v) for v in found.variables)
            if not all(isinstance(v, bool) for v in values):
                return None
            if values not in found.by_values:
                try:
                    if builder is not None:
                        found.by_values[values] = builder().root()
                    else:
                        built = MutationBuilder(
                            self.schema, self.fragments, self.operation, self.variable_values
                        )
                        found.by_values[values] = (
                            built.mutation()
                            if self.operation.operation is OperationType.MUTATION
                            else built.root()
                        )
                except Exception:  # Unplannable, or a document too deep to walk
                    found.by_values[values] = None
            root: Root | None = found.by_values[values]
            return root

        def checkpoint(self) -> Callable[[], None]:
            """Undoes, on call, what a plan's run charged the request's budgets from now
            (:meth:`~chorus.resolvers.read_source.ReadBudget.checkpoint`): graphql-core
            then runs the fields again and charges them once, as without plans."""
            context = self.context_value
            if isinstance(context, RequestContext):
                return context.reads.budget.checkpoint()
            return _nothing

        def _run(self, root: QueryRoot, fallback: Callable[[], Any], served: Served) -> Any:
            undo = self.checkpoint()
            try:
                data = run(root, self)
            except Exception:  # Abandon, or what a resolver raised
                undo()
                served("abandoned")
                return fallback()
            if not isinstance(data, dict):
                return self._awaited(data, fallback, served, undo)
            served("plan")
            return self.build_response(data)

        async def _awaited(
            self,
            data: Awaitable[dict[str, Any]],
            fallback: Callable[[], Any],
            served: Served,
            undo: Callable[[], None],
        ) -> ExecutionResult:
            try:
                done = await data
            except Exception:
                undo()
                served("abandoned")
                result = fallback()
                return await result if self.is_awaitable(result) else result  # type: ignore[no-any-return]
            served("plan")
            return self.build_response(done)  # type: ignore[no-any-return]

        def _served_query(self, served_by: str) -> None:
            _note(self.context_value, served_by)

        def _query_fallback(self) -> Any:
            """graphql-core executes the operation, which reports what the plan met."""
            return super().execute_operation(None)

    PlannedExecutor.__qualname__ = PlannedExecutor.__name__ = f"Planned{base.__name__}"
    return PlannedExecutor


def _nothing() -> None:
    return None


def _note(context: object, served_by: str) -> None:
    if isinstance(context, RequestContext):
        context.operation.served_by = served_by


__all__ = ["MAX_DIRECTIVE_VARIABLES", "PlanStore", "planned_executor"]
