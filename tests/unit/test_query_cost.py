"""Query cost and the document's shape, computed on documents without a server."""

from __future__ import annotations

from typing import Any

from graphql import get_introspection_query, parse

from chorus.graphql.guards.cost import operation_cost
from chorus.graphql.guards.document_limits import (
    RequestLimits,
    alias_count,
    expanded_fields,
    selection_depth,
)
from chorus.graphql.schema.build import build_schema

LIMITS = RequestLimits()
schema = build_schema()


def cost(document: str, **variables: Any) -> int:
    found = operation_cost(schema._schema, parse(document), None, variables, LIMITS)
    assert found is not None
    return found.cost


def bomb(n: int) -> str:
    """A query whose fragments each spread the next twice: 2**n fields when expanded."""
    chain = " ".join(f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}" for i in range(n))
    return f"query {{ ...F0 }} {chain} fragment F{n} on Query {{ viewer {{ user {{ id }} }} }}"


def test_scalars_are_free_and_objects_cost_one() -> None:
    assert cost("{ __typename }") == 0
    assert cost("{ viewer { user { id } } }") == 2


def test_a_connection_costs_its_page_size_times_an_edge() -> None:
    page = (
        "{ playlist(id: 1) { entries(first: 10) { totalCount pageInfo { hasNextPage } "
        "edges { node { id media { title } } } } } }"
    )
    # playlist 1 + entries (1 + pageInfo 1 + 10 edges × (edge 1 + node 1 + media 1))
    assert cost(page) == 1 + 1 + 1 + 10 * 3


def test_the_page_size_comes_from_variables_or_the_default() -> None:
    document = "query($n: Int) { viewer { playlists(first: $n) { edges { node { id } } } } }"
    assert cost(document, n=7) == 1 + 1 + 7 * 2
    assert cost(document) == 1 + 1 + LIMITS.page_size_default * 2
    # Above the maximum counts at the maximum: the field itself refuses it.
    assert cost(document, n=10**9) == 1 + 1 + LIMITS.page_size_max * 2


def test_a_variable_sent_as_null_is_null_not_its_default() -> None:
    """GraphQL's CoerceVariableValues: a default applies to a variable not sent; one sent
    as ``null`` is ``null``, and a page size of ``null`` runs the default page size. Costed
    at its default, ``{"n": null}`` ran 50 items a page for the price of 1."""
    document = (
        "query($n: Int = 1) { viewer { playlists(first: $n) { edges { node { "
        "entries(first: $n) { edges { node { id } } } } } } } }"
    )
    assert cost(document) == 1 + 1 + 1 * (2 + 1 + 1 * 2)
    page = LIMITS.page_size_default
    assert cost(document, n=None) == 1 + 1 + page * (2 + 1 + page * 2)
    assert cost(document, n=None) == cost(document, n=page)


def test_variables_that_do_not_coerce_are_bad_input_whatever_their_cost() -> None:
    """A page size sent as a string is counted at the default page size; over the limit,
    the answer is still BAD_USER_INPUT (nothing runs), not a refusal for its cost."""
    document = "query($n: Int) { viewer { playlists(first: $n) { edges { node { id } } } } }"
    small = RequestLimits(max_query_cost=50)
    assert cost(document, n="x") > 50
    result = build_schema(small).execute_sync(document, variable_values={"n": "x"})
    assert [(e.extensions or {}).get("code") for e in result.errors or []] == ["BAD_USER_INPUT"]
    over = build_schema(small).execute_sync(document, variable_values={"n": 30})
    assert [(e.extensions or {}).get("code") for e in over.errors or []] == [
        "GRAPHQL_VALIDATION_FAILED"
    ]


def test_nested_connections_multiply() -> None:
    nested = (
        "{ viewer { playlists(first: 100) { edges { node { "
        "entries(first: 100) { edges { node { media { title } } } } } } } } }"
    )
    assert cost(nested) == 1 + 1 + 100 * (1 + 1 + 1 + 100 * 3)
    assert cost(nested) > LIMITS.max_query_cost


def test_a_fragment_costs_the_same_as_its_selection_written_out() -> None:
    inline = "{ playlist(id: 1) { entries(first: 5) { edges { node { id media { title } } } } } }"
    spread = (
        "{ playlist(id: 1) { entries(first: 5) { ...Page } } } "
        "fragment Page on PlaylistEntryConnection { edges { node { ...Entry } } } "
        "fragment Entry on PlaylistEntry { id media { title } }"
    )
    assert cost(spread) == cost(inline)


