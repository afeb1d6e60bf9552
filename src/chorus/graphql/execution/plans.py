"""A plan of one query operation: built once per kept document, run instead of graphql-core.

A plan is the operation's selection, with everything graphql-core works out
per request worked out once: fragments merged and ``@skip``/``@include``
folded (by graphql-core's own ``collect_fields``/``collect_subfields``, so the
merge and the order of the response keys are graphql-core's), each field's
response key, how its value is read (an attribute for strawberry's plain
fields; the resolver, called directly when strawberry's wrapper would add
nothing, :mod:`chorus.graphql.execution.field_reads`, else as graphql-core
calls it) and how it is completed (the scalar's ``coerce_output_value``, a
list, an object with strawberry's ``is_type_of``). :func:`run` walks it: no
``Info`` or ``Path`` for a plain field, no ``ExecutionResult`` per field, no
awaiting per field — the awaitables a wave of resolvers returns are gathered
together (DataLoaders still batch), then their values completed, which may
start the next wave.

**Closures, not generated source.** Each completion is a closure made once
(a leaf's ``coerce``, a list's item, an object's steps). On the cold page
(50 entries with media: ~400 fields) completing the tree is a few hundred
microseconds; the request's CPU is in the read transaction, strawberry's
request path and the resolvers, which a generated function would not
remove. Closures keep every step debuggable and the builder short; a
generated function was not worth its ``exec`` until the plan's own time
shows in a profile (``docs/caching.md``, "The cold path").

**What a plan does not cover** (:class:`Unplannable` at build time; graphql-core
runs it): subscriptions (but for one event of a known type:
:mod:`chorus.graphql.execution.event_plans`), introspection (``__schema``,
``__type``), interfaces and unions, ``@defer``/``@stream`` and any directive
but ``@skip``/``@include``, fragment variables, an object type whose
``is_type_of`` is not strawberry's. Mutations:
:mod:`chorus.graphql.execution.mutation_plans`. ``@skip``/``@include`` with a variable
are folded per value: the plan is keyed by those variables' values.

**Nothing a plan answers can differ from graphql-core's answer**: any error,
a ``None`` where the type is non-null, a value of an unexpected shape
(not a list, another object type, a scalar that refuses it) raises
:class:`Abandon`, and the request is executed again by graphql-core
(:mod:`chorus.graphql.execution.planned`), which then reports it exactly.
A query's reads have no side effects, so running one twice is safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from graphql import (
    GraphQLField,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import (
    CollectedFields,
    FieldDetailsList,
    FragmentDetails,
    collect_fields,
    collect_subfields,
)
from graphql.execution.values import VariableValues, get_argument_values
from graphql.pyutils import Path

from chorus.graphql.execution.field_reads import (
    direct_resolver,
    plain_attribute,
    strawberry_is_type_of,
    uses_variables,
)


class Unplannable(Exception):
    """The operation has something a plan does not cover: graphql-core executes it."""


class Abandon(Exception):
    """A planned run met what only graphql-core can answer exactly (an error, a ``None``
    in a non-null position, a value of another shape): run the request again there."""


Complete = Callable[[Any, "Run", Path | None], Any]
"""``(value, run, path) → the completed value``; ``path`` only where a resolver below needs it."""


@dataclass(slots=True)
class Run:
    """One planned execution: the executor resolvers are given, and the awaitables pending."""

    executor: Any
    """The request's graphql-core executor (its context, variables, resolve infos)."""
    is_awaitable: Callable[[Any], bool]
    pending: list[tuple[dict[str, Any], str, Awaitable[Any], Complete, Path | None]] = field(
        default_factory=list
    )
    """``(result, key, awaitable, complete, path)``: ``result[key]`` waits for the awaitable."""


@dataclass(slots=True)
class _Step:
    """One response key of an object's selection."""

    key: str
    attribute: str | None
    """Read with ``getattr`` (strawberry's plain field); else :attr:`call`."""
    call: Callable[[Any, Run, Path | None], Any] | None
    complete: Complete
    needs_path: bool
    """A resolver at or below this step receives a resolve info, which holds a path."""


