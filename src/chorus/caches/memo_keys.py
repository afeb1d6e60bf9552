"""The keys of the API process's own memos: nothing else builds one.

Beside the response cache (:func:`chorus.caches.responses.response_key`) an
API process keeps three memos, each for as long as it runs:

* the answers of introspection-only operations
  (``chorus.graphql.http.introspection``): :func:`introspection_key`;
* the cost of a parsed document (``chorus.graphql.guards.cost``), per schema,
  operation and page sizes: :func:`cost_memo_key`, then by the values of the
  variables the count read: :func:`read_values_key`;
* whether a document selects only fields a playlist version names
  (``chorus.graphql.execution.cacheable_fields``): :func:`versioned_fields_key`.

This package knows nothing of GraphQL (the import contracts in
``pyproject.toml``): the keys are made of plain values, and a schema is an
opaque identity (the schema object itself, whose hash and equality are its
identity, or its ``id`` where the memo must not keep it alive).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from chorus.caches.responses import canonical_variables, operation_name_key

IntrospectionKey = tuple[str, str, str]
"""``(document text, operation name (:func:`~chorus.caches.responses.operation_name_key`),
canonical variables)``."""

CostMemoKey = tuple[Hashable, ...]
"""``(schema, operation name, default page size, largest page size)``."""

VersionedFieldsKey = tuple[Hashable, str]
"""``(schema, document text)``."""


def introspection_key(
    document: str,
    operation_name: str | None,
    variables: Mapping[str, Any] | None,
    *,
    canonical: str | None = None,
) -> IntrospectionKey | None:
    """The key of an introspection answer; ``None`` when the variables are not JSON.

    Such an answer is the schema's, the same for everyone: who asks is not in
    it. The document is its text (two spellings, two keys); the variables are
    :func:`~chorus.caches.responses.canonical_variables` (none and ``{}`` alike),
    or ``canonical`` when the caller has them already.
    """
    if canonical is not None:
        return document, operation_name_key(operation_name), canonical
    try:
        return document, operation_name_key(operation_name), canonical_variables(variables)
    except (TypeError, ValueError):
        return None


def cost_memo_key(schema: Hashable, operation_name: str | None, *sizes: int) -> CostMemoKey:
    """The key of one document's costs: everything besides the variables a count depends on
    (the schema, the operation, the page and list sizes it is counted at)."""
    return schema, operation_name, *sizes


def read_values_key(names: Iterable[str], values: dict[str, Any]) -> tuple[Any, ...] | None:
    """The values of ``names`` in ``values`` (absent: ``None``), or ``None`` if one is unhashable.

    Read with ``dict.get``: a subclass that notes what is read (the cost
    count's) does not count the key's reads as the count's own.
    """
    # Each value with its type: 1 and True, 100 and 100.0 are equal keys, not equal sizes.
    key = tuple((type(v), v) for v in (dict.get(values, name) for name in names))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def versioned_fields_key(schema: Hashable, document: str) -> VersionedFieldsKey:
    """The key of a document's verdict (its first unversioned field): its text, per schema."""
    return schema, document


__all__ = [
    "CostMemoKey",
    "IntrospectionKey",
    "VersionedFieldsKey",
    "cost_memo_key",
    "introspection_key",
    "read_values_key",
    "versioned_fields_key",
]
