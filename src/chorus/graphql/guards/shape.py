"""The shape of a document, checked before any validation rule runs.

:class:`DocumentShapeLimit` refuses a document with too many fragment
definitions or spreads, too many fields of one response name in one
selection set (as written, or merged from the fragments spread there), more
than one ``__schema`` or ten ``__type`` fields, or too many fields once
fragments are expanded. These bound the input of graphql-core's
``OverlappingFieldsCanBeMergedRule``, which compares fields pairwise
(quadratic: 600 ``user { id }`` side by side, within the 5,000-token limit,
took 1.2 s to validate; 50 fragments each selecting ``playlists { … }``
spread side by side about 1 s). Every count is linear in the document: a
fragment's counts are computed once
(:class:`~chorus.graphql.guards.document_limits.FragmentFolder`).

Input objects are bounded too: an object literal, or an object in the
request's variables, with more than :data:`MAX_OBJECT_FIELDS` fields is
refused. graphql-core reports each unknown field of an input object with the
whole object printed into its message: 1,600 unknown fields in 13 KB took
16 s of validation, quadratic in the fields.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    ObjectValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    Visitor,
    visit,
)
from strawberry.extensions import SchemaExtension

if TYPE_CHECKING:
    from chorus.graphql.guards.documents import DocumentCache

from chorus.graphql.guards.document_limits import (
    FragmentFolder,
    RequestLimits,
    expanded_fields,
    fragment_definitions,
    over_operations,
)


def _named(name: str) -> Callable[[SelectionSetNode, FragmentFolder], int]:
    """A fold counting the fields called ``name`` (aliases do not hide them)."""

    def count(selection_set: SelectionSetNode, fold: FragmentFolder) -> int:
        total = 0
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                total += (selection.name.value == name) + fold.of(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                total += fold.spread(selection.name.value)
            elif isinstance(selection, InlineFragmentNode):
                total += fold.of(selection.selection_set)
        return total

    return count


class MergedSelections:
    """Fields with a selection, by response name, that one selection set merges.

    These are what graphql-core's ``OverlappingFieldsCanBeMergedRule``
    compares pairwise and then recurses into: the set's own fields (inline
    fragments flattened) and those of every fragment spread in it, each
    distinct fragment once. Fifty fragments that each select
    ``playlists { … }``, spread side by side, are 1,225 such pairs, each
    compared all the way down: seconds of validation for 8 KB. A
    fragment's names are computed once.
    """

    def __init__(self, fragments: dict[str, FragmentDefinitionNode]) -> None:
        self._fragments = fragments
        self._done: dict[str, Counter[str]] = {}
        self._open: set[str] = set()

    def of(self, selection_set: SelectionSetNode) -> Counter[str]:
        names: Counter[str] = Counter()
        spread: set[str] = set()
        for selection in _flattened(selection_set):
            if isinstance(selection, FragmentSpreadNode):
                if selection.name.value not in spread:
                    spread.add(selection.name.value)
                    names.update(self._fragment(selection.name.value))
            elif selection.selection_set is not None:
                names[(selection.alias or selection.name).value] += 1
        return names

    def _fragment(self, name: str) -> Counter[str]:
        if name in self._done:
            return self._done[name]
        fragment = self._fragments.get(name)
        if fragment is None or name in self._open:
            return Counter()  # unknown or cyclic: refused by validation
        self._open.add(name)
        names = self.of(fragment.selection_set)
        self._open.discard(name)
        self._done[name] = names
        return names


def _flattened(selection_set: SelectionSetNode) -> Iterator[FieldNode | FragmentSpreadNode]:
    """The fields and spreads of ``selection_set``, its inline fragments flattened into it."""
    pending = [selection_set]
    while pending:
        for selection in pending.pop().selections:
            if isinstance(selection, InlineFragmentNode):
                pending.append(selection.selection_set)
            elif isinstance(selection, FieldNode | FragmentSpreadNode):
                yield selection


MAX_OBJECT_FIELDS = 64
"""Fields of one input object, in the document or the variables (the schema's largest has 8)."""


class _ObjectFields(Visitor):
    """The largest object literal of a document, in fields."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def enter_object_value(self, node: ObjectValueNode, *_: object) -> None:
        self.largest = max(self.largest, len(node.fields))


def object_fields_error(document: DocumentNode, variables: object) -> str | None:
    """Why an input object of ``document`` or ``variables`` is too large, or ``None``."""
    literals = _ObjectFields()
    visit(document, literals)
    if literals.largest > MAX_OBJECT_FIELDS:
        return (
            f"an input object of the document has {literals.largest} fields; "
            f"the limit is {MAX_OBJECT_FIELDS}"
        )
    return variables_object_error(variables)


def variables_object_error(variables: object) -> str | None:
    """Why an object in ``variables`` (a request's, any JSON) is too large, or ``None``."""
    # The variables object holds one entry per variable, bounded by the document.
    pending = list(variables.values()) if isinstance(variables, dict) else [variables]
    largest = 0
    while pending:  # already bounded in depth and size (nesting.py, the body limit)
        value = pending.pop()
        if isinstance(value, dict):
            largest = max(largest, len(value))
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    if largest > MAX_OBJECT_FIELDS:
        return f"an object in the variables has {largest} fields; the limit is {MAX_OBJECT_FIELDS}"
    return None


def shape_error(document: DocumentNode, limits: RequestLimits) -> str | None:
    """Why ``document`` is refused before validation, or ``None``; one linear walk.

    Counts operation and fragment definitions, fragment spreads as written, the fields
    sharing one response name in each selection set (inline fragments
    flattened into the set they sit in), the fields with a selection of one
    response name a set merges through its fragments
    (:class:`MergedSelections`), the ``__schema`` and ``__type`` fields,
    then the fields the operations expand to (each fragment counted once and
    multiplied by its spreads). Each fragment's counts are computed once.
    """
    operations = sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)
    if operations > limits.max_operations:
        return f"{operations} operations defined; the limit is {limits.max_operations}"
    fragments = sum(isinstance(d, FragmentDefinitionNode) for d in document.definitions)
    if fragments > limits.max_fragments:
        return f"{fragments} fragments defined; the limit is {limits.max_fragments}"
    merged = MergedSelections(fragment_definitions(document))
    spreads = 0
    pending: list[SelectionSetNode] = [
        d.selection_set
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode | FragmentDefinitionNode)
    ]
    while pending:
        selection_set = pending.pop()
        names: Counter[str] = Counter()
        for selection in _flattened(selection_set):
            if isinstance(selection, FragmentSpreadNode):
                spreads += 1
                continue
            names[(selection.alias or selection.name).value] += 1
            if selection.selection_set is not None:
                pending.append(selection.selection_set)
        if spreads > limits.max_fragment_spreads:
            return f"more than {limits.max_fragment_spreads} fragment spreads; spread fewer"
        repeated = names.most_common(1)
        if repeated and repeated[0][1] > limits.max_same_name_fields:
            name, repeats = repeated[0]
            return (
                f"field {name!r} is selected {repeats} times in one selection set; "
                f"the limit is {limits.max_same_name_fields}"
            )
        repeated = merged.of(selection_set).most_common(1)
        if repeated and repeated[0][1] > limits.max_same_name_fields:
            name, repeats = repeated[0]
            return (
                f"field {name!r} is selected {repeats} times in one selection set "
                f"through its fragments; the limit is {limits.max_same_name_fields}"
            )
    for name, limit in (("__schema", limits.max_schema_fields), ("__type", limits.max_type_fields)):
        found, _ = over_operations(document, _named(name))
        if found > limit:
            return f"{found} {name} fields; the limit is {limit} (introspect once and cache it)"
    fields, _ = expanded_fields(document)
    if fields > limits.max_expanded_fields:
        return (
            f"the document expands to {fields} fields through its fragments; "
            f"the limit is {limits.max_expanded_fields}"
        )
    return None