def test_a_read_at_an_older_version_costs_its_replay() -> None:
    header = "{ playlist(id: 1) { atVersion(version: 3) { title } } }"
    # playlist 1 + atVersion (1 + the replay, counted as two of the largest pages)
    assert cost(header) == 1 + 1 + 2 * LIMITS.page_size_max
    page = (
        "{ playlist(id: 1) { atVersion(version: 3) { entries(first: 10) { "
        "edges { node { media { title } } } } } } }"
    )
    assert cost(page) == 1 + 1 + 2 * LIMITS.page_size_max + 1 + 10 * 3
    one = "atVersion(version: 1) { entries(first: 100) { edges { node { id } } } }"
    document = "{ playlist(id: 1) { " + " ".join(f"a{i}: {one}" for i in range(30)) + " } }"
    assert cost(document) > LIMITS.max_query_cost


def test_aliases_of_changes_with_media_add_up_past_the_limit() -> None:
    one = (
        "changes(sinceVersion: 0, first: 100) { versions { version changes { "
        "... on EntriesAdded { entries { media { title } } } } } }"
    )
    document = "{ playlist(id: 1) { " + " ".join(f"c{i}: {one}" for i in range(30)) + " } }"
    assert cost(document) > LIMITS.max_query_cost


def test_mutations_cost_their_payload() -> None:
    mutation = (
        "mutation { addEntries(input: {playlistId: 1, operationId: 1, baseVersion: 0, "
        "mediaIds: []}) { version playlist { id entries(first: 3) { edges { node { id } } } } } }"
    )
    assert cost(mutation) == 1 + 1 + 1 + 3 * 2


def test_a_payloads_entries_are_counted_at_the_most_an_edit_or_a_batch_places() -> None:
    """Counted as one item, a selection under each of an edit's entries was paid once and
    run up to 100 times (1,000 in a batch): a fresh user read 50,000 entries for 209."""
    nested = "addedBy { playlists(first: 1) { edges { node { id } } } }"
    each = 1 + (1 + 50 + 1 * 2)  # addedBy + playlists (an own read: +50) with 1 edge
    add = (
        "mutation { addEntries(input: {playlistId: 1, operationId: 1, baseVersion: 0, "
        f"mediaIds: []}}) {{ entries {{ id {nested} }} }} }}"
    )
    assert cost(add) == 1 + LIMITS.max_edit_entries * (1 + each)
    move = (
        "mutation { moveEntries(input: {playlistId: 1, operationId: 1, baseVersion: 0, "
        f"entryIds: [], position: {{atEnd: true}}}}) {{ entries {{ {nested} }} }} }}"
    )
    assert cost(move) == 1 + LIMITS.max_edit_entries * (1 + each)
    batch = (
        "mutation { applyOperations(input: {playlistId: 1, baseVersion: 0, operations: []}) "
        f"{{ results {{ entries {{ {nested} }} }} }} }}"
    )
    assert cost(batch) == 1 + 1 + LIMITS.max_batch_entries * (1 + each)
    assert cost(batch) > LIMITS.max_query_cost  # refused: 1,000 own reads of playlists
    ids = (
        "mutation { applyOperations(input: {playlistId: 1, baseVersion: 0, operations: []}) "
        "{ results { entries { id media { title } } } } }"
    )
    assert cost(ids) == 1 + 1 + LIMITS.max_batch_entries * 2  # the usual selection runs


def test_a_page_size_sent_as_an_integral_float_is_that_size() -> None:
    """graphql-core's ``Int`` takes ``100.0`` (JSON ``1e2``) as 100: costed at the default
    page, it ran twice the pages it paid for, and its cost was remembered for ``100``."""
    document = "query($n: Int) { viewer { playlists(first: $n) { edges { node { id } } } } }"
    kept = parse(document)
    for n in (100.0, 100, 1e2):
        found = operation_cost(schema._schema, kept, None, {"n": n}, LIMITS)
        assert found is not None
        assert found.cost == 1 + 1 + 100 * 2, n
    for n in (True, 1):  # equal keys, unequal sizes: each its own entry
        found = operation_cost(schema._schema, kept, None, {"n": n}, LIMITS)
        assert found is not None
        assert found.cost == 1 + 1 + (LIMITS.page_size_default if n is True else 1) * 2, n


def test_introspection_is_cheap_and_marked_as_such() -> None:
    found = operation_cost(schema._schema, parse(get_introspection_query()), None, {}, LIMITS)
    assert found is not None
    assert found.introspection_only
    assert found.cost < LIMITS.max_query_cost
    found = operation_cost(
        schema._schema, parse("{ __typename viewer { user { id } } }"), None, {}, LIMITS
    )
    assert found is not None
    assert not found.introspection_only