class Builder:
    """Builds the plan of one operation for one set of ``@skip``/``@include`` values.

    Args:
        schema: graphql-core's schema.
        fragments: the document's fragments (the executor's ``fragments``).
        operation: the operation to plan (a query).
        variable_values: the request's coerced variables; only those in
            ``@skip``/``@include`` shape the plan (its key says which).
    """

    def __init__(
        self,
        schema: GraphQLSchema,
        fragments: dict[str, FragmentDetails],
        operation: OperationDefinitionNode,
        variable_values: VariableValues,
    ) -> None:
        self.schema = schema
        self.fragments = fragments
        self.operation = operation
        self.variable_values = variable_values
        self.no_variables = VariableValues({}, {})

    def root(self) -> Callable[[Any, Run], dict[str, Any]]:
        """The operation's root selection: ``(root value, run) → data``.

        Raises:
            Unplannable: see the module docstring.
        """
        operation = self.operation
        if operation.operation is not OperationType.QUERY or operation.directives:
            raise Unplannable("only queries without operation directives")
        if any(f.variable_signatures for f in self.fragments.values()):
            raise Unplannable("fragment variables")
        root_type = self.schema.query_type
        if root_type is None:
            raise Unplannable("no query type")
        collected = collect_fields(
            self.schema, self.fragments, self.variable_values, root_type, operation
        )
        selection, _ = self._selection(root_type, collected)

        def execute_root(root_value: Any, run: Run) -> dict[str, Any]:
            return selection(root_value, run, None)

        return execute_root

    def _selection(
        self, object_type: GraphQLObjectType, collected: CollectedFields
    ) -> tuple[Callable[[Any, Run, Path | None], dict[str, Any]], bool]:
        grouped, defers, forbidden = collected
        if defers or forbidden:
            raise Unplannable("@defer or @stream")
        steps: list[_Step] = []
        constants: dict[str, str] = {}
        for key, details in grouped.items():
            if any(d.defer_usage is not None or d.fragment_variable_values for d in details):
                raise Unplannable("deferred or with fragment variables")
            name = details[0].node.name.value
            if name == "__typename":
                constants[key] = object_type.name
                steps.append(_Step(key, None, None, _identity, needs_path=False))
                continue
            field_def = object_type.fields.get(name)
            if field_def is None:
                raise Unplannable(f"{name}: not a field of {object_type.name}")
            steps.append(self._step(object_type, key, field_def, details))
        type_name = object_type.name
        needs_path = any(s.needs_path for s in steps)

        def selection(source: Any, run: Run, path: Path | None) -> dict[str, Any]:
            result: dict[str, Any] = {}
            for step in steps:
                key = step.key
                attribute = step.attribute
                if attribute is not None:
                    result[key] = step.complete(getattr(source, attribute), run, None)
                    continue
                call = step.call
                if call is None:
                    result[key] = constants[key]
                    continue
                field_path = Path(path, key, type_name) if step.needs_path else None
                value = call(source, run, field_path)
                if run.is_awaitable(value):
                    result[key] = None  # its place in the key order
                    run.pending.append((result, key, value, step.complete, field_path))
                else:
                    result[key] = step.complete(value, run, field_path)
            return result

        return selection, needs_path

    def _step(
        self,
        parent_type: GraphQLObjectType,
        key: str,
        field_def: GraphQLField,
        details: FieldDetailsList,
    ) -> _Step:
        complete, below = self._completion(field_def.type, details)
        attribute = plain_attribute(field_def)
        if attribute is not None:
            if below:  # a resolver below needs this field's path: no attribute shortcut
                return _Step(key, None, _attribute_call(attribute), complete, needs_path=True)
            return _Step(key, attribute, None, complete, needs_path=False)
        return _Step(key, None, self._call(parent_type, field_def, details), complete, True)

    def _call(
        self, parent_type: GraphQLObjectType, field_def: GraphQLField, details: FieldDetailsList
    ) -> Callable[[Any, Run, Path | None], Any]:
        """The field's resolver called as graphql-core's ``execute_field`` calls it."""
        resolve = field_def.resolve
        nodes = [d.node for d in details]
        node = nodes[0]
        direct = direct_resolver(field_def)
        if direct is not None:
            function, make_info, wants_info = direct

            def call_directly(source: Any, run: Run, path: Path | None) -> Any:
                if not wants_info:
                    return function(source, None)

                def info() -> Any:
                    raw = run.executor.build_resolve_info(field_def, nodes, parent_type, path)
                    return make_info(raw)

                return function(source, _LazyInfo(info))

            return call_directly
        fixed: dict[str, Any] | None = None
        if not (field_def.args or node.arguments):
            fixed = {}
        elif not uses_variables(node):
            try:
                fixed = get_argument_values(field_def, node, self.no_variables)
            except Exception as error:  # graphql-core reports it, located
                raise Unplannable("an argument that does not coerce") from error

        def call(source: Any, run: Run, path: Path | None) -> Any:
            executor = run.executor
            info = executor.build_resolve_info(field_def, nodes, parent_type, path)
            args = (
                fixed
                if fixed is not None
                else get_argument_values(field_def, node, executor.variable_values)
            )
            return (resolve or executor.field_resolver)(source, info, **args)

        return call

    def _completion(
        self, type_: GraphQLOutputType, details: FieldDetailsList
    ) -> tuple[Complete, bool]:
        """How a value of ``type_`` is completed, and whether a resolver below needs paths."""
        nullable = not isinstance(type_, GraphQLNonNull)
        inner = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
        if isinstance(inner, GraphQLList):
            item, below = self._completion(inner.of_type, details)
            return _list(item, nullable, below), below
        if is_leaf_type(inner):
            leaf: GraphQLLeafType = inner
            return _leaf(leaf.coerce_output_value, nullable), False
        if not isinstance(inner, GraphQLObjectType):
            raise Unplannable(f"{inner}: an abstract type")
        check = inner.is_type_of
        if check is not None and not strawberry_is_type_of(check):
            raise Unplannable(f"{inner.name}: an is_type_of of its own")
        collected = collect_subfields(
            self.schema, self.fragments, self.variable_values, self.operation, inner, details
        )
        selection, below = self._selection(inner, collected)
        return _object(selection, cast(Callable[[Any, Any], bool] | None, check), nullable), below


