"""Request-level limits on a document: its shape, its depth and its aliases.

Every check here is linear in the document's size: a fragment is walked once
and its result (depth, alias count) memoised, however often it is spread.
A document whose fragments each spread the next twice expands to 2^n copies;
walking the expansion (as strawberry's alias limiter does) would hold the
event loop for seconds on a 1 KB request.

The checks of a document's shape before validation are in
:mod:`chorus.graphql.guards.shape`, built on :class:`FragmentFolder`.

Depth counts the fields on the longest path of an operation, fragments
expanded, ``__schema`` and ``__type`` included, so a nested introspection
query (``types { fields { type { fields … } } }``) is bounded like any other.
One exception: ``ofType`` only unwraps a list or non-null type, its
nesting is bounded by the schema's own wrapping, so it adds no depth; this
keeps the standard introspection query of GraphiQL and client generators
(depth 6 by this count) within the limit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
)
from strawberry.extensions import AddValidationRules


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """The limits every GraphQL request is held to (docs/limits.md, Request limits).

    ``max_fragments``, ``max_fragment_spreads``, ``max_expanded_fields``, ``max_query_cost``,
    ``page_size_default``, ``page_size_max`` and ``max_batch_entries`` come from the
    settings of the same names, ``max_edit_entries`` from the edits' limits; the rest are
    fixed.
    """

    max_depth: int = 12
    """Fields on an operation's longest path (fragments expanded)."""
    max_aliases: int = 30
    """Aliased fields of the document, fragments expanded."""
    max_tokens: int = 5_000
    """Lexical tokens of the document; checked while parsing, before any validation rule."""
    max_operations: int = 20
    """Operation definitions in one document (one runs; a client rarely sends more than a few)."""
    max_fragments: int = 50
    """Fragment definitions in one document."""
    max_fragment_spreads: int = 100
    """``...Name`` spreads in one document, as written (not expanded)."""
    max_expanded_fields: int = 10_000
    """Fields of the document with every fragment spread expanded (a fragment bomb's size)."""
    max_same_name_fields: int = 20
    """Fields of one response name in one selection set, its inline fragments included;
    also fields with a selection of one response name there, fragments spread in it included."""
    max_schema_fields: int = 1
    """``__schema`` fields of an operation, fragments expanded (one is a whole introspection)."""
    max_type_fields: int = 10
    """``__type`` fields of an operation, fragments expanded."""
    max_query_cost: int = 10_000
    """Largest cost of one operation (:mod:`chorus.graphql.guards.cost`)."""
    page_size_default: int = 50
    """The page size a connection without ``first``/``last`` is counted at."""
    page_size_max: int = 100
    """The largest page size a connection is counted at (a larger one is refused)."""
    max_edit_entries: int = 100
    """The most entries one edit's payload lists (``CHORUS_MAX_MEDIA_PER_ADD``,
    ``CHORUS_MAX_ENTRIES_PER_EDIT``, the larger)."""
    max_batch_entries: int = 1_000
    """The most entries one batch's payloads list in all (``CHORUS_MAX_BATCH_ENTRIES``)."""


def fragment_definitions(document: DocumentNode) -> dict[str, FragmentDefinitionNode]:
    return {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}


class FragmentFolder:
    """Folds a value over selection sets, each fragment's value computed once.

    ``combine(selection_set, fold)`` computes one selection set's value,
    calling ``fold.spread(name)`` for a fragment spread; a spread of a
    fragment already being computed (a cycle, refused by
    ``NoFragmentCyclesRule``) or unknown is ``empty``. ``visits`` counts
    the selection sets walked, for tests that prove linear time.
    """

    def __init__(
        self,
        fragments: dict[str, FragmentDefinitionNode],
        combine: Callable[[SelectionSetNode, FragmentFolder], int],
        empty: int = 0,
    ) -> None:
        self._fragments = fragments
        self._combine = combine
        self._empty = empty
        self._done: dict[str, int] = {}
        self._open: set[str] = set()
        self.visits = 0

    def of(self, selection_set: SelectionSetNode | None) -> int:
        if selection_set is None:
            return self._empty
        self.visits += 1
        return self._combine(selection_set, self)

    def spread(self, name: str) -> int:
        if name in self._done:
            return self._done[name]
        fragment = self._fragments.get(name)
        if fragment is None or name in self._open:
            return self._empty
        self._open.add(name)
        value = self.of(fragment.selection_set)
        self._open.discard(name)
        self._done[name] = value
        return value


def _depth(selection_set: SelectionSetNode, fold: FragmentFolder) -> int:
    deepest = 0
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            own = 0 if selection.name.value == "ofType" else 1
            deepest = max(deepest, own + fold.of(selection.selection_set))
        elif isinstance(selection, FragmentSpreadNode):
            deepest = max(deepest, fold.spread(selection.name.value))
        elif isinstance(selection, InlineFragmentNode):
            deepest = max(deepest, fold.of(selection.selection_set))
    return deepest


