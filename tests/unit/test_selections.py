""":func:`chorus.graphql.schema.common.selections.fields_at` against strawberry's
``selected_fields``: the same fields found, on documents with aliases, fragments
(spread, inline, nested, twice) and directives, and kept per node."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from graphql import FieldNode, FragmentDefinitionNode, OperationDefinitionNode, parse
from strawberry.types.nodes import SelectedField, Selection, convert_selections

from chorus.graphql.schema.common import selections

DOCUMENTS = [
    "{ playlist(id: 1) { entries { edges { node { media { title } } } } } }",
    "{ playlist(id: 1) { title } }",
    "{ playlist(id: 1) { a: entries(first: 2) { edges { cursor } } } }",
    "{ playlist(id: 1) { entries { x: edges { node { m: media { title } } } } } }",
    "{ playlist(id: 1) { ...P } } fragment P on Playlist { entries { edges { node { id } } } }",
    "{ playlist(id: 1) { ... on Playlist { entries { edges { ...E } } } } }"
    " fragment E on PlaylistEntryEdge { node { ... { media { album } } } }",
    "{ playlist(id: 1) { entries { pageInfo { hasNextPage } } entries { edges { cursor } } } }",
    "{ playlist(id: 1) { ...P ...P } } fragment P on Playlist { entries(first: 3) { edges { node"
    " { media @skip(if: true) { title } } } } }",
    "query Q($n: Int) { playlist(id: 1) { entries(first: $n) @include(if: false) { edges"
    " { node { id } } } } }",
]


def _info(text: str) -> Any:
    document = parse(text)
    operation = next(d for d in document.definitions if isinstance(d, OperationDefinitionNode))
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    field = operation.selection_set.selections[0]
    assert isinstance(field, FieldNode)
    return SimpleNamespace(
        field_nodes=[field], fragments=fragments, variable_values={}, field_name="playlist"
    )


def _strawberry(info: Any, path: tuple[str, ...]) -> int:
    """How many fields strawberry's selections name at ``path`` (the former reading)."""
    level: list[Selection] = list(convert_selections(info, info.field_nodes))
    for name in path:
        below: list[Selection] = [s for f in level for s in f.selections]
        found: list[Selection] = []
        while below:
            selection = below.pop()
            if isinstance(selection, SelectedField):
                if selection.name == name:
                    found.append(selection)
            else:
                below.extend(selection.selections)
        level = found
    return len(level)


@pytest.mark.parametrize("text", DOCUMENTS)
@pytest.mark.parametrize(
    "path",
    [
        (),
        ("entries",),
        ("entries", "edges"),
        ("entries", "edges", "node", "media"),
        ("entries", "edges", "node", "media", "viewerHasLiked"),
        ("title",),
    ],
)
def test_the_fields_found_are_strawberrys(text: str, path: tuple[str, ...]) -> None:
    info = _info(text)
    assert len(selections.fields_at(info, path)) == _strawberry(info, path)


def test_an_answer_is_kept_per_node_and_path() -> None:
    info = _info(DOCUMENTS[0])
    first = selections.fields_at(info, ("entries", "edges"))
    assert selections.fields_at(info, ("entries", "edges")) is first
    assert selections.fields_at(info, ("entries",)) is not first
    again = _info(DOCUMENTS[0])  # the same text parsed again: other nodes, worked out afresh
    assert selections.fields_at(again, ("entries", "edges")) is not first
    assert len(selections.fields_at(again, ("entries", "edges"))) == len(first) == 1
