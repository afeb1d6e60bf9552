"""A fast path in front of graphql-core's field execution, for plain leaf fields.

A page of 50 entries with their media is some 350 leaf fields (``cursor``,
``id``, ``positionKey``, ``title``, ``artists``…), each an attribute of a
Python object. graphql-core executes every one as a field: a resolve info, an
argument check, strawberry's resolver wrapper, an awaitable check, then the
leaf's completion — the largest part of a cold page's CPU (see
``docs/caching.md``, "The cold path"). :class:`ChorusExecutionContext` reads such a field
directly: the attribute, then the scalar's or enum's ``coerce_output_value``
(the same coercion graphql-core's ``complete_leaf_value`` applies).

The same holds one level up: a plain field whose value is an object
(``edge.node``) or a list of non-null objects (``connection.edges``) is not
resolved through graphql-core either; its sub-fields are collected (by
graphql-core, memoised per request) and executed here, item by item, with
graphql-core's own error handling and null propagation around them.

A field takes the fast path only when all of this holds; otherwise, and
whenever the value is not what the fast path can complete (``None`` for a
non-null field, a value the scalar refuses, an object of another type), it
goes graphql-core's way, which then also reports the error exactly as before:

* strawberry marks its resolver as its default attribute read (no resolver
  of ours, no field extension, no permission class);
* the field has no arguments, no field middleware is installed, and nothing
  is deferred or streamed;
* its type is a scalar or enum, or a list of non-null ones; or an object
  type, or a list of non-null ones, whose ``is_type_of`` (if any) is the one
  strawberry generates (an ``isinstance`` check that needs no resolve info).

The fast path can be switched off (``CHORUS_FAST_FIELD_EXECUTION=false``: a
class whose :attr:`ChorusExecutionContext.fast_fields` is false); graphql-core
then executes every field, the plain twin the fast path is tested against
over the real schema (``tests/integration/test_fast_paths_differential.py``).

The executor is also made collectable by reference counting alone: graphql-core
gives resolvers two bound methods of it (``async_helpers``), a cycle through
which the executor held its request context — the request's DataLoaders and
everything they loaded — until a full collection, rare in a serving process
(``chorus.cli.process.GC_THRESHOLDS``): a feed read of 50 large versions left
some 30 MB behind per read. Here the helpers reach the executor by a weak
reference instead.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from graphql import (
    GraphQLField,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfoHelpers,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path, gather_with_cancel
from strawberry.exceptions import StrawberryInputCoercionError
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter

from chorus.graphql.execution.error_masking import bad_user_input

_SLOW = object()
"""The fast path cannot complete this value: graphql-core does."""


@dataclass(frozen=True, slots=True)
class _Leaf:
    """How to complete one plain leaf field of an object type."""

    attribute: str
    coerce: Callable[[Any], Any]
    nullable: bool
    is_list: bool = False
    """A list of non-null leaves (``artists: [String!]!``)."""

    def complete(self, source: object) -> Any:
        value = getattr(source, self.attribute, _SLOW)
        if value is None:
            return None if self.nullable else _SLOW
        if value is _SLOW:
            return _SLOW
        try:
            if self.is_list:
                if not isinstance(value, list | tuple):
                    return _SLOW
                items = [self.coerce(item) for item in value]
                return _SLOW if any(i is None or i is Undefined for i in items) else items
            coerced = self.coerce(value)
        except Exception:  # graphql-core raises it again, located, on its way
            return _SLOW
        return _SLOW if coerced is None or coerced is Undefined else coerced


@dataclass(frozen=True, slots=True)
class _Object:
    """How to read one plain object-typed field; its sub-fields are executed after."""

    attribute: str
    field_type: GraphQLOutputType
    object_type: GraphQLObjectType
    nullable: bool
    is_list: bool
    check: Callable[[Any, Any], bool] | None
    """Strawberry's ``is_type_of`` (an ``isinstance``; the info it is given is unused)."""

    def value(self, source: object) -> Any:
        """The field's value when the fast path can complete it, else ``_SLOW``."""
        value = getattr(source, self.attribute, _SLOW)
        if value is None:
            return None if self.nullable else _SLOW
        if value is _SLOW:
            return _SLOW
        check = self.check
        if not self.is_list:
            return value if check is None or check(value, None) else _SLOW
        if not isinstance(value, list | tuple):
            return _SLOW
        for item in value:
            if item is None or (check is not None and not check(item, None)):
                return _SLOW
        return value


