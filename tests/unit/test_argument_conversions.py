"""A plan converts a resolver's arguments exactly as strawberry's wrapper does.

``field_reads.argument_conversions`` builds, once per field, what strawberry's
``convert_arguments`` does per request. Here both convert the same coerced
values, generated from the GraphQL types of every field of the real schema
whose arguments a plan converts (every mutation's input, the queries'
arguments): fields present or left out, ``null`` where allowed, lists of 0-3
items, enum members, nested inputs. The results must be equal, of the same
classes, and a list never the very list graphql-core gave.
"""

from __future__ import annotations

from typing import Any

from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.arguments import convert_arguments

from chorus.graphql.execution.field_reads import argument_conversions
from chorus.graphql.schema.build import build_schema

STRAWBERRY = build_schema()
SCHEMA = STRAWBERRY._schema  # type: ignore[attr-defined]


def converted_fields() -> list[tuple[str, GraphQLField, Any, Any]]:
    """``(name, field, strawberry's definition, conversions)`` of each field with arguments
    a plan converts."""
    found = []
    for type_ in SCHEMA.type_map.values():
        if not isinstance(type_, GraphQLObjectType) or type_.name.startswith("__"):
            continue
        for name, field in type_.fields.items():
            if not field.args:
                continue
            definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
            conversions = argument_conversions(field, definition)
            if conversions is not None:
                found.append((f"{type_.name}.{name}", field, definition, conversions))
    return found


FIELDS = converted_fields()

SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "Int": st.integers(-(2**31), 2**31 - 1),
    "Float": st.floats(allow_nan=False),
    "Boolean": st.booleans(),
}


def values(type_: GraphQLInputType, depth: int = 0) -> st.SearchStrategy[Any]:
    """Coerced values of ``type_``, as graphql-core hands them to a resolver."""
    nullable = not isinstance(type_, GraphQLNonNull)
    inner = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
    strategy: st.SearchStrategy[Any]
    if isinstance(inner, GraphQLScalarType):
        strategy = SCALARS.get(inner.name, st.text(max_size=8))
    elif isinstance(inner, GraphQLEnumType):
        strategy = st.sampled_from([v.value for v in inner.values.values()])
    elif isinstance(inner, GraphQLList):
        strategy = st.lists(values(inner.of_type, depth + 1), max_size=3)
    elif isinstance(inner, GraphQLInputObjectType):
        strategy = st.fixed_dictionaries(
            {},
            optional={
                name: values(field.type, depth + 1)
                for name, field in inner.fields.items()
                if depth < 4
            },
        )
        required = [
            name
            for name, field in inner.fields.items()
            if isinstance(field.type, GraphQLNonNull) and field.default_value is not None
        ]
        strategy = strategy.filter(lambda d: all(name in d for name in required))
    else:
        raise AssertionError(f"not an input type: {inner}")
    return st.none() | strategy if nullable else strategy


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same classes all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return bool(a == b) or a is b


def lists_in(value: Any) -> set[int]:
    """The ids of the lists in ``value`` (dicts, lists and dataclasses walked)."""
    if isinstance(value, list):
        return {id(value)}.union(*map(lists_in, value))
    if isinstance(value, dict):
        return set().union(*map(lists_in, value.values()))
    if hasattr(value, "__dataclass_fields__"):
        return set().union(*(lists_in(getattr(value, f)) for f in value.__dataclass_fields__))
    return set()


def test_every_mutation_but_the_batch_is_converted_by_a_plan() -> None:
    names = {name for name, *_ in FIELDS}
    mutations = {f"Mutation.{n}" for n, f in SCHEMA.mutation_type.fields.items() if f.args}
    # A batch's operations are a @oneOf input: strawberry's wrapper converts them.
    assert len(mutations) > 5
    assert mutations - names == {"Mutation.applyOperations"}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_conversions_equal_strawberrys(data: st.DataObject) -> None:
    name, field, definition, conversions = data.draw(st.sampled_from(FIELDS))
    given_values = data.draw(
        st.fixed_dictionaries(
            {},
            optional={arg: values(argument.type) for arg, argument in field.args.items()},
        )
    )
    theirs = convert_arguments(
        given_values,
        definition.arguments,
        STRAWBERRY.schema_converter.scalar_registry,
        STRAWBERRY.config,
    )
    ours = {
        python_name: given_values[graphql_name]
        if convert is None
        else convert(given_values[graphql_name])
        for graphql_name, python_name, convert in conversions
        if graphql_name in given_values
    }
    assert ours.keys() == theirs.keys(), name
    for key, value in theirs.items():
        assert same(ours[key], value), (name, key, ours[key], value)
    # graphql-core gives every request that omits a list the same default: copied.
    assert not lists_in(ours) & lists_in(given_values), name
