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

**Closures, and one generated function per object selection.** Each
completion is a closure made once (a leaf's, a list's, an object's). An
object's selection was a loop over its steps too, until a profile of the cold
page (50 entries with media: ~400 fields) put the plan's own walk at ~12% of
the request's CPU (py-spy, ``bench/peers.py``'s ``cold`` row): each selection
is now a function generated from its steps (:func:`_generated_selection`),
which reads attributes and calls resolvers in line, and a standard scalar's
value of exactly its type (a ``str`` for ``String``/``ID``, a ``bool``, an
``int`` within 32 bits) is passed as it is, as graphql-core's serializer would
return it. Lists, objects and every other leaf stay closures: they are few,
and each step stays debuggable.

**A field may bring its own plan** (:func:`field_plan`): a page of entries was
~500 objects built by its resolver (entries, edges, media), then completed
field by field, ~20% of the cold page's CPU. Such a field's factory is given
the field's selection (:data:`Selected`) when the plan is built, and returns
a function that builds the completed value from the rows the resolver reads
(``Playlist.entries``: :mod:`chorus.graphql.schema.common.entry_rows`); a
selection it does not cover is planned as before.

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
import keyword
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from graphql import (
    GraphQLBoolean,
    GraphQLField,
    GraphQLID,
    GraphQLInt,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    GraphQLString,
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
    FIELD_PLAN,
    direct_resolver,
    field_plan_of,
    plain_attribute,
    strawberry_is_type_of,
    uses_variables,
)


class Unplannable(Exception):
    """The operation has something a plan does not cover: graphql-core executes it."""


class Abandon(Exception):
    """A planned run met what only graphql-core can answer exactly (an error, a ``None``
    in a non-null position, a value of another shape): run the request again there."""


At = tuple[Any, str | int, str | None]
"""A response path as graphql-core's :class:`~graphql.pyutils.Path` is one: ``(prev, key,
typename)``. The plan makes plain tuples (a ``NamedTuple``'s ``__new__`` is a Python call,
three per entry of a page) and :func:`_path` turns one into a ``Path`` only where a
resolve info is built."""

Complete = Callable[[Any, "Run", At | None], Any]
"""``(value, run, path) → the completed value``; ``path`` only where a resolver below needs it."""

Selected = tuple[str, tuple[tuple[str, str, "Selected | None"], ...]]
"""An object's selection as a field plan is given it: ``(type name, ((response key, field
name, that field's own selection, ``None`` for a leaf), ...))`` in response order,
fragments merged and ``@skip``/``@include`` folded (graphql-core's ``collect_subfields``)."""

FieldPlan = Callable[[Selected, GraphQLSchema], Callable[[Any, Any, dict[str, Any]], Any] | None]
"""A field plan factory: ``(the field's selection, schema) → answer``, or ``None`` for a
selection it does not cover (the field is then planned as any other). ``answer(source,
context, arguments)`` returns (or gives an awaitable of) the field's completed value, as
graphql-core would complete the resolver's; it raises on anything else (:class:`Abandon`,
or any error: graphql-core then executes the request). ``arguments``: graphql-core's
coerced values by GraphQL name."""


F = TypeVar("F", bound=Callable[..., Any])


def field_plan(factory: FieldPlan) -> Callable[[F], F]:
    """Mark a strawberry resolver as one a plan may answer by ``factory`` (:data:`FieldPlan`).

    For a field whose value a plan would otherwise build as objects, then complete
    field by field (a page of 50 entries: ~500 objects), ``factory`` builds its
    completed value straight from what the resolver reads. graphql-core still calls
    the resolver itself; so does a plan for a selection ``factory`` refuses.
    """

    def mark(function: F) -> F:
        setattr(function, FIELD_PLAN, factory)
        return function

    return mark


@dataclass(slots=True)
class Run:
    """One planned execution: the executor resolvers are given, and the awaitables pending."""

    executor: Any
    """The request's graphql-core executor (its context, variables, resolve infos)."""
    is_awaitable: Callable[[Any], bool]
    pending: list[tuple[dict[str, Any], str, Awaitable[Any], Complete, At | None]] = field(
        default_factory=list
    )
    """``(result, key, awaitable, complete, path)``: ``result[key]`` waits for the awaitable."""


