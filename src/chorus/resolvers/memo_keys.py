"""The keys of the API process's memos (:mod:`chorus.caches.memo_keys`), for ``graphql/``.

``graphql/`` reaches the caches only through the resolvers (the import
contracts in ``pyproject.toml``); the keys are built in ``caches/`` alone.
"""

from __future__ import annotations

from chorus.caches.memo_keys import (
    CostMemoKey,
    IntrospectionKey,
    VersionedFieldsKey,
    cost_memo_key,
    introspection_key,
    read_values_key,
    versioned_fields_key,
)

__all__ = [
    "CostMemoKey",
    "IntrospectionKey",
    "VersionedFieldsKey",
    "cost_memo_key",
    "introspection_key",
    "read_values_key",
    "versioned_fields_key",
]
