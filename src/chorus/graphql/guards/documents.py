"""The parsed documents requests share: kept only once they passed validation, within a budget.

Clients send the same few documents over and over, so a parsed and
validated document is kept (LRU, keyed by its text and parse options) and
the next request with that text neither parses nor validates it again.

A document is kept only after it **passed validation**, and the kept ones
are bounded by count (:data:`MAX_DOCUMENTS`) and by the length of their text
(:data:`MAX_DOCUMENT_CHARS` in all). Both bounds are about the garbage
collector more than memory: a parsed document is thousands of objects
(tokens linked both ways, nodes, locations), and every object kept lives
in the oldest generation, which each full collection walks. When every
parsed document was kept (a plain LRU of 256, as before), anonymous
clients sending refused 8 KB documents, each new, filled it with 1.4
million objects; full collections then took 0.3–0.5 s each, every few
dozen requests, and ``/healthz`` waited with them (310 and 500 ms in
``bench/hostile.py``). A refused document is now garbage as soon as its
answer is sent.

A large body's document is parsed in a worker thread before its request
runs (:mod:`chorus.graphql.endpoint`); :meth:`DocumentCache.hold` keeps it for
that request, which takes it (:meth:`DocumentCache.document`) instead of
parsing on the event loop. When that parse failed (a syntax error, more
tokens than allowed) the request does not parse again before strawberry
does, which turns the error into the answer.

A long new document is also validated in a worker thread
(:class:`ThreadedValidation`, the server's): only graphql-core's rules run
there, on a document no other request holds yet.

Everything else here runs on the event loop: no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    ASTValidationRule,
    DocumentNode,
    GraphQLError,
    GraphQLSchema,
    OperationType,
    get_operation_ast,
    parse,
)
from graphql.validation import ASTValidationContext
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document

from chorus.graphql.execution import loop_turns

MAX_DOCUMENTS = 256
"""Validated documents kept, at most."""

MAX_DOCUMENT_CHARS = 256 * 1024
"""Characters of document text kept, at most, in all (a longer document is never kept).

About 0.75 objects per character once parsed: 256 KiB is under 200,000
objects, a full collection of tens of milliseconds."""

HELD_DOCUMENTS = 16
"""Documents parsed ahead that wait for their request (oldest dropped)."""

_Key = tuple[str, frozenset[tuple[str, Any]]]
Rules = tuple[Any, ...]


def _key(query: str, options: Mapping[str, Any]) -> _Key:
    return query, frozenset(options.items())


@dataclass(slots=True)
class _Kept:
    document: DocumentNode
    passed: set[Rules] = field(default_factory=set)
    """The rule sets it passed (a request without an operation name adds a rule)."""
    plans: dict[Any, Any] = field(default_factory=dict)
    """Its operations' execution plans (:mod:`chorus.graphql.execution.planned`)."""


