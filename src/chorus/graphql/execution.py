"""A fast path in front of graphql-core's field execution, for plain leaf fields.

A page of 50 entries with their media is some 350 leaf fields (``cursor``,
``id``, ``positionKey``, ``title``, ``artists``…), each an attribute of a
Python object. graphql-core executes every one as a field: a resolve info, an
argument check, strawberry's resolver wrapper, an awaitable check, then the
leaf's completion — the largest part of a cold page's CPU (see
``docs/caching.md``, "The cold path"). :class:`ChorusExecutionContext` reads such a field
directly: the attribute, then the scalar's or enum's ``coerce_output_value``
(the same coercion graphql-core's ``complete_leaf_value`` applies).

A field takes the fast path only when all of this holds; otherwise, and
whenever the value is not what the fast path can complete (``None`` for a
non-null field, a value the scalar refuses), it goes graphql-core's way,
which then also reports the error exactly as before:

* strawberry marks its resolver as its default attribute read (no resolver
  of ours, no field extension, no permission class);
* the field has no arguments, and no field middleware is installed;
* its type is a scalar or enum, or a list of non-null ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphql import (
    GraphQLField,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path, gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter

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


def _plain_leaf(field: GraphQLField) -> _Leaf | None:
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
    if is_leaf_type(kind):
        leaf: GraphQLLeafType = kind
        return _Leaf(attribute, leaf.coerce_output_value, nullable)
    if isinstance(kind, GraphQLList) and isinstance(kind.of_type, GraphQLNonNull):
        item = kind.of_type.of_type
        if is_leaf_type(item):
            return _Leaf(attribute, item.coerce_output_value, nullable, is_list=True)
    return None


_leaves: dict[tuple[int, str], tuple[GraphQLObjectType, _Leaf | None]] = {}
"""(id of the object type, field name) → its fast path; the type is kept: its id stays its own."""


def _leaf_of(parent_type: GraphQLObjectType, name: str) -> _Leaf | None:
    key = (id(parent_type), name)
    found = _leaves.get(key)
    if found is not None and found[0] is parent_type:
        return found[1]
    field = parent_type.fields.get(name)
    leaf = _plain_leaf(field) if field is not None else None
    _leaves[key] = (parent_type, leaf)
    return leaf


class ChorusExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's execution context, with plain leaf fields read directly."""

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        """graphql-core's ``execute_fields``, with the fast path for plain leaves."""
        if self.middleware_manager is not None:
            return super().execute_fields(
                parent_type, source_value, path, grouped_field_set, position_context
            )
        results: dict[str, Any] = {}
        is_awaitable = self.is_awaitable
        awaitable_fields: list[str] = []
        try:
            for response_name, field_details_list in grouped_field_set.items():
                node = field_details_list[0].node
                leaf = None if node.arguments else _leaf_of(parent_type, node.name.value)
                if leaf is not None:
                    done = leaf.complete(source_value)
                    if done is not _SLOW:
                        results[response_name] = done
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


__all__ = ["ChorusExecutionContext"]
