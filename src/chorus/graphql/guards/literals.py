"""Integer literals too long to convert are refused as invalid values, not crashes.

graphql-core coerces an ``Int`` literal with ``int(node.value)``, which
Python refuses past :func:`sys.get_int_max_str_digits` digits (4,300;
converting is quadratic in the digits). Its ``ValuesOfCorrectTypeRule``
wraps that :class:`ValueError` as the validation error's original error,
which :mod:`chorus.graphql.execution.error_masking` then masks as ``INTERNAL_SERVER_ERROR``
(and logs with a traceback) — for ``playlists(first: 999…)``, token or not.

:class:`BoundedValuesOfCorrectType` takes that rule's place: a literal
holding an integer of more than :data:`MAX_INT_LITERAL_DIGITS` digits (at
any depth of a list or input object) is refused with graphql-core's own
message for ``Int`` ("Int cannot represent non 32-bit signed integer
value"), before anything converts it. No scalar takes such an integer: an
``Int`` has 10 digits, a finite ``Float`` at most 309.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from graphql import (
    GraphQLError,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInt,
    GraphQLList,
    IntValueNode,
    ListValueNode,
    ObjectValueNode,
    ValueNode,
    ValuesOfCorrectTypeRule,
    VisitorAction,
    get_named_type,
    get_nullable_type,
)
from graphql.language.visitor import SKIP
from strawberry.extensions import SchemaExtension

MAX_INT_LITERAL_DIGITS = 309
"""Most digits of an integer literal: the longest a finite ``Float`` can have."""


def _too_long(
    node: ValueNode, type_: GraphQLInputType | None
) -> tuple[IntValueNode, GraphQLInputType | None] | None:
    """The first integer literal in ``node`` over :data:`MAX_INT_LITERAL_DIGITS`, with its type."""
    if isinstance(node, IntValueNode):
        return (node, type_) if len(node.value.lstrip("-")) > MAX_INT_LITERAL_DIGITS else None
    nullable = get_nullable_type(type_) if type_ is not None else None
    if isinstance(node, ListValueNode):
        item = nullable.of_type if isinstance(nullable, GraphQLList) else type_
        return next(filter(None, (_too_long(value, item) for value in node.values)), None)
    if isinstance(node, ObjectValueNode):
        fields = nullable.fields if isinstance(nullable, GraphQLInputObjectType) else {}
        found = (
            _too_long(field.value, getattr(fields.get(field.name.value), "type", None))
            for field in node.fields
        )
        return next(filter(None, found), None)
    return None


def _message(node: IntValueNode, type_: GraphQLInputType | None) -> str:
    digits = len(node.value.lstrip("-"))
    shown = f"{node.value[:12]}… ({digits} digits)"
    if type_ is None or get_named_type(type_) is GraphQLInt:
        return f"Int cannot represent non 32-bit signed integer value: {shown}"
    return f"Expected value of type '{type_}', found {shown}"


class BoundedValuesOfCorrectType(ValuesOfCorrectTypeRule):
    """graphql-core's rule, refusing over-long integer literals first; see the module docstring."""

    def is_valid_value_node(
        self, node: ValueNode, input_type: GraphQLInputType | None
    ) -> VisitorAction:
        found = _too_long(node, input_type)
        if found is None:
            return super().is_valid_value_node(node, input_type)
        literal, type_ = found
        self.report_error(
            GraphQLError(
                _message(literal, type_),
                literal,
                extensions={"code": "GRAPHQL_VALIDATION_FAILED"},
            )
        )
        return SKIP


class BoundedIntLiterals(SchemaExtension):
    """Validates with :class:`BoundedValuesOfCorrectType` in place of graphql-core's rule."""

    def on_operation(self) -> Iterator[None]:
        context = self.execution_context
        context.validation_rules = tuple(_replaced(context.validation_rules))
        yield


def _replaced(rules: tuple[Any, ...]) -> Iterator[Any]:
    for rule in rules:
        yield BoundedValuesOfCorrectType if rule is ValuesOfCorrectTypeRule else rule
