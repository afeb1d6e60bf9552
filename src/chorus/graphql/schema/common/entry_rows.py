"""A page of entries answered from its rows: the field plan of an ``entries`` connection.

A plan (:mod:`chorus.graphql.execution.plans`) completes a resolver's value
field by field. For a page of 50 entries with their media that value is ~500
objects (an ``Entry`` row becomes a ``PlaylistEntry``, an ``Edge``, a ``Media``),
built only to be read back: on the cold page (``bench/peers.py``) building and
completing them was ~20% of the request's CPU (py-spy). :func:`connection_plan`
is the field plan (:func:`~chorus.graphql.execution.plans.field_plan`) of such a
connection: when the plan is built it generates one function for the field's
selection, which writes the connection's completed value straight from the
page's :class:`~chorus.domain.model.Entry` rows and the catalog's media records.

**The same answer as the objects'** (:mod:`chorus.graphql.schema.common.entries`):
the same page and media reads, the same ids and cursors (:mod:`ids`; made for
every entry of the page, selected or not, as the objects' path makes them),
each value as the type's serializer would give it. A value a serializer would
convert or refuse (a ``None`` where the type is non-null, a position key that
is not a ``str``, a duration past 32 bits) raises
:class:`~chorus.graphql.execution.plans.Abandon`, and graphql-core answers
the request through the resolvers, exactly. A field this module does not
know (``addedBy``, ``viewerHasLiked``, which depends on the viewer) leaves
the selection to the objects' path: :func:`connection_plan` returns ``None``.
``tests/integration/test_planned_differential.py`` compares the two, byte for
byte, over drawn selections.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from graphql import GraphQLScalarType, GraphQLSchema, Undefined

from chorus.db.pages import EntriesPage
from chorus.graphql.execution import loop_turns
from chorus.graphql.execution.plans import Abandon, FieldPlan, Selected
from chorus.graphql.schema.common import ids
from chorus.graphql.schema.common.entries import entry_cursor
from chorus.resolvers import queries

PageOf = Callable[[Any, Any, dict[str, Any]], Awaitable[EntriesPage]]
"""``(source, context, arguments) → the page`` the field's resolver would read."""

_INT = "type(v) is int and -2147483648 <= v <= 2147483647"
_STR, _BOOL = "type(v) is str", "type(v) is bool"

# A leaf's value, as source: (expression, test of a value passed as is, nullable).
# The names in scope: page (EntriesPage), pid (the playlist id), e (an Entry), c and g
# (its cursor and global id), m (a catalog media record), edge_cursor (an entry's
# cursor) and date (the DateTime scalar's serializer).
_LEAVES: dict[str, dict[str, tuple[str, str, bool]]] = {
    "PlaylistEntryConnection": {
        "totalCount": ("page.total", _INT, False),
        "version": ("page.version", _INT, False),
    },
    "PlaylistEntryEdge": {"cursor": ("c", _STR, False)},
    "PlaylistEntry": {
        "id": ("g", _STR, False),
        "positionKey": ("e.position_key", _STR, False),
        "mediaId": ("e.media_id", _STR, False),
        "addedAt": ("date(e.added_at)", "v is not None and v is not Undefined", False),
    },
    "Media": {
        "id": ("m.id", _STR, False),
        "title": ("m.title", _STR, False),
        "album": ("m.album", _STR, True),
        "durationMs": ("m.duration_ms", _INT, True),
        "available": ("m.available", _BOOL, False),
    },
    "PageInfo": {
        "hasNextPage": ("page.has_next", _BOOL, False),
        "hasPreviousPage": ("page.has_previous", _BOOL, False),
        "startCursor": ("edge_cursor(page.items[0]) if page.items else None", _STR, True),
        "endCursor": ("edge_cursor(page.items[-1]) if page.items else None", _STR, True),
    },
}


_NESTED = {("PlaylistEntryConnection", "pageInfo"), ("PlaylistEntryEdge", "node")}
"""Non-null objects built in line from the same row (the page's, the edge's entry)."""


