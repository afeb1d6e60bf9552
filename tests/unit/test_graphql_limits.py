"""Request limits of the schema, checked without a server or a database."""

from __future__ import annotations

from graphql import get_introspection_query, parse

from chorus.graphql.guards.document_limits import selection_depth
from chorus.graphql.schema.build import build_schema

schema = build_schema()


def _codes(document: str, operation_name: str | None = None) -> list[str]:
    result = schema.execute_sync(document, operation_name=operation_name)
    return [e.extensions["code"] for e in result.errors or []]  # type: ignore[index]


def test_the_standard_introspection_query_passes() -> None:
    assert _codes(get_introspection_query(descriptions=True)) == []


def test_nested_introspection_counts_towards_the_depth_limit() -> None:
    nested = "{ __schema { types { " + "fields { type { " * 6 + "name" + " } }" * 6 + " } } }"
    assert "GRAPHQL_VALIDATION_FAILED" in _codes(nested)


def test_depth_is_counted_through_fragments() -> None:
    document = parse(
        "query { a { b { ...F ... on T { c { d } } } } } fragment F on T { e { f { g { h } } } }"
    )
    fragments = {d.name.value: d for d in document.definitions if d.kind == "fragment_definition"}
    operation = document.definitions[0]
    assert selection_depth(operation.selection_set, fragments) == 6  # type: ignore[attr-defined]
    assert (
        selection_depth(parse("{ a { ofType { ofType { b } } } }").definitions[0].selection_set, {})
        == 2
    )  # type: ignore[attr-defined]


def test_several_operations_need_an_operation_name() -> None:
    document = "query A { __typename } query B { __typename }"
    assert _codes(document) == ["GRAPHQL_VALIDATION_FAILED"]
    assert _codes(document, operation_name="B") == []


def test_more_than_30_aliases_through_fragments_are_refused() -> None:
    fragment = "fragment F on Query { " + " ".join(f"a{i}: __typename" for i in range(16)) + " }"
    assert _codes("{ ...F x: __typename } " + fragment) == []
    assert _codes("{ ...F ... { ...G } } " + fragment + fragment.replace("F on", "G on")) == [
        "GRAPHQL_VALIDATION_FAILED"
    ]
