"""What a plan covers, decided when it is built (graphql/execution/plans.py).

The answers plans give are compared with graphql-core's over the real schema
and data in ``tests/integration/test_planned_differential.py``; here, which
operations get a plan at all, without a server.
"""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any

import pytest
import strawberry
from graphql import OperationDefinitionNode, execute_sync, parse
from graphql.execution import Executor
from graphql.execution.collect_fields import FragmentDetails
from graphql.execution.values import VariableValues
from hypothesis import given, settings
from hypothesis import strategies as st
from strawberry.relay import GlobalID

from chorus.graphql.execution.event_plans import EventBuilder
from chorus.graphql.execution.field_reads import direct_resolver, plain_attribute
from chorus.graphql.execution.mutation_plans import MutationBuilder
from chorus.graphql.execution.plans import Builder, Unplannable
from chorus.graphql.execution.plans import run as plan_run
from chorus.graphql.schema.build import build_schema
from tests.switches import compiled_execution

SCHEMA = build_schema()._schema  # type: ignore[attr-defined]


def _builder(document: str, variables: dict[str, object] | None = None) -> MutationBuilder:
    parsed = parse(document)
    operation = next(d for d in parsed.definitions if isinstance(d, OperationDefinitionNode))
    fragments = {
        d.name.value: FragmentDetails(d)
        for d in parsed.definitions
        if not isinstance(d, OperationDefinitionNode)
    }
    return MutationBuilder(SCHEMA, fragments, operation, VariableValues(variables or {}, {}))


MUTATION = """mutation { createPlaylist(input: {operationId: "o", title: "t"}) {
  version playlist { id } } }"""

PLANNED = [
    # The cold first page (bench/peers.py).
    """query Page($id: ID!) { playlist(id: $id) { version entries(first: 50) {
      edges { cursor node { id positionKey media { title artists album durationMs } } } } } }""",
    # Aliases, named and inline fragments, __typename, literal @skip/@include.
    """query ($id: ID!) { p: playlist(id: $id) { ...H ... on Playlist { t: title }
      __typename d: description @skip(if: true) v: version @include(if: false) }
      viewer { user { id } } }
    fragment H on Playlist { id owner { id } }""",
]

UNPLANNED = [
    # An interface: which object type is only known at run time.
    """query ($id: ID!) { node(id: $id) { id } }""",
    # Introspection.
    """{ __schema { queryType { name } } }""",
    # A mutation is not a query: MutationBuilder plans it (below).
    MUTATION,
]


@pytest.mark.parametrize("document", PLANNED)
def test_reads_of_object_types_are_planned(document: str) -> None:
    assert callable(_builder(document).root())


@pytest.mark.parametrize("document", UNPLANNED)
def test_what_only_graphql_core_can_run_is_unplannable(document: str) -> None:
    with pytest.raises(Unplannable):
        _builder(document).root()


def test_a_resolver_is_called_directly_when_a_plan_converts_its_arguments() -> None:
    entry = SCHEMA.get_type("PlaylistEntry")
    playlist = SCHEMA.get_type("Playlist")
    mutation = SCHEMA.get_type("Mutation")
    assert direct_resolver(entry.fields["media"]) is not None  # type: ignore[union-attr]
    # Int and String arguments: strawberry hands them on as graphql-core coerced them.
    assert direct_resolver(playlist.fields["entries"]) is not None  # type: ignore[union-attr]
    # An input object: built by a conversion made once (test_argument_conversions.py).
    assert direct_resolver(mutation.fields["createPlaylist"]) is not None  # type: ignore[union-attr]
    assert plain_attribute(entry.fields["positionKey"]) == "position_key"  # type: ignore[union-attr]


EVENT = """subscription ($id: ID!) { playlistEvents(playlistId: $id, sinceVersion: 0) {
  __typename ... on PlaylistChanged { version changes { __typename
    ... on EntriesAdded { entries { id media { title } } } ... on EntriesRemoved { entryIds } } }
  ... on ResyncRequired { reason } } }"""


def _event_builder(document: str, event_type: str) -> EventBuilder:
    parsed = parse(document)
    operation = next(d for d in parsed.definitions if isinstance(d, OperationDefinitionNode))
    found = SCHEMA.get_type(event_type)
    return EventBuilder(SCHEMA, {}, operation, VariableValues({}, {}), found)


@pytest.mark.parametrize("event_type", ["PlaylistChanged", "ResyncRequired"])
def test_a_subscription_is_planned_for_an_event_of_a_known_type(event_type: str) -> None:
    # The root's union is the event's type; the union below is chosen by class.
    assert callable(_event_builder(EVENT, event_type).root())


def test_an_event_of_a_type_the_root_field_cannot_be_is_unplannable() -> None:
    with pytest.raises(Unplannable):
        _event_builder(EVENT, "Playlist").root()
    with pytest.raises(Unplannable):  # a query is the query plan's
        _event_builder(PLANNED[0], "PlaylistChanged").root()


def test_a_schema_a_test_builds_follows_the_run_s_switch() -> None:
    """``CHORUS_COMPILED_EXECUTION=false`` for the run (tests/switches.py): no plans in the
    schemas tests build themselves either; a test that asks for plans gets them."""
    built = build_schema().execution_context_class.__name__  # type: ignore[attr-defined]
    assert built.startswith("Planned") == compiled_execution()
    asked = build_schema(compiled_execution=True).execution_context_class.__name__  # type: ignore[attr-defined]
    assert asked.startswith("Planned")


def test_a_mutation_is_planned_by_its_own_builder() -> None:
    assert callable(_builder(MUTATION).mutation())
    two = """mutation ($i: AddEntriesInput!) { a: addEntries(input: $i) { version }
      b: addEntries(input: $i) { version entries { id } } }"""
    assert callable(_builder(two).mutation())


