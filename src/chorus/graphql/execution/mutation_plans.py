"""A plan of one mutation operation: its root fields run once each, in order, by the plan.

A mutation's root fields have side effects, so a mutation plan cannot be
abandoned and run again as a query's is. Its root fields are run serially,
as graphql-core runs them: each field's resolver is called (through
strawberry's wrapper, which coerces the ``input`` into its Python type) and
awaited, **once**; its payload is then completed by the plan's closures
(:class:`~chorus.graphql.execution.plans.Builder`: attributes read, scalars
coerced, nested resolvers gathered in waves). What each resolver answered
(its value, or what it raised) is recorded as it goes.

When a resolver raised, or the payload's completion met what a plan does
not answer exactly (:class:`~chorus.graphql.execution.plans.Abandon`, a
``None`` in a non-null position, an error below), the run stops and raises
:class:`Replay` with what was recorded: graphql-core then executes the
operation (:mod:`chorus.graphql.execution.planned`), and for a root field
already run it completes the recorded value, or handles the recorded error,
instead of calling the resolver again. So a command is never run twice, and
the answer (data, errors, their paths and order) is graphql-core's.

Two things of the stopped run must not leak into graphql-core's: a root field
the plan had completed is answered as completed (:class:`Completed`: its
payload read before the next command committed, as serial execution reads
it), and what completing the stopped field charged the request's budgets
(history entries, extra cost) is given back first, so it is charged once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLObjectType, OperationType
from graphql.execution.collect_fields import FieldDetailsList, collect_fields
from graphql.pyutils import Path

from chorus.graphql.execution.plans import Builder, Run, Unplannable, close_pending, waves


@dataclass(frozen=True, slots=True)
class Raised:
    """A root resolver raised ``error`` (recorded for graphql-core to report)."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Completed:
    """A root field the plan ran and completed before a later one stopped it: ``data`` is
    its answer, completed before the next command ran, as graphql-core's serial execution
    completes it (completing it again would read what the later commands changed)."""

    data: Any


class Replay(Exception):
    """The plan stopped: graphql-core completes the ``recorded`` root fields (response
    key → the resolver's value, or :class:`Raised`) and executes the others."""

    def __init__(self, recorded: dict[str, Any]) -> None:
        super().__init__("replay the operation on graphql-core")
        self.recorded = recorded


MutationRoot = Callable[[Any, Any], Awaitable[dict[str, Any]]]
"""``(root value, executor) → data``; raises :class:`Replay`. The executor is the planned
one (:mod:`chorus.graphql.execution.planned`): its ``checkpoint`` undoes what completing a
payload charged the request's budgets."""


class MutationBuilder(Builder):
    """Builds the plan of one mutation operation (see the module docstring)."""

    def mutation(self) -> MutationRoot:
        """The operation's root fields, run serially: ``(root value, executor) → data``.

        Raises:
            Unplannable: not a mutation, or something a plan does not cover below.
        """
        operation = self.operation
        if operation.operation is not OperationType.MUTATION or operation.directives:
            raise Unplannable("only mutations without operation directives")
        if any(f.variable_signatures for f in self.fragments.values()):
            raise Unplannable("fragment variables")
        root_type: GraphQLObjectType | None = self.schema.mutation_type
        if root_type is None:
            raise Unplannable("no mutation type")
        grouped, defers, forbidden = collect_fields(
            self.schema, self.fragments, self.variable_values, root_type, operation
        )
        if defers or forbidden:
            raise Unplannable("@defer or @stream")
        steps = []
        for key, details in grouped.items():
            if any(d.defer_usage is not None or d.fragment_variable_values for d in details):
                raise Unplannable("deferred or with fragment variables")
            name = details[0].node.name.value
            field_def = root_type.fields.get(name)
            if field_def is None:  # __typename: graphql-core answers it
                raise Unplannable(f"{name}: not a field of {root_type.name}")
            step = self._step(root_type, key, field_def, details)
            assert step.call is not None  # a root field is never a plain attribute
            steps.append((key, step.call, step.complete))
        type_name = root_type.name

        async def execute_root(root_value: Any, executor: Any) -> dict[str, Any]:
            data: dict[str, Any] = {}
            recorded: dict[str, Any] = {}
            is_awaitable = executor.is_awaitable
            for key, call, complete in steps:
                path = Path(None, key, type_name)
                state = Run(executor, is_awaitable)
                try:
                    value = call(root_value, state, path)
                    if is_awaitable(value):
                        value = await value
                except Exception as error:
                    recorded[key] = Raised(error)
                    raise Replay(recorded) from error
                recorded[key] = value
                undo = executor.checkpoint()
                try:
                    holder = {key: complete(value, state, path)}
                    if state.pending:
                        await waves(holder, state)
                except Exception as error:  # Abandon, or what a resolver below raised
                    close_pending(state)
                    undo()  # graphql-core completes this payload again: charged once
                    raise Replay(recorded) from error
                data[key] = holder[key]
                recorded[key] = Completed(holder[key])
            return data

        return execute_root


def replay_field(
    executor: Any,
    outcome: Any,
    parent_type: GraphQLObjectType,
    field_details_list: FieldDetailsList,
    path: Path,
    position_context: Any,
) -> Any:
    """graphql-core's ``execute_field`` for a root field whose resolver already ran and
    answered ``outcome`` (its value, or :class:`Raised`): the value is completed, or the
    error handled, exactly as ``execute_field`` does after calling the resolver. A field
    the plan completed (:class:`Completed`) is answered as it was completed."""
    field_def = executor.schema.get_field(parent_type, field_details_list[0].node.name.value)
    return_type = field_def.type
    info = executor.build_resolve_info(
        field_def, [d.node for d in field_details_list], parent_type, path
    )
    if isinstance(outcome, Completed):
        return outcome.data
    try:
        if isinstance(outcome, Raised):
            raise outcome.error
        completed = executor.complete_value(
            return_type, field_details_list, info, path, outcome, position_context
        )
    except Exception as raw_error:
        executor.handle_field_error(raw_error, return_type, field_details_list, path)
        return None
    if not executor.is_awaitable(completed):
        return completed

    async def await_completed() -> Any:
        try:
            return await completed
        except Exception as raw_error:
            executor.handle_field_error(raw_error, return_type, field_details_list, path)
            return None

    return await_completed()


__all__ = ["Completed", "MutationBuilder", "MutationRoot", "Raised", "Replay", "replay_field"]
