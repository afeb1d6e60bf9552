"""What a field's selection asks, read from the document's syntax tree and kept per document.

``Playlist.entries`` asks whether its selection reaches ``media`` (to fetch a
page's media in one batch) and ``Query.playlist`` whether it asks one first
page of ``entries`` (to read the header and that page in one statement).
strawberry's ``Info.selected_fields`` answers both, but converts the whole
selection below the field, every argument of every field included, on each
request (~2.5% of a cold page's CPU, py-spy on ``bench/peers.py``'s ``cold``
row). The answer depends only on the field's nodes in the document (and its
fragments): it is worked out once per node and kept while the node lives
(a kept document's nodes are the same objects on every request).

As ``selected_fields``: fragments, inline or spread, are followed whatever their
type condition, and ``@skip``/``@include`` are not applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLResolveInfo,
    InlineFragmentNode,
    SelectionNode,
)

KEPT = 4096
"""Answers kept (all forgotten when more come); each holds its nodes alive."""

_Key = tuple[tuple[int, ...], tuple[str, ...]]
_fields_at: dict[_Key, tuple[list[FieldNode], list[FieldNode]]] = {}
"""(the field's node ids, path) → (those nodes, kept alive; the answer)."""


def fields_at(info: GraphQLResolveInfo[Any], path: tuple[str, ...]) -> list[FieldNode]:
    """The field nodes ``path`` names below this field, in document order.

    ``path[0]`` is a name of a field directly in this field's selection (through
    fragments), ``path[1]`` one in that field's, and so on; ``()`` is this field's
    own nodes. One node per occurrence: a field selected twice is there twice.
    """
    nodes = info.field_nodes
    key = (tuple(map(id, nodes)), path)
    kept = _fields_at.get(key)
    if kept is not None:  # the kept nodes are alive: their ids are no other object's
        return kept[1]
    level: list[FieldNode] = list(nodes)
    for name in path:
        level = [
            found
            for node in level
            for found in _fields_named(_selections(node), name, info.fragments)
        ]
    if len(_fields_at) >= KEPT:
        _fields_at.clear()
    _fields_at[key] = (list(nodes), level)
    return level


def _selections(node: FieldNode) -> Sequence[SelectionNode]:
    return node.selection_set.selections if node.selection_set is not None else ()


def _fields_named(
    selections: Sequence[SelectionNode],
    name: str,
    fragments: dict[str, FragmentDefinitionNode],
) -> list[FieldNode]:
    found: list[FieldNode] = []
    pending = list(reversed(selections))  # no cycle: validation refused any
    while pending:
        selection = pending.pop()
        if isinstance(selection, FieldNode):
            if selection.name.value == name:
                found.append(selection)
        elif isinstance(selection, InlineFragmentNode):
            pending.extend(reversed(selection.selection_set.selections))
        elif isinstance(selection, FragmentSpreadNode):
            fragment = fragments.get(selection.name.value)
            if fragment is not None:
                pending.extend(reversed(fragment.selection_set.selections))
    return found
