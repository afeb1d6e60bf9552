"""Request-level limits: query depth (introspection included) and body size.

Depth counts the fields on the longest path of an operation, fragments
expanded, ``__schema`` and ``__type`` included, so a nested introspection
query (``types { fields { type { fields … } } }``) is bounded like any other.
One exception: ``ofType`` only unwraps a list or non-null type, its
nesting is bounded by the schema's own wrapping, so it adds no depth; this
keeps the standard introspection query of GraphiQL and client generators
(depth 6 by this count) within the limit.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
)
from strawberry.extensions import AddValidationRules


def selection_depth(
    selection_set: SelectionSetNode | None,
    fragments: dict[str, FragmentDefinitionNode],
    seen: frozenset[str] = frozenset(),
) -> int:
    """Fields on the longest path below ``selection_set``."""
    if selection_set is None:
        return 0
    deepest = 0
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            own = 0 if selection.name.value == "ofType" else 1
            deepest = max(deepest, own + selection_depth(selection.selection_set, fragments, seen))
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            if name not in seen and name in fragments:
                below = fragments[name].selection_set
                deepest = max(deepest, selection_depth(below, fragments, seen | {name}))
        elif isinstance(selection, InlineFragmentNode):
            deepest = max(deepest, selection_depth(selection.selection_set, fragments, seen))
    return deepest


@functools.cache
def depth_rule(max_depth: int) -> type[ValidationRule]:
    """A validation rule refusing operations deeper than ``max_depth`` fields."""

    class DepthRule(ValidationRule):
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(context)
            document = context.document
            fragments = {
                d.name.value: d
                for d in document.definitions
                if isinstance(d, FragmentDefinitionNode)
            }
            for definition in document.definitions:
                if not isinstance(definition, OperationDefinitionNode):
                    continue
                depth = selection_depth(definition.selection_set, fragments)
                if depth > max_depth:
                    name = definition.name.value if definition.name else "anonymous"
                    context.report_error(
                        GraphQLError(
                            f"operation {name!r} is {depth} fields deep; the limit is {max_depth}",
                            definition,
                        )
                    )

    return DepthRule


class QueryDepthLimit(AddValidationRules):
    """Refuses operations deeper than ``max_depth`` fields (a strawberry extension)."""

    def __init__(self, max_depth: int) -> None:
        super().__init__([depth_rule(max_depth)])


class OneOperationUnlessNamed(ValidationRule):
    """A document with several operations needs ``operationName`` (GraphQL spec, GetOperation)."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        operations = [
            d for d in context.document.definitions if isinstance(d, OperationDefinitionNode)
        ]
        if len(operations) > 1:
            context.report_error(
                GraphQLError("the document holds several operations: give operationName")
            )


class RequireOperationName(AddValidationRules):
    """Adds :class:`OneOperationUnlessNamed` when the request names no operation."""

    def __init__(self) -> None:
        super().__init__([OneOperationUnlessNamed])

    def on_operation(self) -> Iterator[None]:
        if self.execution_context.operation_name is None:
            yield from super().on_operation()
        else:
            yield