@dataclass(slots=True)
class _Step:
    """One response key of an object's selection."""

    key: str
    attribute: str | None
    """Read with ``getattr`` (strawberry's plain field); else :attr:`call`."""
    call: Callable[[Any, Run, At | None], Any] | None
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
    ) -> tuple[Callable[[Any, Run, At | None], dict[str, Any]], bool]:
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
        needs_path = any(s.needs_path for s in steps)
        return _generated_selection(object_type.name, steps, constants), needs_path

    def _step(
        self,
        parent_type: GraphQLObjectType,
        key: str,
        field_def: GraphQLField,
        details: FieldDetailsList,
    ) -> _Step:
        planned = self._field_plan(field_def, details)
        if planned is not None:
            nullable = not isinstance(field_def.type, GraphQLNonNull)
            return _Step(key, None, planned, _planned_value(nullable), needs_path=False)
        complete, below = self._completion(field_def.type, details)
        attribute = plain_attribute(field_def)
        if attribute is not None:
            if below:  # a resolver below needs this field's path: no attribute shortcut
                return _Step(key, None, _attribute_call(attribute), complete, needs_path=True)
            return _Step(key, attribute, None, complete, needs_path=False)
        return _Step(key, None, self._call(parent_type, field_def, details), complete, True)

    def _field_plan(
        self, field_def: GraphQLField, details: FieldDetailsList
    ) -> Callable[[Any, Run, At | None], Any] | None:
        """The field's own plan (:func:`field_plan`), when it has one for this selection."""
        factory = field_plan_of(field_def)
        if factory is None:
            return None
        selected = self._selected(field_def.type, details)
        if selected is None:
            return None
        answer = factory(selected, self.schema)
        if answer is None:
            return None
        node = details[0].node
        fixed = self._fixed_arguments(field_def, node)

        def call(source: Any, run: Run, path: At | None) -> Any:
            executor = run.executor
            arguments = (
                fixed
                if fixed is not None
                else get_argument_values(field_def, node, executor.variable_values)
            )
            return answer(source, executor.context_value, arguments)

        return call

    def _selected(self, type_: GraphQLOutputType, details: FieldDetailsList) -> Selected | None:
        """The selection of ``details`` on ``type_`` (wrappers unwrapped), or ``None``
        where a field plan cannot be given one: an abstract type, a field with
        arguments below the top, ``@defer``, fragment variables."""
        while isinstance(type_, GraphQLNonNull | GraphQLList):
            type_ = type_.of_type
        if not isinstance(type_, GraphQLObjectType):
            return None
        grouped, defers, forbidden = collect_subfields(
            self.schema, self.fragments, self.variable_values, self.operation, type_, details
        )
        if defers or forbidden:
            return None
        fields: list[tuple[str, str, Selected | None]] = []
        for key, below in grouped.items():
            if any(
                d.defer_usage is not None or d.fragment_variable_values or d.node.arguments
                for d in below
            ):
                return None
            name = below[0].node.name.value
            if name == "__typename":
                fields.append((key, name, None))
                continue
            field_def = type_.fields.get(name)
            if field_def is None:
                return None
            inner = field_def.type
            while isinstance(inner, GraphQLNonNull | GraphQLList):
                inner = inner.of_type
            if is_leaf_type(inner):
                fields.append((key, name, None))
                continue
            sub = self._selected(inner, below)
            if sub is None:
                return None
            fields.append((key, name, sub))
        return type_.name, tuple(fields)

    def _fixed_arguments(self, field_def: GraphQLField, node: Any) -> dict[str, Any] | None:
        """The field's arguments when no variable is among them (coerced once, when the
        plan is built); ``None``: coerced per request.

        Raises:
            Unplannable: an argument that does not coerce (graphql-core reports it, located).
        """
        if not (field_def.args or node.arguments):
            return {}
        if uses_variables(node):
            return None
        try:
            return get_argument_values(field_def, node, self.no_variables)
        except Exception as error:
            raise Unplannable("an argument that does not coerce") from error

    def _call(
        self, parent_type: GraphQLObjectType, field_def: GraphQLField, details: FieldDetailsList
    ) -> Callable[[Any, Run, At | None], Any]:
        """The field's resolver called as graphql-core's ``execute_field`` calls it."""
        resolve = field_def.resolve
        nodes = [d.node for d in details]
        node = nodes[0]
        fixed = self._fixed_arguments(field_def, node)
        direct = direct_resolver(field_def)
        if direct is not None:
            function, make_info, wants_info = direct

            def call_directly(source: Any, run: Run, path: At | None) -> Any:
                arguments = (
                    fixed
                    if fixed is not None
                    else get_argument_values(field_def, node, run.executor.variable_values)
                )
                if not wants_info:
                    return function(source, None, arguments)

                def info() -> Any:
                    raw = run.executor.build_resolve_info(
                        field_def, nodes, parent_type, _path(path)
                    )
                    return make_info(raw)

                return function(source, _LazyInfo(info), arguments)

            return call_directly

        def call(source: Any, run: Run, path: At | None) -> Any:
            executor = run.executor
            info = executor.build_resolve_info(field_def, nodes, parent_type, _path(path))
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
            return _leaf(leaf, nullable), False
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


