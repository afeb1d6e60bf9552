"""Persisted documents: Apollo's automatic persisted queries (APQ) and registered documents.

A client may send, instead of a document's text, its SHA-256 in
``extensions.persistedQuery`` (``{"version": 1, "sha256Hash": "…"}``), over
POST or as GET query parameters — a short GET URL a CDN can cache. The
protocol (Apollo's):

* hash only, without a valid token → refused as any operation needing a
  viewer is (``UNAUTHENTICATED``), **before** the hash is looked up
  (:class:`ViewerNeeded`): the answer is the same whether the hash is known
  or not, so a client without a token cannot learn which documents others
  registered (issue 30). An introspection document by hash is refused too:
  tools introspect without a token by sending the text;
* hash only, known → the document it names runs;
* hash only, unknown → HTTP 200 with the error ``PersistedQueryNotFound``
  (``extensions.code = PERSISTED_QUERY_NOT_FOUND``); the client sends the
  hash again with the text, which registers it;
* hash and text → the hash must be the text's (else 400 ``BAD_REQUEST``);
  the document runs, and is registered when the request carries a valid
  token (anyone could otherwise fill the store: an anonymous client's
  document runs each time it is sent, but is not kept).

What clients register is bounded by count (:data:`MAX_AUTOMATIC_DOCUMENTS`)
and by bytes (:data:`MAX_AUTOMATIC_BYTES`), the least recently used
forgotten first.

Documents of ``CHORUS_PERSISTED_DOCUMENTS`` (an Apollo persisted query
manifest, ``{"format": "apollo-persisted-query-manifest", "version": 1,
"operations": [{"id": sha256, "body": text, …}]}``) are always known. With
``CHORUS_PERSISTED_DOCUMENTS_ONLY`` nothing else runs: a document that is not
in the file, sent as text or as a hash, is refused with 400
``PERSISTED_QUERY_NOT_ALLOWED``, and nothing is registered.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chorus.resolvers.cached_answers import document_hash

MAX_AUTOMATIC_DOCUMENTS = 10_000
"""Documents registered by clients (APQ) kept per process (least recently used forgotten)."""
MAX_DOCUMENT_BYTES = 100_000
"""The longest registered document kept (bytes of UTF-8); longer ones run but are not kept."""
MAX_AUTOMATIC_BYTES = 8 * 2**20
"""Bytes of UTF-8 of the documents clients registered, all together, per process.

A count alone let 10,000 documents of 100,000 bytes hold a gigabyte; an
app's documents are a few KB each, so 8 MiB keeps thousands."""

NOT_FOUND_MESSAGE = "PersistedQueryNotFound"
"""The message Apollo clients look for to send the document's text."""


class ViewerNeeded(Exception):
    """A document asked for by hash alone from a request without a valid token.

    Raised before any lookup; the caller answers it as the operation's own
    refusal would be (:func:`chorus.resolvers.request_errors.no_viewer`).
    """


class PersistedQueryError(Exception):
    """A persisted-query request that cannot run: the HTTP status, message and code to answer."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


MAX_MANIFEST_BYTES = 64 * 2**20
"""Largest persisted query manifest read (bytes); a large app's is a few MiB."""


def load_manifest(path: str) -> dict[str, str]:
    """The documents of an Apollo persisted query manifest, by SHA-256.

    Raises:
        ValueError: the file cannot be read, is not such a manifest, or an
            ``id`` is not its ``body``'s SHA-256.
    """
    try:
        file = Path(path)
        if not file.is_file():  # a FIFO or /dev/zero would never finish reading
            raise ValueError("not a regular file")
        if file.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError(f"larger than {MAX_MANIFEST_BYTES // 2**20} MiB")
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"CHORUS_PERSISTED_DOCUMENTS: cannot read {path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"CHORUS_PERSISTED_DOCUMENTS: {path} nests too deep") from None
    operations = data.get("operations") if isinstance(data, dict) else None
    if not isinstance(operations, list):
        raise ValueError(
            f"CHORUS_PERSISTED_DOCUMENTS: {path} is not an Apollo persisted query manifest "
            '({"format": "apollo-persisted-query-manifest", "version": 1, "operations": [...]})'
        )
    documents: dict[str, str] = {}
    for i, op in enumerate(operations):
        body = op.get("body") if isinstance(op, dict) else None
        sha = op.get("id") if isinstance(op, dict) else None
        if not isinstance(body, str) or not isinstance(sha, str):
            raise ValueError(f"CHORUS_PERSISTED_DOCUMENTS: operations[{i}] needs id and body")
        if document_hash(body) != sha.lower():
            raise ValueError(
                f"CHORUS_PERSISTED_DOCUMENTS: operations[{i}].id is not the SHA-256 of its body"
            )
        documents[sha.lower()] = body
    return documents