def test_a_fragment_bomb_is_costed_with_one_visit_per_selection_set() -> None:
    n = 40  # 2**40 copies of `viewer { user { id } }` once expanded
    document = parse(bomb(n))
    found = operation_cost(schema._schema, document, None, {}, LIMITS)
    assert found is not None
    assert found.cost == 2 * 2**n
    written = n + 1 + 1 + 2  # fragment bodies, the operation, viewer's and user's selections
    assert found.visits <= written
    fields, visits = expanded_fields(document)
    assert fields == 3 * 2**n
    assert visits <= written
    assert alias_count(document) == 0
    operation = document.definitions[0]
    fragments = {d.name.value: d for d in document.definitions[1:]}  # type: ignore[attr-defined]
    assert selection_depth(operation.selection_set, fragments) == 3  # type: ignore[attr-defined]


def codes(document: str, limits: RequestLimits | None = None, **variables: Any) -> list[str]:
    result = build_schema(limits).execute_sync(document, variable_values=variables)
    return [e.extensions["code"] for e in result.errors or []]  # type: ignore[index]


def test_a_fragment_bomb_is_refused_before_validation() -> None:
    result = schema.execute_sync(bomb(21))
    assert [e.message for e in result.errors or []] == [
        f"the document expands to {3 * 2**21} fields through its fragments; "
        f"the limit is {LIMITS.max_expanded_fields}"
    ]
    assert result.errors[0].extensions == {"code": "GRAPHQL_VALIDATION_FAILED"}  # type: ignore[index]


def test_fragment_counts_and_repeated_fields_are_bounded() -> None:
    many = " ".join(f"fragment F{i} on Query {{ __typename }}" for i in range(51))
    assert codes("{ ...F0 } " + many) == ["GRAPHQL_VALIDATION_FAILED"]
    spreads = "{ " + "...F " * 101 + "} fragment F on Query { __typename }"
    assert codes(spreads) == ["GRAPHQL_VALIDATION_FAILED"]
    assert codes("{ " + "...F " * 100 + "} fragment F on Query { __typename }") == []
    repeated = "{ viewer { " + "... on Viewer { user { id } } " * 21 + "} }"
    assert codes(repeated) == ["GRAPHQL_VALIDATION_FAILED"]


def test_a_query_over_the_cost_limit_is_refused_naming_both() -> None:
    document = "query($n: Int) { viewer { playlists(first: $n) { edges { node { id } } } } }"
    small = RequestLimits(max_query_cost=100)
    assert cost(document, n=49) == 100  # at the limit: runs
    result = build_schema(small).execute_sync(document, variable_values={"n": 50})
    assert [e.message for e in result.errors or []] == [
        "the query costs 102; the limit is 100 (ask for smaller pages or fewer fields)"
    ]
    assert result.extensions == {"cost": {"requestedQueryCost": 102, "maximum": 100}}


KEPT = """
query Page($n: Int = 7, $m: Int, $id: ID!) {
  playlist(id: $id) {
    entries(first: $n) { edges { node { id media { title } } } }
    more: entries(first: $m) { edges { node { id } } }
    ...F
  }
}
fragment F on Playlist { changes(sinceVersion: 0, first: $n) { versions { version } } }
"""


def test_a_kept_documents_cost_is_remembered_by_the_variables_it_reads() -> None:
    kept = parse(KEPT)  # one document, as the document cache hands it out again and again
    sent: list[dict[str, Any]] = [
        {"id": "a", "n": 5, "m": 3},
        {"id": "b", "n": 5, "m": 3},  # another id: not a page size, the same cost
        {"id": "a", "n": 9, "m": 3},
        {"id": "a", "m": 3},  # n's default
        {"id": "a", "n": None, "m": 1},  # null: the default page size, not n's default
        {"id": "a", "n": 5, "m": 3},
        {"id": "a", "n": [1], "m": 3},  # unhashable: counted, not remembered
        {"id": "a", "n": 2_000, "m": 0},  # over the maximum: counted at it
    ]
    for variables in sent:
        remembered = operation_cost(schema._schema, kept, "Page", variables, LIMITS)
        fresh = operation_cost(schema._schema, parse(KEPT), "Page", variables, LIMITS)
        assert remembered == fresh, variables
    costs = {
        c.cost
        for v in sent
        if (c := operation_cost(schema._schema, kept, "Page", v, LIMITS)) is not None
    }
    assert len(costs) == 6  # the sizes matter: nothing was answered from the wrong entry


def test_a_documents_remembered_costs_go_with_it() -> None:
    from chorus.graphql.guards import cost as cost_module

    before = len(cost_module._MEMOS)
    for n in range(200):
        operation_cost(
            schema._schema, parse(f"{{ viewer {{ user {{ id n{n}: id }} }} }}"), None, {}, LIMITS
        )
    assert len(cost_module._MEMOS) <= before + 1  # each freed with its document