class DocumentCache:
    """Validated documents by text (LRU, bounded), and documents parsed ahead for a request.

    Args:
        max_documents: documents kept, at most.
        max_chars: characters of document text kept, at most, in all.
    """

    def __init__(
        self, max_documents: int = MAX_DOCUMENTS, max_chars: int = MAX_DOCUMENT_CHARS
    ) -> None:
        self._max_documents = max_documents
        self._max_chars = max_chars
        self._kept: OrderedDict[_Key, _Kept] = OrderedDict()
        self._chars = 0
        self._held: OrderedDict[_Key, DocumentNode | GraphQLError] = OrderedDict()
        self._by_document: dict[int, _Kept] = {}
        """The kept entries by the id of their document (each entry holds its document)."""
        self._request_rules: dict[bool, Rules] = {}
        """The validation rules of the last request validated, by whether it named its
        operation (strawberry's ``operation_name``: the one sent, else the first one's)."""

    def __len__(self) -> int:
        """Documents kept (those held for a request aside)."""
        return len(self._kept)

    @property
    def chars(self) -> int:
        """Characters of the documents kept."""
        return self._chars

    def document(
        self, query: str, options: Mapping[str, Any]
    ) -> DocumentNode | GraphQLError | None:
        """The document of ``query``: kept, or parsed ahead (taken: the document or the
        error parsing raised); ``None`` if neither."""
        key = _key(query, options)
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept.document
        return self._held.pop(key, None)

    def kept(self, query: str, options: Mapping[str, Any]) -> DocumentNode | None:
        """The document kept for ``query`` (it passed validation once), else ``None``; it
        takes nothing (unlike :meth:`document`) and does not count as a use."""
        kept = self._kept.get(_key(query, options))
        return kept.document if kept is not None else None

    def kept_operation(
        self, query: str, operation_name: str | None, options: Mapping[str, Any]
    ) -> tuple[OperationType, str | None] | None:
        """The type and own name of ``query``'s operation ``operation_name`` (``None``: the
        document's only one) if its document is kept, else ``None`` (not kept yet, or no
        such operation)."""
        document = self.kept(query, options)
        chosen = get_operation_ast(document, operation_name) if document is not None else None
        if chosen is None:
            return None
        return chosen.operation, chosen.name.value if chosen.name is not None else None

    def plans(self, document: DocumentNode) -> dict[Any, Any] | None:
        """The plans of ``document`` (a dict its executor fills, dropped with the document)
        if it is kept, else ``None``: only validated documents are planned."""
        kept = self._by_document.get(id(document))
        return kept.plans if kept is not None and kept.document is document else None

    def hold(
        self, query: str, options: Mapping[str, Any], document: DocumentNode | GraphQLError
    ) -> None:
        """Keep ``document`` (or the error parsing raised), parsed ahead, for the request
        with ``query``."""
        key = _key(query, options)
        self._held[key] = document
        self._held.move_to_end(key)
        while len(self._held) > HELD_DOCUMENTS:
            self._held.popitem(last=False)

    def note_rules(self, named: bool, rules: Rules) -> None:
        """The rules a request (``named``: its operation has a name) is validated by."""
        self._request_rules[named] = rules

    def validated(self, query: str, options: Mapping[str, Any], named: bool) -> DocumentNode | None:
        """The kept document of ``query`` if it passed the rules a request of it is validated
        by (``named``: as :meth:`note_rules`), counted as a use; else ``None``: strawberry's
        extensions decide (:class:`CachedValidation`). ``None`` too before any request of
        that kind was validated: its rules are not known yet."""
        rules = self._request_rules.get(named)
        key = _key(query, options)
        kept = self._kept.get(key)
        if kept is None or rules is None or rules not in kept.passed:
            return None
        self._kept.move_to_end(key)
        return kept.document

    def passed(
        self, query: str, options: Mapping[str, Any], document: DocumentNode, rules: Rules
    ) -> bool:
        """Whether ``document``, kept for ``query``, already passed validation by ``rules``."""
        kept = self._kept.get(_key(query, options))
        return kept is not None and kept.document is document and rules in kept.passed

    def keep(
        self, query: str, options: Mapping[str, Any], document: DocumentNode, rules: Rules
    ) -> None:
        """``document`` passed validation by ``rules``: keep it, within the bounds."""
        if len(query) > self._max_chars:
            return
        key = _key(query, options)
        kept = self._kept.get(key)
        if kept is None or kept.document is not document:
            if kept is not None:
                self._chars -= len(query)
                self._by_document.pop(id(kept.document), None)
            kept = self._kept[key] = _Kept(document)
            self._by_document[id(document)] = kept
            self._chars += len(query)
        kept.passed.add(rules)
        self._kept.move_to_end(key)
        while len(self._kept) > self._max_documents or self._chars > self._max_chars:
            (dropped, _), gone = self._kept.popitem(last=False)
            self._chars -= len(dropped)
            if self._by_document.get(id(gone.document)) is gone:
                del self._by_document[id(gone.document)]


MAX_QUERY_CHARS = 100_000
"""Characters of a document sent over HTTP, at most (a large body's, checked before parsing).

The token limit alone let a 1 MB document through (5,000 tokens of long
names, commas, white space or escapes): 80–280 ms to lex, again on every
send, and a 1 MB name echoed back in its error. Real documents, GraphiQL's
introspection query included, are a few KB."""


def parse_ahead(query: str, max_tokens: int) -> DocumentNode | GraphQLError:
    """``query`` parsed as a request with ``max_tokens`` parses it, or the error it raised.

    A document longer than :data:`MAX_QUERY_CHARS` is refused unread. Pure: safe
    in a worker thread.
    """
    if len(query) > MAX_QUERY_CHARS:
        return GraphQLError(
            f"the document is {len(query)} characters; the limit is {MAX_QUERY_CHARS}"
        )
    try:
        return parse(query, max_tokens=max_tokens)
    except GraphQLError as error:
        _unlink_tokens(error)
        return error


def _unlink_tokens(error: GraphQLError) -> None:
    """Free what a failed parse made by reference counting, not by the cyclic collector.

    The lexer's tokens link both ways (``prev``/``next``) and the traceback
    keeps the parser: a failed parse of 5,000 tokens left some 20,000
    objects in cycles, and a stream of them made the collector's passes
    long enough to stall the loop. The error's message and locations are
    kept; its traceback (frames of graphql-core's parser) is dropped.
    """
    traceback, error.__traceback__ = error.__traceback__, None
    while traceback is not None:
        lexer = getattr(traceback.tb_frame.f_locals.get("self"), "_lexer", None)
        token = getattr(lexer, "token", None)
        while token is not None:
            previous = token.prev
            token.prev = token.next = None
            token = previous
        traceback = traceback.tb_next


def parse_options(max_tokens: int) -> dict[str, Any]:
    """The parse options of a request (``MaxTokensLimiter`` sets them): a key's half."""
    return {"max_tokens": max_tokens}