class PersistedDocuments:
    """The documents known by hash: the registered ones and those clients sent (APQ).

    Args:
        registered: SHA-256 → document, always known (:func:`load_manifest`).
        only_registered: run nothing else, register nothing.
    """

    def __init__(
        self, registered: Mapping[str, str] | None = None, *, only_registered: bool = False
    ) -> None:
        self._registered = dict(registered or {})
        self._only = only_registered
        self._automatic: OrderedDict[str, str] = OrderedDict()
        self._automatic_bytes = 0

    @property
    def automatic_bytes(self) -> int:
        """Bytes of UTF-8 of the documents clients registered, kept now."""
        return self._automatic_bytes

    def resolve(
        self, query: object, extensions: object, *, viewer: bool = False, register: bool = False
    ) -> tuple[object, str | None]:
        """The document to run and its SHA-256 (``None`` when not computed).

        Args:
            query: the request's ``query`` (text or absent).
            extensions: the request's ``extensions``.
            viewer: the request carries a valid token; without one a hash
                alone is never looked up.
            register: keep a document sent with its hash (the request carries
                a valid token); otherwise it runs but is not kept.

        Raises:
            ViewerNeeded: a hash without the text, and no ``viewer``.
            PersistedQueryError: unknown hash (200, ``PERSISTED_QUERY_NOT_FOUND``),
                a hash that is not the text's (400, ``BAD_REQUEST``), or a
                document that is not registered while only registered ones
                run (400, ``PERSISTED_QUERY_NOT_ALLOWED``).
        """
        sha = _requested_hash(extensions)
        if sha is None:
            if not isinstance(query, str):
                return query, None
            if self._only:
                digest = document_hash(query)
                if digest not in self._registered:
                    raise _not_allowed()
                return query, digest
            return query, None
        if query is None:
            if not viewer:
                raise ViewerNeeded
            known = self._registered.get(sha) or self._automatic.get(sha)
            if known is None:
                if self._only:
                    raise _not_allowed()
                raise PersistedQueryError(200, NOT_FOUND_MESSAGE, "PERSISTED_QUERY_NOT_FOUND")
            if sha in self._automatic:
                self._automatic.move_to_end(sha)
            return known, sha
        if not isinstance(query, str):
            return query, None
        if document_hash(query) != sha:
            raise PersistedQueryError(400, "provided sha does not match query", "BAD_REQUEST")
        if sha not in self._registered:
            if self._only:
                raise _not_allowed()
            if register:
                self._register(sha, query)
        return query, sha

    def _register(self, sha: str, query: str) -> None:
        if sha in self._automatic:
            self._automatic.move_to_end(sha)
            return
        size = _utf8_bytes(query)
        if size > MAX_DOCUMENT_BYTES:
            return
        self._automatic[sha] = query
        self._automatic_bytes += size
        while (
            len(self._automatic) > MAX_AUTOMATIC_DOCUMENTS
            or self._automatic_bytes > MAX_AUTOMATIC_BYTES
        ):
            _, forgotten = self._automatic.popitem(last=False)
            self._automatic_bytes -= _utf8_bytes(forgotten)


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _requested_hash(extensions: object) -> str | None:
    if not isinstance(extensions, dict):
        return None
    persisted: Any = extensions.get("persistedQuery")
    if persisted is None:
        return None
    sha = persisted.get("sha256Hash") if isinstance(persisted, dict) else None
    if not isinstance(sha, str) or len(sha) != 64:
        raise PersistedQueryError(
            400,
            'extensions.persistedQuery needs {"version": 1, "sha256Hash": "<64 hex digits>"}',
            "BAD_REQUEST",
        )
    if persisted.get("version", 1) != 1:
        raise PersistedQueryError(400, "persistedQuery version 1 only", "BAD_REQUEST")
    return sha.lower()


def _not_allowed() -> PersistedQueryError:
    return PersistedQueryError(
        400, "only registered documents may run on this server", "PERSISTED_QUERY_NOT_ALLOWED"
    )


__all__ = [
    "MAX_AUTOMATIC_BYTES",
    "MAX_AUTOMATIC_DOCUMENTS",
    "NOT_FOUND_MESSAGE",
    "PersistedDocuments",
    "PersistedQueryError",
    "ViewerNeeded",
    "load_manifest",
]
