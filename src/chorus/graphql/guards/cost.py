"""Query cost: what one operation may ask of the server, computed before it runs.

The model (GitHub's and Shopify's, simplified):

* a scalar or enum field costs 0 (it comes with its object);
* an object, interface or union field costs 1 plus the cost of its selection;
* a field with a page size (``first`` or ``last``; the default page size
  when neither is given; above the maximum page size counted at the
  maximum, which the field then refuses) pays the cost of its list-typed
  children (``edges``, ``versions``) once per item of the page: a
  connection costs ``1 + page size × (cost of an edge) + the rest``;
* the entries of one version (``EntriesAdded.entries``,
  ``EntriesMoved.entries``) are counted at the largest page size (100, the
  same as ``CHORUS_MAX_MEDIA_PER_ADD`` and the per-edit limit): a version
  may hold that many, so ``changes(first: 100)`` selecting them counts
  100 × 100 entries (a sync that selects entries pages fewer versions);
  a batch or a revert may hold up to ``max_batch_entries``, and what a
  version read holds beyond 100 is charged as it runs (``actualQueryCost``;
  the page of versions stops before the limit would be passed:
  :func:`chorus.resolvers.queries.changes`); a rebalance may move more,
  which this does not count;
* a read of an older version (``Playlist.atVersion``) undoes up to
  ``CHECKPOINT_EVERY`` log rows before it returns anything: it costs twice
  the largest page size (200) more than its selection (bench/history.py:
  such a read with 50 entries takes about 4–5× ``entries(first: 50)`` at the
  head, which costs 101), so 30 aliases of it are over the limit; the
  entries its rewind undoes beyond 400 are charged as it runs, one point
  per 2 (:func:`chorus.resolvers.queries.playlist_at`);
* ``Playlist.totalDurationMs``, a scalar that reads every live entry's media
  id and their catalog durations (once per version: a memo), costs the
  default page size (50), as a page of entries with its media would;
* ``User.playlists`` is read with a query of its own for every user it is
  asked of (no batch): it costs the default page size (50) more than its
  selection (``OWN_READ_FIELDS``);
* an edit's payload ``entries`` are counted at the most one edit may place
  (``EDIT_LISTS``, ``max_edit_entries``: 100), a batch operation's at the
  most a whole batch may place (``BATCH_LISTS``, ``max_batch_entries``:
  1,000): a selection under each entry is paid for each;
* any other list without a page size of its own (a version's ``changes``,
  whose alternatives are added up below; ``userErrors``; a batch's
  ``results``) is counted as one item;
* a fragment is expanded wherever it is spread, but its cost is computed
  once per request (variables resolved) and reused: the cost of a fragment
  bomb is found in time linear in the document;
* a union's alternatives (``... on EntriesAdded``, ``... on EntriesMoved``)
  are added up, not maximised: an over-estimate, never an under-estimate.

A page size given by a variable counts at the value sent (an integral
float as the integer graphql-core's ``Int`` makes of it), or at the
variable's default when none was sent; a variable sent as ``null`` is
``null`` (its default does not apply), which asks for the default page
size, as the field then runs it.

A mutation costs the same way: 1 for the field plus its payload selection.
A subscription's selection is costed like a query: it runs for every event,
so it may not cost more than a query may (``feedEvents { playlist {
changes(…) } }`` would otherwise read without a limit).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLCompositeType,
    GraphQLField,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SchemaMetaFieldDef,
    SelectionSetNode,
    TypeMetaFieldDef,
    VariableNode,
    get_named_type,
    get_nullable_type,
    get_operation_ast,
    is_composite_type,
)

from chorus.caches.memo_keys import CostMemoKey, cost_memo_key, read_values_key
from chorus.graphql.guards.document_limits import RequestLimits

PAGE_ARGUMENTS = ("first", "last")
"""The arguments that set a field's page size."""

VERSION_LISTS = frozenset({("EntriesAdded", "entries"), ("EntriesMoved", "entries")})
"""Unpaged lists of one version's entries, counted at the largest page size."""

REPLAYING_FIELDS = frozenset({("Playlist", "atVersion")})
"""Fields that undo the mutation log: each costs twice the largest page size more."""

SUMMING_FIELDS = frozenset({("Playlist", "totalDurationMs")})
"""Scalars that sum a whole playlist: each costs the default page size."""

EDIT_LISTS = frozenset({("AddEntriesPayload", "entries"), ("MoveEntriesPayload", "entries")})
"""A payload's list of the entries one edit placed: counted at the most one edit may place
(:attr:`RequestLimits.max_edit_entries`). Counted as one item, a selection under each entry
(``addedBy { playlists { … entries … } }``) was paid once and run a hundred times."""

BATCH_LISTS = frozenset({("BatchOperationPayload", "entries")})
"""A batch operation's entries: counted at the most a whole batch may place
(:attr:`RequestLimits.max_batch_entries`), the bound of all its operations' lists together
(``results`` itself is counted as one item)."""