class DocumentShapeLimit(SchemaExtension):
    """Refuses a document by :func:`shape_error` before any validation rule runs.

    Goes before :class:`~chorus.graphql.guards.documents.CachedValidation` in the
    extension list: its refusal, set as the pre-execution errors, makes that
    extension (and strawberry) skip validation, and the document is not kept.
    """

    def __init__(self, limits: RequestLimits, documents: DocumentCache | None = None) -> None:
        self.limits = limits
        self.documents = documents

    def _passed_before(self, document: DocumentNode) -> bool:
        """Whether ``document`` is one its schema's cache kept: it passed these checks then.

        A document is kept only once it passed validation, which runs only
        after this check passed; the cache serves one schema, with these limits.
        """
        context = self.execution_context
        return (
            self.documents is not None
            and context.query is not None
            and self.documents.passed(
                context.query, context.parse_options, document, context.validation_rules
            )
        )

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        reason = None
        if document is not None and not self._passed_before(document):
            # Two walks of the document per request, for the same few documents.
            reason = shape_error(document, self.limits) or object_fields_error(document, None)
        if reason is None and document is not None:
            reason = variables_object_error(context.variables)
        if reason is not None:
            context.pre_execution_errors = [
                GraphQLError(reason, extensions={"code": "GRAPHQL_VALIDATION_FAILED"})
            ]
        yield


__all__ = [
    "MAX_OBJECT_FIELDS",
    "DocumentShapeLimit",
    "MergedSelections",
    "object_fields_error",
    "shape_error",
    "variables_object_error",
]
