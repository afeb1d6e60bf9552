"""The rows' field plan of ``Playlist.entries`` (:mod:`chorus.graphql.schema.common.entry_rows`):
which selections it answers, the values it writes, and the rows it refuses.

Its answers against graphql-core's, byte for byte and on real data, are
``tests/integration/test_planned_differential.py``'s; here, the plan is built
from a parsed document by the planner itself (``Builder``), and run on rows.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from graphql import FieldNode, OperationDefinitionNode, parse
from graphql.execution.collect_fields import FieldDetails
from graphql.execution.values import VariableValues

from chorus.catalog.protocol import Media
from chorus.db.pages import EntriesPage
from chorus.domain.model import Entry
from chorus.graphql.execution.plans import Abandon, Builder, Selected
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import entry_rows, ids

SCHEMA = build_schema()._schema
AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _selected(entries: str) -> Selected | None:
    """The ``Selected`` the planner gives ``Playlist.entries`` for ``entries``' selection."""
    document = parse(f"{{ playlist(id: 1) {{ entries(first: 2) {entries} }} }}")
    operation = document.definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    playlist = operation.selection_set.selections[0]
    assert isinstance(playlist, FieldNode)
    assert playlist.selection_set is not None
    node = playlist.selection_set.selections[0]
    assert isinstance(node, FieldNode)
    builder = Builder(SCHEMA, {}, operation, VariableValues({}, {}))
    playlist_type = SCHEMA.get_type("Playlist")
    field = playlist_type.fields["entries"]  # type: ignore[union-attr]
    return builder._selected(field.type, [FieldDetails(node, None)])


def _build(entries: str) -> Any:
    selected = _selected(entries)
    assert selected is not None
    return entry_rows._build(selected, SCHEMA)


def _page(*entries: Entry) -> EntriesPage:
    return EntriesPage(items=list(entries), has_next=True, has_previous=False, total=9, version=4)


E1 = Entry("e1", "a", "m1", "u1", AT)
E2 = Entry("e2", "b", "m2", "u1", AT)
M1 = Media("m1", "One", ("X", "Y"), None, 1000, True)


def test_the_cold_page_is_built_from_rows_in_response_order() -> None:
    build = _build(
        "{ v: version edges { cursor node { __typename id positionKey mediaId addedAt"
        " media { title artists album durationMs available } } } totalCount"
        " pageInfo { endCursor hasNextPage startCursor } }"
    )
    assert build("p", _page(E1, E2), {"m1": M1, "m2": None}) == {
        "v": 4,
        "edges": [
            {
                "cursor": ids.entry_cursor("a", "e1"),
                "node": {
                    "__typename": "PlaylistEntry",
                    "id": ids.entry_global_id("p", "e1"),
                    "positionKey": "a",
                    "mediaId": "m1",
                    "addedAt": AT.isoformat(),
                    "media": {
                        "title": "One",
                        "artists": ["X", "Y"],
                        "album": None,
                        "durationMs": 1000,
                        "available": True,
                    },
                },
            },
            {
                "cursor": ids.entry_cursor("b", "e2"),
                "node": {
                    "__typename": "PlaylistEntry",
                    "id": ids.entry_global_id("p", "e2"),
                    "positionKey": "b",
                    "mediaId": "m2",
                    "addedAt": AT.isoformat(),
                    "media": None,
                },
            },
        ],
        "totalCount": 9,
        "pageInfo": {
            "endCursor": ids.entry_cursor("b", "e2"),
            "hasNextPage": True,
            "startCursor": ids.entry_cursor("a", "e1"),
        },
    }
    assert list(build("p", _page(E1), {"m1": M1})) == ["v", "edges", "totalCount", "pageInfo"]


def test_an_empty_page_has_null_cursors() -> None:
    build = _build("{ edges { cursor } pageInfo { startCursor endCursor } }")
    assert build("p", _page(), {}) == {
        "edges": [],
        "pageInfo": {"startCursor": None, "endCursor": None},
    }


@pytest.mark.parametrize(
    "entries",
    [
        "{ edges { node { addedBy { id } } } }",
        "{ edges { node { media { viewerHasLiked } } } }",
        "{ pageInfo { hasNextPage } edges { node { media { id viewerHasLiked } } } }",
    ],
)
def test_a_field_it_does_not_know_leaves_the_selection_to_the_objects(entries: str) -> None:
    selected = _selected(entries)
    assert selected is None or entry_rows._build(selected, SCHEMA) is None


@pytest.mark.parametrize(
    ("row", "media"),
    [
        (dataclasses.replace(E1, position_key=None), {}),  # null where non-null
        (dataclasses.replace(E1, position_key=7), {}),  # another type's value
        (dataclasses.replace(E1, added_at=None), {}),
        (E1, {"m1": dataclasses.replace(M1, duration_ms=2**31)}),  # past 32 bits
        (E1, {"m1": dataclasses.replace(M1, artists=("X", 3))}),
        (E1, {"m1": dataclasses.replace(M1, title=None)}),
    ],
)
def test_a_value_a_serializer_would_refuse_or_convert_abandons(row: Entry, media: Any) -> None:
    """graphql-core then answers the request (its error, or its conversion)."""
    build = _build("{ edges { node { positionKey addedAt media { title artists durationMs } } } }")
    with pytest.raises(Abandon):
        build("p", _page(row), media)


def test_fragments_on_an_interface_are_folded_into_the_type() -> None:
    build = _build("{ edges { node { ... on Node { id } } } }")
    assert build("p", _page(E1), {}) == {
        "edges": [{"node": {"id": ids.entry_global_id("p", "e1")}}]
    }


class _Raising:
    """A row whose position key raises when read."""

    entry_id = "e1"

    @property
    def position_key(self) -> str:
        raise RuntimeError("injected")


@pytest.mark.parametrize("entries", ["{ totalCount }", "{ edges { node { id } } }"])
def test_each_entry_s_cursor_and_id_are_made_even_when_not_selected(entries: str) -> None:
    """As the objects' path makes them: a row that fails there fails here."""
    build = _build(entries)
    build("p", _page(E1), {})
    with pytest.raises(RuntimeError, match="injected"):
        build("p", _page(_Raising()), {})  # type: ignore[arg-type]
