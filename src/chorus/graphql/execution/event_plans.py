"""The plan of one subscription event: a subscription operation run over an event of a known type.

A subscription's root field (``playlistEvents``) returns a union; a query
plan stops there (:class:`~chorus.graphql.execution.plans.Unplannable`). But
each event a delivery group executes (:class:`~chorus.graphql.execution.delivery.SharedEvent`)
is a value of one object type (``PlaylistChanged``), known before execution:
:class:`EventBuilder` plans the operation for that type. The root field's
value is completed as an object of that type (strawberry's ``is_type_of``
checks the value's class; another abandons the run), its selection merged by
graphql-core's ``collect_subfields`` for that type as graphql-core does after
resolving the union. A union below it (``changes``: a ``PlaylistChange``) is
planned the same way for each of its types, the one taken chosen by the
value's class, exactly as strawberry's union resolver would choose it (a
class that is no member's, a ``strawberry.cast`` value or members whose
classes subclass each other: graphql-core). Everything else is the query
plan's (:class:`~chorus.graphql.execution.plans.Builder`). The plan is kept with the
document, keyed by the operation and the event's type
(:mod:`chorus.graphql.execution.planned`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphql import (
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    GraphQLUnionType,
    OperationDefinitionNode,
    OperationType,
    is_abstract_type,
)
from graphql.execution.collect_fields import (
    FieldDetailsList,
    FragmentDetails,
    collect_fields,
    collect_subfields,
)
from graphql.execution.values import VariableValues
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.cast import get_strawberry_type_cast

from chorus.graphql.execution.field_reads import strawberry_is_type_of
from chorus.graphql.execution.plans import Abandon, At, Builder, Complete, Run, Unplannable

Selection = Callable[[Any, Run, At | None], dict[str, Any]]


class EventBuilder(Builder):
    """Builds the plan of a subscription operation for one event of type ``event_type``.

    Args:
        schema, fragments, operation, variable_values: as :class:`Builder`'s
            (``operation`` a subscription).
        event_type: the object type of the events the plan executes; the
            root field's type must be it, or an abstract type it belongs to.
    """

    def __init__(
        self,
        schema: GraphQLSchema,
        fragments: dict[str, FragmentDetails],
        operation: OperationDefinitionNode,
        variable_values: VariableValues,
        event_type: GraphQLObjectType,
    ) -> None:
        super().__init__(schema, fragments, operation, variable_values)
        self._event_type: GraphQLObjectType | None = event_type

    def root(self) -> Any:
        """The operation's root selection over one event: ``(event, run) → data``.

        Raises:
            Unplannable: not a subscription, more than one root field, a root
                field of another type, or anything a query plan does not cover.
        """
        operation = self.operation
        if operation.operation is not OperationType.SUBSCRIPTION or operation.directives:
            raise Unplannable("only subscriptions without operation directives")
        if any(f.variable_signatures for f in self.fragments.values()):
            raise Unplannable("fragment variables")
        root_type = self.schema.subscription_type
        if root_type is None:
            raise Unplannable("no subscription type")
        collected = collect_fields(
            self.schema, self.fragments, self.variable_values, root_type, operation
        )
        if len(collected.grouped_field_set) != 1:
            raise Unplannable("a subscription has one root field")
        selection, _ = self._selection(root_type, collected)
        if self._event_type is not None:
            raise Unplannable("the root field's type is not an object")

        def execute_root(event: Any, run: Run) -> dict[str, Any]:
            return selection(event, run, None)

        return execute_root

    def _completion(
        self, type_: GraphQLOutputType, details: FieldDetailsList
    ) -> tuple[Complete, bool]:
        nullable = not isinstance(type_, GraphQLNonNull)
        inner = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
        assumed = self._event_type
        if assumed is not None:  # the root field's (the first completion built): the event
            self._event_type = None
            if inner is not assumed and not (
                is_abstract_type(inner) and self.schema.is_sub_type(inner, assumed)
            ):
                raise Unplannable(f"{inner}: the event's type is not {assumed.name}")
            return self._by_class([assumed], details, nullable)
        if isinstance(inner, GraphQLUnionType):
            return self._by_class(list(inner.types), details, nullable)
        return super()._completion(type_, details)

    def _by_class(
        self, types: list[GraphQLObjectType], details: FieldDetailsList, nullable: bool
    ) -> tuple[Complete, bool]:
        """A value of one of ``types``, chosen by its class, as strawberry's union resolver
        chooses it for a value whose class is exactly one type's (anything else abandons)."""
        by_class: dict[type, tuple[Selection, Any]] = {}
        below = False
        for object_type in types:
            check = object_type.is_type_of
            if check is not None and not strawberry_is_type_of(check):
                raise Unplannable(f"{object_type.name}: an is_type_of of its own")
            definition = (object_type.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
            origin = getattr(definition, "origin", None)
            if not isinstance(origin, type) or origin in by_class:
                raise Unplannable(f"{object_type.name}: no class of its own")
            collected = collect_subfields(
                self.schema,
                self.fragments,
                self.variable_values,
                self.operation,
                object_type,
                details,
            )
            selection, needs_path = self._selection(object_type, collected)
            by_class[origin] = (selection, check)
            below = below or needs_path
        classes = list(by_class)
        if any(a is not b and issubclass(a, b) for a in classes for b in classes):
            raise Unplannable("a type's class is another's subclass: strawberry's order decides")

        def complete(value: Any, run: Run, path: At | None) -> Any:
            if value is None:
                if nullable:
                    return None
                raise Abandon
            found = by_class.get(type(value))
            if found is None or get_strawberry_type_cast(value) is not None:
                raise Abandon
            selection, check = found
            if check is not None and not check(value, None):
                raise Abandon
            return selection(value, run, path)

        return complete, below


def event_type(schema: GraphQLSchema, event: object) -> GraphQLObjectType | None:
    """The object type of ``event`` (a strawberry object) in ``schema``, or ``None``."""
    definition = getattr(type(event), "__strawberry_definition__", None)
    name = getattr(definition, "name", None)
    found = schema.get_type(name) if isinstance(name, str) else None
    return found if isinstance(found, GraphQLObjectType) else None


__all__ = ["EventBuilder", "event_type"]