@pytest.mark.parametrize(
    "document",
    [
        PLANNED[0],  # a query
        "mutation { __typename }",  # graphql-core answers it
        """mutation @deprecated { createPlaylist(input: {operationId: "o", title: "t"}) {
          version } }""",
    ],
)
def test_what_a_mutation_plan_does_not_cover(document: str) -> None:
    with pytest.raises(Unplannable):
        _builder(document).mutation()


# --- leaves: the standard scalars' values passed as they are -------------------------


_GIVEN: list[object] = [None]
"""The value every leaf resolver of :data:`_LEAF_SCHEMA` returns (set per example)."""


@strawberry.type
class _Leaves:
    @strawberry.field
    def text(self) -> str | None:
        return _GIVEN[0]  # type: ignore[return-value]

    @strawberry.field
    def ident(self) -> strawberry.ID | None:
        return _GIVEN[0]  # type: ignore[return-value]

    @strawberry.field
    def number(self) -> int | None:
        return _GIVEN[0]  # type: ignore[return-value]

    @strawberry.field
    def flag(self) -> bool | None:
        return _GIVEN[0]  # type: ignore[return-value]

    @strawberry.field
    def needed(self) -> str:
        return _GIVEN[0]  # type: ignore[return-value]


@strawberry.type
class _LeafQuery:
    @strawberry.field
    def leaves(self) -> _Leaves:
        return _Leaves()


_LEAF_SCHEMA: Any = strawberry.Schema(query=_LeafQuery)._schema


_LEAVES = parse("{ leaves { text ident number flag } alias: leaves { needed } }")


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.text(max_size=5),
        st.booleans(),
        st.integers(min_value=-(2**33), max_value=2**33),
        st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 0.0, 1.5, float("nan")]),
        st.floats(allow_nan=False, width=32),
    )
)
def test_a_planned_leaf_is_graphql_cores_value(value: object) -> None:
    """The plan's fast path for exact ``str``/``int``/``bool`` values gives what
    graphql-core's serializers give; anything it cannot give exactly abandons."""
    _GIVEN[0] = value
    schema = _LEAF_SCHEMA
    expected = execute_sync(schema, _LEAVES)
    operation = _LEAVES.definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    root = Builder(schema, {}, operation, VariableValues({}, {})).root()
    executor = Executor.build(schema, _LEAVES)
    assert isinstance(executor, Executor)
    try:
        data = plan_run(root, executor)
    except Exception:  # Abandon, or a serializer's error: graphql-core runs it
        assert expected.errors, "the plan gave up on what graphql-core answers cleanly"
        return
    assert not expected.errors
    assert json.dumps(data) == json.dumps(expected.data)
    assert [type(v) for v in data["leaves"].values()] == [
        type(v)
        for v in expected.data["leaves"].values()  # type: ignore[index]
    ]


@strawberry.enum
class Colour(enum.Enum):
    RED = "red"


@strawberry.input
class Range:
    low: int


SEEN: list[object] = []
"""What the resolvers below were given."""


@strawberry.type
class ArgumentsQuery:
    @strawberry.field
    def scalars(self, a: int, b: str | None = None, c: strawberry.ID | None = None) -> int:
        return a

    @strawberry.field
    def snake(
        self,
        min_version: int | None = None,
        named: Annotated[str, strawberry.argument(name="given")] = "x",
    ) -> str:
        return f"{min_version} {named}"

    @strawberry.field
    def global_id(self, a: GlobalID) -> int:
        return 0

    @strawberry.field
    def colour(self, a: Colour) -> int:
        SEEN.append(a)
        return 0

    @strawberry.field
    def listed(self, a: list[int]) -> int:
        SEEN.append(a)
        return 0

    @strawberry.field
    def maybe(self, a: strawberry.Maybe[int]) -> int:
        return 0

    @strawberry.field
    def ranged(self, a: Range) -> int:
        SEEN.append(a)
        return 0


def test_arguments_a_plan_cannot_convert_keep_strawberrys_wrapper() -> None:
    """``GlobalID`` and ``Maybe`` keep strawberry's wrapper; enums, lists and inputs are
    converted as strawberry converts them."""
    schema = strawberry.Schema(query=ArgumentsQuery)._schema
    fields = schema.query_type.fields  # type: ignore[union-attr]
    called = direct_resolver(fields["scalars"])
    assert called is not None
    assert called[0](ArgumentsQuery(), None, {"a": 3, "b": None}) == 3
    # A Python name the schema camel-cases, and one given its own GraphQL name.
    snake = direct_resolver(fields["snake"])
    assert snake is not None
    assert snake[0](ArgumentsQuery(), None, {"minVersion": 4, "given": "y"}) == "4 y"
    # Query.playlist(id, minVersion): the cold page's root field.
    assert direct_resolver(SCHEMA.query_type.fields["playlist"]) is not None  # type: ignore[union-attr]
    for name in ("globalId", "maybe"):
        assert direct_resolver(fields[name]) is None, name
    given_list = [1, 2]
    ranged, listed, colour = (direct_resolver(fields[n]) for n in ("ranged", "listed", "colour"))
    SEEN.clear()
    for called, value in ((ranged, {"low": 2}), (listed, given_list), (colour, Colour.RED)):
        assert called is not None
        called[0](ArgumentsQuery(), None, {"a": value})
    assert SEEN[0] == Range(low=2)
    assert SEEN[1] == given_list
    assert SEEN[1] is not given_list  # copied, as strawberry does
    assert SEEN[2] is Colour.RED