class CachedParse(SchemaExtension):
    """Parses through a :class:`DocumentCache`; a syntax error still gets ``extensions.code``.

    Parsing happens in the ``on_parse`` hook, where a syntax error would
    escape the whole operation before :class:`~chorus.graphql.execution.error_masking.ErrorPolicy`
    sees it. On an error the document is left unparsed instead, so strawberry
    parses it again where it turns syntax errors into results.
    """

    def __init__(self, documents: DocumentCache) -> None:
        self.documents = documents

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query is not None:
            found = self.documents.document(context.query, context.parse_options)
            if found is None:
                with contextlib.suppress(GraphQLError):
                    found = parse(context.query, **context.parse_options)
            if isinstance(found, DocumentNode):
                context.graphql_document = found
        yield


class CachedValidation(SchemaExtension):
    """Validates through a :class:`DocumentCache`: a document that passed is kept.

    A kept document is not validated again by the same rules. Goes after
    :class:`~chorus.graphql.guards.shape.DocumentShapeLimit`: a document it refused
    (its errors already set) is neither validated nor kept.
    """

    def __init__(self, documents: DocumentCache) -> None:
        self.documents = documents

    def _pending(self) -> tuple[DocumentNode, Rules] | None:
        """The document and rules still to validate; ``None`` when there is nothing to do."""
        context = self.execution_context
        document, query = context.graphql_document, context.query
        if context.pre_execution_errors or document is None or query is None:
            return None
        rules = context.validation_rules
        self.documents.note_rules(context.operation_name is not None, rules)
        if self.documents.passed(query, context.parse_options, document, rules):
            context.pre_execution_errors = []
            return None
        return document, rules

    def _validated(self, document: DocumentNode, rules: Rules, errors: list[GraphQLError]) -> None:
        context = self.execution_context
        context.pre_execution_errors = errors
        if not errors and context.query is not None:
            self.documents.keep(context.query, context.parse_options, document, rules)

    def on_validate(self) -> Iterator[None]:
        pending = self._pending()
        if pending is not None:
            document, rules = pending
            schema = self.execution_context.schema._schema
            self._validated(document, rules, validate_freeing(schema, document, rules))
        yield


def validate_freeing(
    schema: GraphQLSchema, document: DocumentNode, rules: Rules
) -> list[GraphQLError]:
    """Strawberry's ``validate_document``, the rules' reference cycles broken after it.

    Each rule instance caches its bound handlers per node kind (graphql-core's
    ``Visitor.enter_leave_map``): a cycle per rule, and ~840 objects of cyclic
    garbage per validation in all, which only the collector frees. Under a
    stream of new documents that was 48,000 objects per young collection and
    80 ms pauses of the event loop. The rules are single-use, so once the
    errors are out their state (and their context's) is dropped, and reference
    counting frees them at once.
    """
    made: list[Any] = []

    def recording(rule: type[ASTValidationRule]) -> Any:
        def make(context: ASTValidationContext) -> ASTValidationRule:
            instance = rule(context)
            made.append(instance)
            return instance

        return make

    try:
        return validate_document(schema, document, tuple(recording(rule) for rule in rules))
    finally:
        contexts = {id(r.context): r.context for r in made if hasattr(r, "context")}
        for instance in (*made, *contexts.values()):
            vars(instance).clear()


OFF_LOOP_CHARS = 2048
"""Documents longer than this are validated in a worker thread (:class:`ThreadedValidation`)."""

_VALIDATING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chorus-validate")
"""One thread: several would each take the GIL in turn, and the loop would wait behind all."""


class ThreadedValidation(CachedValidation):
    """:class:`CachedValidation`, with a long new document validated in a worker thread.

    graphql-core's rules over a new document near the token limit take
    50–90 ms of pure Python; on the event loop ``/healthz`` and every other
    request wait for all of it, in a thread the loop keeps its turns (the
    GIL is handed over every few milliseconds). It costs the same CPU: the
    point is latency for everyone else, bounded per request by the token
    limit. Only for async execution (strawberry refuses an async hook in
    ``execute_sync``); the cache is still read and written on the loop only.
    """

    async def on_validate(self) -> AsyncIterator[None]:  # type: ignore[override]
        pending = self._pending()
        if pending is not None:
            document, rules = pending
            schema = self.execution_context.schema._schema
            query = self.execution_context.query or ""
            if len(query) > OFF_LOOP_CHARS:
                loop = asyncio.get_running_loop()
                errors = await loop.run_in_executor(
                    _VALIDATING, validate_freeing, schema, document, rules
                )
            else:
                # Several new documents arriving together would be validated
                # in one turn of the loop, one after the other.
                await loop_turns.share()
                errors = validate_freeing(schema, document, rules)
            self._validated(document, rules, errors)
        yield


__all__ = [
    "MAX_QUERY_CHARS",
    "CachedParse",
    "CachedValidation",
    "DocumentCache",
    "Rules",
    "ThreadedValidation",
    "parse_ahead",
    "parse_options",
]