def _strawberry_check(object_type: GraphQLObjectType) -> tuple[bool, Any]:
    """``(usable, is_type_of)``: usable when there is none or it is strawberry's own."""
    check = object_type.is_type_of
    if check is None:
        return True, None
    return getattr(check, "__module__", None) == _CONVERTER_MODULE, check


_CONVERTER_MODULE = GraphQLCoreConverter.__module__


def _plain_field(field: GraphQLField) -> _Leaf | _Object | None:
    """The fast path of ``field``, or ``None`` when graphql-core must execute it."""
    if field.args or not getattr(field.resolve, "_is_default", False):
        return None
    definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    attribute = getattr(definition, "python_name", None)
    if not isinstance(attribute, str):
        return None
    kind, nullable = field.type, True
    if isinstance(kind, GraphQLNonNull):
        kind, nullable = kind.of_type, False
    is_list = False
    if isinstance(kind, GraphQLList):
        if not isinstance(kind.of_type, GraphQLNonNull):
            return None
        kind, is_list = kind.of_type.of_type, True
    if is_leaf_type(kind):
        leaf: GraphQLLeafType = kind
        return _Leaf(attribute, leaf.coerce_output_value, nullable, is_list=is_list)
    if isinstance(kind, GraphQLObjectType):
        usable, check = _strawberry_check(kind)
        if usable:
            return _Object(attribute, field.type, kind, nullable, is_list, check)
    return None


_plans: dict[tuple[int, str], tuple[GraphQLObjectType, _Leaf | _Object | None]] = {}
"""(id of the object type, field name) → its fast path; the type is kept: its id stays its own."""


def _plan_of(parent_type: GraphQLObjectType, name: str) -> _Leaf | _Object | None:
    key = (id(parent_type), name)
    found = _plans.get(key)
    if found is not None and found[0] is parent_type:
        return found[1]
    field = parent_type.fields.get(name)
    plan = _plain_field(field) if field is not None else None
    _plans[key] = (parent_type, plan)
    return plan


_SETTLING: set[asyncio.Future[list[Any]]] = set()
"""Work tracked after its executor was collected, settling in the background."""


def _weak_helpers(executor: weakref.ref[ChorusExecutionContext]) -> GraphQLResolveInfoHelpers:
    """graphql-core's resolver helpers, reaching ``executor`` without keeping it alive.

    While the operation runs its executor is alive (its coroutines hold it);
    work a resolver tracks after that is settled here as graphql-core would.
    """

    def gather(values: Sequence[Awaitable[Any]]) -> Awaitable[list[Any]]:
        alive = executor()
        if alive is not None:
            return alive.gather_async_work(values)
        return gather_with_cancel(*values)

    def track(values: Sequence[Any]) -> None:
        alive = executor()
        if alive is not None:
            alive.track_async_work(values)
            return
        awaitables = [v for v in values if asyncio.isfuture(v) or asyncio.iscoroutine(v)]
        if awaitables:
            future = asyncio.gather(*awaitables, return_exceptions=True)
            _SETTLING.add(future)
            future.add_done_callback(_SETTLING.discard)

    return GraphQLResolveInfoHelpers(gather=gather, track=track)


class ChorusExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's execution context, with plain fields read directly."""

    fast_fields = True
    """Whether plain fields take the fast path (false: graphql-core executes them all)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Not graphql-core's bound methods: a cycle (module docstring).
        self.async_helpers = _weak_helpers(weakref.ref(self))

    @classmethod
    def build(cls, *args: Any, **kwargs: Any) -> Any:
        """graphql-core's ``build``; a variable whose value does not coerce is the client's
        input (``BAD_USER_INPUT``, as Apollo Server codes it), not a document that failed
        validation: its errors (``Variable '$x' has invalid value: …``) are coded so here,
        where only the variables' coercion gives errors of that form, and so is a
        variable's ``@oneOf`` input with other than one key (strawberry's error)."""
        built = super().build(*args, **kwargs)
        if isinstance(built, list):
            for error in built:
                # strawberry's check of a @oneOf input (its type's out_type) raises out of
                # graphql-core's coercion of the variables, unwrapped: a variable's too.
                if error.message.startswith("Variable '$") or isinstance(
                    error, StrawberryInputCoercionError
                ):
                    bad_user_input(error)
        return built

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        """graphql-core's ``execute_fields``, with the fast path for plain fields."""
        manager = self.middleware_manager
        # Strawberry always sends a manager: is any middleware in it?
        if not self.fast_fields or (manager is not None and manager.middlewares):
            return super().execute_fields(
                parent_type, source_value, path, grouped_field_set, position_context
            )
        results: dict[str, Any] = {}
        is_awaitable = self.is_awaitable
        awaitable_fields: list[str] = []
        try:
            for response_name, field_details_list in grouped_field_set.items():
                node = field_details_list[0].node
                plan = None if node.arguments else _plan_of(parent_type, node.name.value)
                if plan is not None:
                    if isinstance(plan, _Leaf):
                        done = plan.complete(source_value)
                    elif position_context is None:
                        done = self._complete_object(
                            plan, source_value, field_details_list, path, response_name, parent_type
                        )
                    else:
                        done = _SLOW
                    if done is not _SLOW:
                        results[response_name] = done
                        if is_awaitable(done):
                            awaitable_fields.append(response_name)
                        continue
                result = self.execute_field(
                    parent_type,
                    source_value,
                    field_details_list,
                    Path(path, response_name, parent_type.name),
                    position_context,
                )
                if result is not Undefined:
                    results[response_name] = result
                    if is_awaitable(result):
                        awaitable_fields.append(response_name)
        except Exception:
            if awaitable_fields:
                self.settle_in_background([results[field] for field in awaitable_fields])
            raise
        if not awaitable_fields:
            return results

        async def get_results() -> dict[str, Any]:
            if len(awaitable_fields) == 1:
                field = awaitable_fields[0]
                results[field] = await results[field]
            else:
                awaited = await gather_with_cancel(*(results[f] for f in awaitable_fields))
                results.update(zip(awaitable_fields, awaited, strict=True))
            return results

        return get_results()

    def _complete_object(
        self,
        plan: _Object,
        source: object,
        field_details_list: FieldDetailsList,
        path: Path | None,
        response_name: str,
        parent_type: GraphQLObjectType,
    ) -> Any:
        """A plain object field's completed value (maybe awaitable), or ``_SLOW``.

        Errors are handled as graphql-core's ``execute_field`` handles them:
        located at the field, ``null`` for a nullable field, raised on to the
        parent for a non-null one.
        """
        value = plan.value(source)
        if value is None or value is _SLOW:
            return value
        grouped, defers, _ = self.collect_subfields(plan.object_type, field_details_list)
        if defers:
            return _SLOW
        field_path = Path(path, response_name, parent_type.name)
        pending: list[int] = []
        items: list[Any] = []
        try:
            if not plan.is_list:
                completed = self.execute_fields(plan.object_type, value, field_path, grouped, None)
                if self.is_awaitable(completed):
                    return self._guarded(completed, plan, field_details_list, field_path)
                return completed
            for index, item in enumerate(value):
                done = self.execute_fields(
                    plan.object_type, item, Path(field_path, index, None), grouped, None
                )
                if self.is_awaitable(done):
                    pending.append(index)
                items.append(done)
        except Exception as raw_error:
            if pending:
                self.settle_in_background([items[i] for i in pending])
            self.handle_field_error(raw_error, plan.field_type, field_details_list, field_path)
            return None
        if not pending:
            return items

        async def gathered() -> list[Any]:
            awaited = await gather_with_cancel(*(items[i] for i in pending))
            for index, done in zip(pending, awaited, strict=True):
                items[index] = done
            return items

        return self._guarded(gathered(), plan, field_details_list, field_path)

    async def _guarded(
        self,
        completed: Awaitable[Any],
        plan: _Object,
        field_details_list: FieldDetailsList,
        path: Path,
    ) -> Any:
        try:
            return await completed
        except Exception as raw_error:
            self.handle_field_error(raw_error, plan.field_type, field_details_list, path)
            return None


__all__ = ["ChorusExecutionContext"]