OWN_READ_FIELDS = frozenset({("User", "playlists")})
"""Connections read with a query of their own per parent (no batch): each costs the
default page size more. Under a page of entries (``addedBy { playlists }``), 2,400 of
them at a point or two each ran for 4–8 s inside the limit; measured, one costs
about what a page of 50 entries with media does."""


@dataclass(frozen=True, slots=True)
class _Part:
    """The cost of a selection set, split by what the enclosing field multiplies."""

    once: int = 0
    """Non-list children: paid once."""
    per_item: int = 0
    """List-typed children: paid once per item of the enclosing page."""

    def __add__(self, other: _Part) -> _Part:
        return _Part(self.once + other.once, self.per_item + other.per_item)


@dataclass(slots=True)
class CostCounter:
    """Computes costs under one request's variables, each fragment once.

    ``visits`` counts the selection sets walked: at most one per selection
    set written in the document, however often its fragments are spread.
    """

    schema: GraphQLSchema
    fragments: dict[str, FragmentDefinitionNode]
    variables: dict[str, Any]
    page_size_default: int
    page_size_max: int
    max_edit_entries: int
    max_batch_entries: int
    visits: int = 0
    _done: dict[str, _Part] = field(default_factory=dict)
    _open: set[str] = field(default_factory=set)

    def selection(self, selection_set: SelectionSetNode, parent: GraphQLCompositeType) -> _Part:
        self.visits += 1
        total = _Part()
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                cost, is_list = self._field(selection, parent)
                total += _Part(per_item=cost) if is_list else _Part(once=cost)
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                inner = self._type(condition.name.value) if condition else parent
                if inner is not None:
                    total += self.selection(selection.selection_set, inner)
            elif isinstance(selection, FragmentSpreadNode):
                total += self._fragment(selection.name.value)
        return total

    def _fragment(self, name: str) -> _Part:
        if name in self._done:
            return self._done[name]
        fragment = self.fragments.get(name)
        if fragment is None or name in self._open:
            return _Part()  # unknown or cyclic: refused by validation
        on = self._type(fragment.type_condition.name.value)
        self._open.add(name)
        part = self.selection(fragment.selection_set, on) if on is not None else _Part()
        self._open.discard(name)
        self._done[name] = part
        return part

    def _type(self, name: str) -> GraphQLCompositeType | None:
        found = self.schema.get_type(name)
        return found if is_composite_type(found) else None

    def _field(self, node: FieldNode, parent: GraphQLCompositeType) -> tuple[int, bool]:
        """``(cost, whether the field is a list)``."""
        definition = _definition(self.schema, parent, node.name.value)
        if definition is None:
            return 0, False  # __typename, or a field validation refused
        is_list = isinstance(get_nullable_type(definition.type), GraphQLList)
        named = get_named_type(definition.type)
        key = (parent.name, node.name.value)
        if key in SUMMING_FIELDS:
            return self.page_size_default, is_list
        if node.selection_set is None or not is_composite_type(named):
            return 0, is_list
        part = self.selection(node.selection_set, named)
        size = self._page_size(node, definition)
        cost = 1 + part.once + (size if size is not None else 1) * part.per_item
        if key in VERSION_LISTS:
            cost *= self.page_size_max
        if key in EDIT_LISTS:
            cost *= self.max_edit_entries
        if key in BATCH_LISTS:
            cost *= self.max_batch_entries
        if key in REPLAYING_FIELDS:
            cost += 2 * self.page_size_max
        if key in OWN_READ_FIELDS:
            cost += self.page_size_default
        return cost, is_list

    def _page_size(self, node: FieldNode, definition: GraphQLField) -> int | None:
        """The page size a field asks for; ``None`` for a field without one."""
        if not any(name in definition.args for name in PAGE_ARGUMENTS):
            return None
        sizes = []
        for argument in node.arguments or ():
            if argument.name.value not in PAGE_ARGUMENTS:
                continue
            value: object = None
            if isinstance(argument.value, IntValueNode):
                value = int(argument.value.value)
            elif isinstance(argument.value, VariableNode):
                value = self.variables.get(argument.value.name.value)
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # graphql-core's Int takes 100.0 (or 1e2) as 100
            if isinstance(value, int) and not isinstance(value, bool):
                sizes.append(min(max(value, 0), self.page_size_max))
        return max(sizes) if sizes else self.page_size_default


def _definition(
    schema: GraphQLSchema, parent: GraphQLCompositeType, name: str
) -> GraphQLField | None:
    if name == "__schema" and parent is schema.query_type:
        return SchemaMetaFieldDef
    if name == "__type" and parent is schema.query_type:
        return TypeMetaFieldDef
    if isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
        found: GraphQLField | None = parent.fields.get(name)
        return found
    return None