class _LazyInfo:
    """A resolver's strawberry ``Info``, made on its first use.

    A resolver may take ``info`` and not need it: ``PlaylistEntry.media``
    returns the media its page fetched, and reads ``info`` only to load one
    that was not (50 entries a page, each a resolve info and an ``Info``).
    Every attribute is the real ``Info``'s, made once when first read.
    """

    __slots__ = ("_info", "_make")

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._info: Any = None

    def __getattr__(self, name: str) -> Any:
        info = self._info
        if info is None:
            info = self._info = self._make()
        return getattr(info, name)


def _identity(value: Any, run: Run, path: Path | None) -> Any:
    return value


def _attribute_call(attribute: str) -> Callable[[Any, Run, Path | None], Any]:
    def call(source: Any, run: Run, path: Path | None) -> Any:
        return getattr(source, attribute)

    return call


def _leaf(coerce: Callable[[Any], Any], nullable: bool) -> Complete:
    def complete(value: Any, run: Run, path: Path | None) -> Any:
        if value is None:
            if nullable:
                return None
            raise Abandon
        if isinstance(value, Exception):
            raise Abandon
        coerced = coerce(value)
        if coerced is None or coerced is Undefined:
            raise Abandon
        return coerced

    return complete


def _list(item: Complete, nullable: bool, item_paths: bool) -> Complete:
    def complete(value: Any, run: Run, path: Path | None) -> Any:
        if value is None:
            if nullable:
                return None
            raise Abandon
        if not isinstance(value, list | tuple):
            raise Abandon  # graphql-core takes any iterable; the plan, lists only
        if item_paths:
            return [item(v, run, Path(path, i, None)) for i, v in enumerate(value)]
        return [item(v, run, None) for v in value]

    return complete


def _object(
    selection: Callable[[Any, Run, Path | None], dict[str, Any]],
    check: Callable[[Any, Any], bool] | None,
    nullable: bool,
) -> Complete:
    def complete(value: Any, run: Run, path: Path | None) -> Any:
        if value is None:
            if nullable:
                return None
            raise Abandon
        if check is not None and not check(value, None):  # strawberry's: an isinstance
            raise Abandon
        return selection(value, run, path)

    return complete


def run(
    root: Callable[[Any, Run], dict[str, Any]], executor: Any
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """The data of ``executor``'s operation, by its plan ``root``: at once when no
    resolver returned an awaitable, else an awaitable of it.

    Raises:
        Abandon: the plan cannot answer exactly; so may any error a resolver raised
            (at once, or from the awaitable).
    """
    state = Run(executor, executor.is_awaitable)
    try:
        data = root(executor.root_value, state)
    except BaseException:
        close_pending(state)
        raise
    return waves(data, state) if state.pending else data


async def waves(data: dict[str, Any], state: Run) -> dict[str, Any]:
    """Await each wave of pending values together, complete them, until none is left."""
    try:
        while state.pending:
            wave, state.pending = state.pending, []
            values: list[Any]
            if len(wave) == 1:
                try:
                    values = [await wave[0][2]]
                except Exception as error:
                    values = [error]
            else:
                values = await asyncio.gather(*(w[2] for w in wave), return_exceptions=True)
            for (result, key, _, complete, path), value in zip(wave, values, strict=True):
                if isinstance(value, BaseException):
                    raise Abandon from value
                result[key] = complete(value, state, path)
        return data
    finally:
        close_pending(state)


def close_pending(state: Run) -> None:
    """Close the pending awaitables never started (no "never awaited" warning)."""
    for _, _, awaitable, _, _ in state.pending:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()  # never started: no "never awaited" warning
    state.pending = []


__all__ = ["Abandon", "Builder", "Run", "Unplannable", "close_pending", "run", "waves"]