def _aliases(selection_set: SelectionSetNode, fold: FragmentFolder) -> int:
    count = 0
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            count += (selection.alias is not None) + fold.of(selection.selection_set)
        elif isinstance(selection, FragmentSpreadNode):
            count += fold.spread(selection.name.value)
        elif isinstance(selection, InlineFragmentNode):
            count += fold.of(selection.selection_set)
    return count


def _fields(selection_set: SelectionSetNode, fold: FragmentFolder) -> int:
    count = 0
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            count += 1 + fold.of(selection.selection_set)
        elif isinstance(selection, FragmentSpreadNode):
            count += fold.spread(selection.name.value)
        elif isinstance(selection, InlineFragmentNode):
            count += fold.of(selection.selection_set)
    return count


def over_operations(
    document: DocumentNode, combine: Callable[[SelectionSetNode, FragmentFolder], int]
) -> tuple[int, int]:
    """``(sum of combine over the operations, selection sets visited)``."""
    fold = FragmentFolder(fragment_definitions(document), combine)
    total = sum(
        fold.of(d.selection_set)
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode)
    )
    return total, fold.visits


def expanded_fields(document: DocumentNode) -> tuple[int, int]:
    """``(fields of every operation with fragments expanded, selection sets visited)``.

    Linear time: the visits are at most the selection sets written.
    """
    return over_operations(document, _fields)


def selection_depth(
    selection_set: SelectionSetNode | None, fragments: dict[str, FragmentDefinitionNode]
) -> int:
    """Fields on the longest path below ``selection_set``, fragments expanded (linear time)."""
    return FragmentFolder(fragments, _depth).of(selection_set)


def alias_count(document: DocumentNode) -> int:
    """Aliased fields of every operation of ``document``, fragments expanded (linear time)."""
    return over_operations(document, _aliases)[0]


@functools.cache
def depth_rule(max_depth: int) -> type[ValidationRule]:
    """A validation rule refusing operations deeper than ``max_depth`` fields."""

    class DepthRule(ValidationRule):
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(context)
            document = context.document
            fold = FragmentFolder(fragment_definitions(document), _depth)
            for definition in document.definitions:
                if not isinstance(definition, OperationDefinitionNode):
                    continue
                depth = fold.of(definition.selection_set)
                if depth > max_depth:
                    name = definition.name.value if definition.name else "anonymous"
                    context.report_error(
                        GraphQLError(
                            f"operation {name!r} is {depth} fields deep; the limit is {max_depth}",
                            definition,
                        )
                    )

    return DepthRule


@functools.cache
def alias_rule(max_aliases: int) -> type[ValidationRule]:
    """A validation rule refusing documents with more than ``max_aliases`` aliases.

    Replaces strawberry's ``MaxAliasesLimiter`` (same message), which walks a
    fragment again at every spread: exponential time on a fragment bomb.
    Built once per limit, so every request's rule set is the same tuple and
    the validation cache keeps working.
    """

    class AliasRule(ValidationRule):
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(context)
            total = alias_count(context.document)
            if total > max_aliases:
                context.report_error(GraphQLError(f"{total} aliases found. Allowed: {max_aliases}"))

    return AliasRule


class QueryDepthLimit(AddValidationRules):
    """Refuses operations deeper than ``max_depth`` fields (a strawberry extension)."""

    def __init__(self, max_depth: int) -> None:
        super().__init__([depth_rule(max_depth)])


class QueryAliasLimit(AddValidationRules):
    """Refuses documents with more than ``max_aliases`` aliases (a strawberry extension)."""

    def __init__(self, max_aliases: int) -> None:
        super().__init__([alias_rule(max_aliases)])


SEVERAL_OPERATIONS = "the document holds several operations: give operationName"
"""The refusal of a document of several operations sent without ``operationName``."""


class OneOperationUnlessNamed(ValidationRule):
    """A document with several operations needs ``operationName`` (GraphQL spec, GetOperation)."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        operations = [
            d for d in context.document.definitions if isinstance(d, OperationDefinitionNode)
        ]
        if len(operations) > 1:
            context.report_error(GraphQLError(SEVERAL_OPERATIONS))


class RequireOperationName(AddValidationRules):
    """Adds :class:`OneOperationUnlessNamed` when the request names no operation."""

    def __init__(self) -> None:
        super().__init__([OneOperationUnlessNamed])

    def on_operation(self) -> Iterator[None]:
        if self.execution_context.operation_name is None:
            yield from super().on_operation()
        else:
            yield