@dataclass(frozen=True, slots=True)
class OperationCost:
    cost: int
    introspection_only: bool
    """Every root field is ``__schema``, ``__type`` or ``__typename``: never charged."""
    visits: int
    """Selection sets walked to compute it (linear in the document)."""


def operation_cost(
    schema: GraphQLSchema,
    document: DocumentNode,
    operation_name: str | None,
    variables: dict[str, Any] | None,
    limits: RequestLimits,
) -> OperationCost | None:
    """The cost of the operation a request runs; ``None`` when there is no such operation.

    Args:
        variables: the request's variables, as sent (an unusable page size
            counts as the default; the field refuses it when it runs).

    A kept document comes again and again with other variables: its cost is
    remembered under the values of the variables the count read (the page
    sizes; the walk reads the same ones whatever their values), for as long
    as the document lives (:class:`_Memo`).
    """
    operation = get_operation_ast(document, operation_name)
    if operation is None:
        return None
    root = schema.get_root_type(operation.operation)
    if root is None:
        return None
    sent = variables or {}
    # A default is what runs when the variable is not sent. One sent as null is null
    # (GraphQL spec, CoerceVariableValues): a page size of null asks for the default page.
    defaults = {
        d.variable.name.value: int(d.default_value.value)
        for d in operation.variable_definitions or ()
        if isinstance(d.default_value, IntValueNode) and d.variable.name.value not in sent
    }
    values = _Reads({**sent, **defaults})
    memo = _Memo.of(
        document,
        cost_memo_key(
            schema,
            operation_name,
            limits.page_size_default,
            limits.page_size_max,
            limits.max_edit_entries,
            limits.max_batch_entries,
        ),
    )
    key = memo.key(values)
    if key is not None and (known := memo.costs.get(key)) is not None:
        return known
    counter = CostCounter(
        schema,
        {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)},
        values,
        limits.page_size_default,
        limits.page_size_max,
        limits.max_edit_entries,
        limits.max_batch_entries,
    )
    part = counter.selection(operation.selection_set, root)
    introspection = all(name.startswith("__") for name in root_fields(document, operation))
    found = OperationCost(part.once + part.per_item, introspection, counter.visits)
    memo.keep(values, found)
    return found


class _Reads(dict[str, Any]):
    """Variables that note which of them were read (``read``), by ``get``, ``[]`` or ``in``:
    a remembered cost holds only for the values of what the count read."""

    __slots__ = ("read",)

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


@dataclass(slots=True)
class _Memo:
    """One document's costs (per schema, operation name and page sizes), by the values
    of the variables the count read; it goes when the document does."""

    reads: tuple[str, ...] | None = None
    """The variables the count reads (``None``: not counted yet)."""
    costs: dict[tuple[Any, ...], OperationCost] = field(default_factory=dict)
    """By :func:`chorus.caches.memo_keys.read_values_key` of the variables read."""

    KEPT_COSTS = 64
    """Costs kept per document and operation: a client paging with many sizes churns them."""

    @classmethod
    def of(cls, document: DocumentNode, key: CostMemoKey) -> _Memo:
        # By identity: a node's hash and equality walk the whole tree. The
        # weak reference's callback drops the entry before the id can be reused.
        entry = _MEMOS.get(id(document))
        if entry is None or entry[0]() is not document:
            ident = id(document)
            entry = (weakref.ref(document, lambda _: _MEMOS.pop(ident, None)), {})
            _MEMOS[ident] = entry
        memo = entry[1].get(key)
        if memo is None:
            memo = entry[1][key] = cls()
        return memo

    def key(self, values: _Reads) -> tuple[Any, ...] | None:
        """The key of ``values`` (``None``: not counted yet, or a value that is not hashable)."""
        if self.reads is None:
            return None
        return read_values_key(self.reads, values)

    def keep(self, values: _Reads, found: OperationCost) -> None:
        self.reads = tuple(sorted(values.read))
        key = self.key(values)
        if key is None:
            return
        if len(self.costs) >= self.KEPT_COSTS:
            self.costs.clear()
        self.costs[key] = found


_MEMOS: dict[int, tuple[weakref.ref[DocumentNode], dict[CostMemoKey, _Memo]]] = {}
"""``id(document)`` → (the document, its memos by schema, operation name and page sizes)."""


def root_fields(document: DocumentNode, operation: OperationDefinitionNode) -> Iterator[str]:
    """Names of the operation's root fields, through its fragments (each visited once).

    Any parsed document will do, valid or not: an unknown fragment is skipped
    and a fragment spread twice (or in a cycle) is walked once.
    """
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    pending, seen = [operation.selection_set], set[str]()
    while pending:
        for selection in pending.pop().selections:
            if isinstance(selection, FieldNode):
                yield selection.name.value
            elif isinstance(selection, InlineFragmentNode):
                pending.append(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in fragments and name not in seen:
                    seen.add(name)
                    pending.append(fragments[name].selection_set)


__all__ = ["OperationCost", "operation_cost", "root_fields"]
