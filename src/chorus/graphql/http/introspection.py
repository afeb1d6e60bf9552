"""Answers of introspection-only operations, kept for as long as the process runs."""

from __future__ import annotations

from collections import OrderedDict

from chorus.caches.memo_keys import IntrospectionKey, introspection_key
from chorus.graphql.http.caching import HttpOperation
from chorus.resolvers import cached_answers


class IntrospectionAnswers:
    """Answers of introspection-only operations, by document, operation name and variables.

    Such an answer is the schema's, the same for everyone, token or not, for as
    long as the process runs: it is kept (LRU, :data:`MAX_INTROSPECTIONS`) and
    served without parsing or executing. Executing GraphiQL's introspection
    query took ~17 ms of the loop: 100 clients without a token sending it held
    ``/healthz`` for seconds. An answer that names the viewer's budget
    (``throttleStatus``) is not kept. Keys: :func:`chorus.caches.memo_keys.introspection_key`.

    ``enabled=False`` (``CHORUS_INTROSPECTION_ANSWERS=false``) keeps nothing:
    every introspection executes, the plain twin this memo is tested against
    (``tests/integration/test_fast_paths_differential.py``).
    """

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._kept: OrderedDict[IntrospectionKey, tuple[bytes, str]] = OrderedDict()

    def _key(
        self, operation: HttpOperation, canonical: str | None = None
    ) -> IntrospectionKey | None:
        if not self.enabled:
            return None
        return introspection_key(
            operation.document, operation.operation_name, operation.variables, canonical=canonical
        )

    def get(
        self, operation: HttpOperation, canonical: str | None = None
    ) -> tuple[bytes, str] | None:
        """The kept body and its ``ETag``, if any (``canonical``: the variables' canonical
        text, when known already)."""
        key = self._key(operation, canonical)
        found = self._kept.get(key) if key is not None else None
        if found is not None and key is not None:
            self._kept.move_to_end(key)
        return found

    def keep(self, operation: HttpOperation, body: bytes) -> None:
        """Keep ``body``, an error-free answer of the introspection-only ``operation``."""
        key = self._key(operation)
        if key is None or len(body) > MAX_INTROSPECTION_BYTES or b"throttleStatus" in body:
            return
        self._kept[key] = body, cached_answers.etag_of(body)
        self._kept.move_to_end(key)
        while len(self._kept) > MAX_INTROSPECTIONS:
            self._kept.popitem(last=False)


MAX_INTROSPECTIONS = 32
"""Introspection answers kept (a client generator's, GraphiQL's, a few tools')."""

MAX_INTROSPECTION_BYTES = 1 << 20
"""A longer introspection answer is not kept."""


__all__ = ["MAX_INTROSPECTIONS", "MAX_INTROSPECTION_BYTES", "IntrospectionAnswers"]
