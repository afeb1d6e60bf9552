"""The parsed documents requests share: only validated ones are kept, within a budget.

A refused document kept alive is thousands of objects that every full
garbage collection walks: anonymous clients sending new refused documents
stalled the event loop for hundreds of milliseconds per collection.
"""

from __future__ import annotations

import gc
import uuid

from graphql import DocumentNode, GraphQLError, parse

from chorus.graphql.guards.documents import DocumentCache, parse_ahead, parse_options
from chorus.graphql.schema.build import build_schema

OPTIONS = parse_options(5_000)
"""The parse options of every request (the default token limit)."""


def merged_fragments(marker: str) -> str:
    """50 fragments selecting ``playlists`` spread side by side: refused by the document's shape."""
    body = "playlists(first: 1) { edges { node { id } } }"
    fragments = " ".join(f"fragment F{marker}{i} on Viewer {{ {body} }}" for i in range(50))
    spreads = " ".join(f"...F{marker}{i}" for i in range(50))
    return f"{{ viewer {{ {spreads} }} }} {fragments}"


def alive(marker: str) -> int:
    """Parsed documents still reachable whose text holds ``marker``."""
    gc.collect()
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, DocumentNode) and o.loc is not None and marker in o.loc.source.body
    )


def codes(result: object) -> list[str]:
    return [e.extensions["code"] for e in getattr(result, "errors", None) or []]  # type: ignore[index]


def test_refused_documents_are_not_kept_alive() -> None:
    schema = build_schema()
    marker = uuid.uuid4().hex[:8]
    for i in range(40):
        result = schema.execute_sync(merged_fragments(f"{marker}x{i}x"))
        assert codes(result) == ["GRAPHQL_VALIDATION_FAILED"], result
    # Refused by validation proper (an unknown field), not by the shape check.
    for i in range(40):
        result = schema.execute_sync(f"{{ nothing{marker}x{i} }}")
        assert codes(result) == ["GRAPHQL_VALIDATION_FAILED"], result
    assert alive(marker) == 0


def test_a_validated_document_is_kept_and_not_parsed_again() -> None:
    documents = DocumentCache()
    schema = build_schema(documents=documents)
    query = "{ __typename }"
    assert schema.execute_sync(query).data == {"__typename": "Query"}
    assert len(documents) == 1
    kept = documents.document(query, OPTIONS)
    assert isinstance(kept, DocumentNode)
    assert schema.execute_sync(query).data == {"__typename": "Query"}
    assert documents.document(query, OPTIONS) is kept
    # A refused one is not kept beside it.
    assert codes(schema.execute_sync(merged_fragments("r"))) == ["GRAPHQL_VALIDATION_FAILED"]
    assert len(documents) == 1


def test_the_cache_is_bounded_by_count_and_by_text() -> None:
    documents = DocumentCache(max_documents=3, max_chars=100)
    texts = [f"{{ a{i} }}" for i in range(5)]
    for text in texts:
        documents.keep(text, OPTIONS, parse(text), ())
    assert len(documents) == 3
    assert documents.document(texts[0], OPTIONS) is None  # the oldest went first
    assert documents.document(texts[4], OPTIONS) is not None
    long = "{ " + "b " * 60 + "}"
    documents.keep(long, OPTIONS, parse(long), ())
    assert documents.document(long, OPTIONS) is None  # longer than the whole budget
    medium = "{ " + "c " * 40 + "}"
    documents.keep(medium, OPTIONS, parse(medium), ())
    assert documents.chars <= 100
    assert documents.document(medium, OPTIONS) is not None


def test_a_document_passes_only_the_rules_it_was_validated_by() -> None:
    documents = DocumentCache()
    document = parse("{ a }")
    documents.keep("{ a }", OPTIONS, document, ("one",))
    assert documents.passed("{ a }", OPTIONS, document, ("one",))
    assert not documents.passed("{ a }", OPTIONS, document, ("one", "two"))
    assert not documents.passed("{ a }", OPTIONS, parse("{ a }"), ("one",))
    assert not documents.passed("{ a }", parse_options(10), document, ("one",))


def test_a_document_parsed_ahead_is_taken_once() -> None:
    documents = DocumentCache()
    schema = build_schema(documents=documents)
    query = "{ __typename }"
    ahead = parse_ahead(query, 5_000)
    assert isinstance(ahead, DocumentNode)
    documents.hold(query, OPTIONS, ahead)
    assert schema.execute_sync(query).data == {"__typename": "Query"}
    assert documents.document(query, OPTIONS) is ahead  # now kept: it passed validation


def test_a_parse_error_found_ahead_is_still_answered_with_its_code() -> None:
    documents = DocumentCache()
    schema = build_schema(documents=documents)
    query = "{ " + "a " * 6_000 + "}"
    error = parse_ahead(query, 5_000)
    assert isinstance(error, GraphQLError)
    documents.hold(query, OPTIONS, error)
    result = schema.execute_sync(query)
    assert codes(result) == ["GRAPHQL_PARSE_FAILED"], result
    assert len(documents) == 0


def test_a_failed_parse_ahead_leaves_no_cyclic_garbage() -> None:
    """Its tokens and parser frames go by reference counting, not by the collector's passes."""
    from chorus.graphql.guards.documents import parse_ahead

    over = "{" + " a" * 5_001 + " }"
    gc.collect()
    gc.disable()
    try:
        answers = [parse_ahead(over, 5_000) for _ in range(10)]
        said = {
            (str(a.message), tuple(a.locations or ()))
            for a in answers
            if isinstance(a, GraphQLError)
        }
        del answers
        collected = gc.collect()
    finally:
        gc.enable()
    assert len(said) == 1
    message, locations = said.pop()
    assert locations == ((1, 10_001),)
    assert "more than 5000 tokens" in message
    assert collected < 100  # 10 parses of 5,000 tokens, unlinked: nothing in cycles