class _Source:
    """The generated function's lines, and a fresh name for each object it builds."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def name(self) -> str:
        self.count += 1
        return f"o{self.count}"

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def _object(out: _Source, depth: int, selected: Selected, target: str) -> bool:
    """Lines that build ``selected``'s object as ``target`` (keys in response order);
    ``False`` when it selects a field this module does not know."""
    type_name, fields = selected
    leaves = _LEAVES.get(type_name, {})
    out.add(depth, f"{target} = {{}}")
    for key, name, sub in fields:
        slot = f"{target}[{key!r}]"
        if name == "__typename":
            out.add(depth, f"{slot} = {type_name!r}")
        elif name in leaves:
            expression, test, nullable = leaves[name]
            out.add(depth, f"v = {expression}")
            check = f"v is not None and not ({test})" if nullable else f"not ({test})"
            out.add(depth, f"if {check}:")
            out.add(depth + 1, "raise Abandon")
            out.add(depth, f"{slot} = v")
        elif (type_name, name) == ("Media", "artists"):
            # Media.from_record's list(m.artists); each a str, or graphql-core answers.
            out.add(depth, "v = list(m.artists)")
            out.add(depth, "for a in v:")
            out.add(depth + 1, "if type(a) is not str:")
            out.add(depth + 2, "raise Abandon")
            out.add(depth, f"{slot} = v")
        elif sub is not None and (type_name, name) == ("PlaylistEntryConnection", "edges"):
            items = out.name()
            out.add(depth, f"{items} = []")
            out.add(depth, "for e in page.items:")
            _read_each(out, depth + 1)
            edge = out.name()
            if not _object(out, depth + 1, sub, edge):
                return False
            out.add(depth + 1, f"{items}.append({edge})")
            out.add(depth, f"{slot} = {items}")
        elif sub is not None and (type_name, name) in _NESTED:
            nested = out.name()
            if not _object(out, depth, sub, nested):
                return False
            out.add(depth, f"{slot} = {nested}")
        elif sub is not None and (type_name, name) == ("PlaylistEntry", "media"):
            # entries.entry_connection: a media the catalog does not know (or a
            # falsy record) is null.
            media = out.name()
            out.add(depth, "m = media.get(e.media_id)")
            out.add(depth, "if not m:")
            out.add(depth + 1, f"{slot} = None")
            out.add(depth, "else:")
            if not _object(out, depth + 1, sub, media):
                return False
            out.add(depth + 1, f"{slot} = {media}")
        else:
            return False
    return True


def _read_each(out: _Source, depth: int) -> None:
    """The cursor and global id of ``e``, which the objects' path makes for every entry
    of the page whatever is selected: a row that fails there fails here too."""
    out.add(depth, "c, g = cursor_and_id(pid, e.position_key, e.entry_id)")


def _selects_media(selected: Selected) -> bool:
    type_name, fields = selected
    if type_name == "PlaylistEntry" and any(name == "media" for _, name, _ in fields):
        return True
    return any(sub is not None and _selects_media(sub) for _, _, sub in fields)


def _build(selected: Selected, schema: GraphQLSchema) -> Callable[..., dict[str, Any]] | None:
    """``build(pid, page, media) → the connection's completed value``, or ``None``."""
    if selected[0] != "PlaylistEntryConnection":
        return None
    out = _Source()
    out.add(0, "def build(pid, page, media):")
    if not any(name == "edges" for _, name, _ in selected[1]):
        out.add(1, "for e in page.items:")
        _read_each(out, 2)
    if not _object(out, 1, selected, "result"):
        return None
    out.add(1, "return result")
    date = schema.get_type("DateTime")
    if not isinstance(date, GraphQLScalarType):
        return None
    scope: dict[str, Any] = {
        "Abandon": Abandon,
        "Undefined": Undefined,
        "cursor_and_id": ids.entry_cursor_and_global_id,
        "edge_cursor": entry_cursor,
        "date": _nullable(date.coerce_output_value),
    }
    code = compile("\n".join(out.lines), "<entry rows>", "exec")
    exec(code, scope)  # source from the table above; response keys enter only through repr
    build: Callable[..., dict[str, Any]] = scope["build"]
    return build


def _nullable(serialize: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A scalar's serializer that gives ``None`` for ``None`` (then refused as non-null)."""

    def coerce(value: Any) -> Any:
        return None if value is None else serialize(value)

    return coerce


def connection_plan(page_of: PageOf) -> FieldPlan:
    """The field plan of an ``entries`` field whose resolver reads ``page_of``'s page and
    answers :func:`chorus.graphql.schema.common.entries.entry_connection` of it.

    Args:
        page_of: the resolver's page read, given the field's source, the request's
            context and the field's arguments by GraphQL name.
    """

    def plan(
        selected: Selected, schema: GraphQLSchema
    ) -> Callable[[Any, Any, dict[str, Any]], Any] | None:
        build = _build(selected, schema)
        if build is None:
            return None
        with_media = _selects_media(selected)

        async def answer(source: Any, context: Any, arguments: dict[str, Any]) -> Any:
            page = await page_of(source, context, arguments)
            media = await queries.media_of(context, page.items) if with_media else {}
            # As entry_connection: a batch woke every page at once (loop_turns).
            await loop_turns.share()
            return build(source.record.id, page, media)

        return answer

    return plan


__all__ = ["PageOf", "connection_plan"]