def _generated_selection(
    type_name: str, steps: list[_Step], constants: dict[str, str]
) -> Callable[[Any, Run, At | None], dict[str, Any]]:
    """An object's selection as one generated function: its steps in line, in key order.

    What it does per step is what the loop over :class:`_Step` would do (an
    attribute read and completed; a call, its value completed at once or left
    pending with its place in the key order kept; ``__typename`` a constant),
    without the loop and the step's attribute reads: on the cold page that
    loop ran ~400 times a request. The source is built from response keys
    and attribute names only through ``repr`` and checked identifiers.
    """
    names: dict[str, Any] = {"type_name": type_name}
    lines = ["def selection(source, run, path):", "    result = {}"]
    for index, step in enumerate(steps):
        key = repr(step.key)
        if step.attribute is None and step.call is None:
            names[f"k{index}"] = constants[step.key]
            lines.append(f"    result[{key}] = k{index}")
            continue
        names[f"c{index}"] = step.complete
        attribute = step.attribute
        if attribute is not None:
            if attribute.isidentifier() and not keyword.iskeyword(attribute):
                read = f"source.{attribute}"
            else:
                names[f"a{index}"] = attribute
                read = f"getattr(source, a{index})"
            as_is = _AS_IS_TEST.get(getattr(step.complete, "as_is", None))  # type: ignore[arg-type]
            if as_is is None:
                lines.append(f"    result[{key}] = c{index}({read}, run, None)")
            else:
                # A standard scalar's value of exactly its type is passed as it is
                # (_leaf's own first test, without the call: ~400 a cold page).
                lines += [
                    f"    value = {read}",
                    f"    result[{key}] = value if {as_is} else c{index}(value, run, None)",
                ]
            continue
        names[f"f{index}"] = step.call
        at = f"(path, {key}, type_name)" if step.needs_path else "None"
        lines += [
            f"    at = {at}",
            f"    value = f{index}(source, run, at)",
            "    if run.is_awaitable(value):",
            f"        result[{key}] = None",
            f"        run.pending.append((result, {key}, value, c{index}, at))",
            "    else:",
            f"        result[{key}] = c{index}(value, run, at)",
        ]
    lines.append("    return result")
    code = compile("\n".join(lines), f"<plan of {type_name}>", "exec")
    exec(code, names)  # source from checked names only (see the docstring)
    return cast(Callable[[Any, Run, At | None], dict[str, Any]], names["selection"])


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


def _path(at: At | None) -> Path | None:
    """``at`` as graphql-core's ``Path`` (each plain tuple of its chain made one)."""
    if at is None or isinstance(at, Path):
        return at
    return Path(_path(at[0]), at[1], at[2])


def _identity(value: Any, run: Run, path: At | None) -> Any:
    return value


def _attribute_call(attribute: str) -> Callable[[Any, Run, At | None], Any]:
    def call(source: Any, run: Run, path: At | None) -> Any:
        return getattr(source, attribute)

    return call


def _leaf(leaf: GraphQLLeafType, nullable: bool) -> Complete:
    coerce = leaf.coerce_output_value
    fast = _AS_IS.get(leaf.name) if leaf is _STANDARD.get(leaf.name) else None

    def complete(value: Any, run: Run, path: At | None) -> Any:
        kind = type(value)
        if kind is fast and (kind is not int or _INT_MIN <= value <= _INT_MAX):
            return value  # what the standard scalar's serializer returns for it
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

    complete.as_is = fast  # type: ignore[attr-defined]  # read by _generated_selection
    return complete


_STANDARD = {t.name: t for t in (GraphQLString, GraphQLID, GraphQLInt, GraphQLBoolean)}
_AS_IS: dict[str, type] = {"String": str, "ID": str, "Int": int, "Boolean": bool}
"""The standard scalars whose serializer returns a value of exactly this type unchanged
(graphql-core's ``serialize_string``, ``serialize_id``, ``serialize_boolean``; an ``int``
within 32 bits for ``serialize_int``)."""
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_AS_IS_TEST: dict[type, str] = {
    str: "type(value) is str",
    bool: "type(value) is bool",
    int: f"type(value) is int and {_INT_MIN} <= value <= {_INT_MAX}",
}
"""A leaf's first test of :func:`_leaf`, as source, by the type it passes as it is."""


def _planned_value(nullable: bool) -> Complete:
    """A field plan's value is completed already: ``None`` only where the type allows it."""

    def complete(value: Any, run: Run, path: At | None) -> Any:
        if value is None and not nullable:
            raise Abandon
        return value

    return complete


def _list(item: Complete, nullable: bool, item_paths: bool) -> Complete:
    def complete(value: Any, run: Run, path: At | None) -> Any:
        if value is None:
            if nullable:
                return None
            raise Abandon
        if not isinstance(value, list | tuple):
            raise Abandon  # graphql-core takes any iterable; the plan, lists only
        if item_paths:
            return [item(v, run, (path, i, None)) for i, v in enumerate(value)]
        return [item(v, run, None) for v in value]

    return complete


def _object(
    selection: Callable[[Any, Run, At | None], dict[str, Any]],
    check: Callable[[Any, Any], bool] | None,
    nullable: bool,
) -> Complete:
    def complete(value: Any, run: Run, path: At | None) -> Any:
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


__all__ = [
    "Abandon",
    "At",
    "Builder",
    "FieldPlan",
    "Run",
    "Selected",
    "Unplannable",
    "close_pending",
    "field_plan",
    "run",
    "waves",
]
