"""The response cache's parts without servers: keys, the LRU bound, single flight, heads, reads.

Its behaviour through a running server is ``tests/e2e/test_response_cache.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from chorus.auth import InvalidToken, TokenVerifier, mint_token
from chorus.caches.heads import LocalHeads
from chorus.caches.responses import (
    ResponseCache,
    canonical_variables,
    document_hash,
    etag_of,
    response_key,
)
from chorus.domain.model import Playlist, Visibility
from chorus.graphql.guards.persisted import (
    MAX_AUTOMATIC_BYTES,
    MAX_DOCUMENT_BYTES,
    PersistedDocuments,
    PersistedQueryError,
    ViewerNeeded,
    load_manifest,
)
from chorus.resolvers.reads import ReadSet
from chorus.settings import Settings

SECRET = "unit-secret-" + "x" * 40


def playlist(
    pid: str = "p", version: int = 3, visibility: Visibility = Visibility.PUBLIC
) -> Playlist:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    return Playlist(
        id=pid,
        owner_id="alice",
        title="t",
        description=None,
        visibility=visibility,
        collaborative=False,
        version=version,
        membership_epoch=0,
        entry_count=0,
        created_at=now,
        updated_at=now,
        deleted_at=None,
    )


def test_keys_name_every_input_and_canonical_variables() -> None:
    base = response_key("d", "Op", {"b": 1, "a": [1, 2]}, None)
    assert base == response_key("d", "Op", {"a": [1, 2], "b": 1}, None)
    others = {
        response_key("e", "Op", {"b": 1, "a": [1, 2]}, None),
        response_key("d", "Other", {"b": 1, "a": [1, 2]}, None),
        response_key("d", "Op", {"b": 2, "a": [1, 2]}, None),
        response_key("d", "Op", {"b": 1, "a": [1, 2]}, "bob"),
    }
    assert base not in others
    assert len(others) == 4
    # No operation name sent runs the only operation; "" names none (an error).
    assert response_key("d", None, None, None) != response_key("d", "", None, None)
    assert canonical_variables(None) == canonical_variables({}) == ""
    assert document_hash("{ a }") == hashlib.sha256(b"{ a }").hexdigest()
    assert document_hash("\ud800")  # a lone surrogate is hashed, not an error


def test_the_lru_is_bounded_in_bytes_and_drops_the_oldest() -> None:
    cache = ResponseCache(65_536, media_freshness_s=60)
    body = b"x" * 5_000
    keys = [response_key("d", None, {"i": i}, None) for i in range(20)]
    for key in keys:
        cache.put(
            key, body, etag=etag_of(body), versions={}, shared=True, media=False, operation="o"
        )
    assert cache.size_bytes <= 65_536
    assert cache.get(keys[0]) is None
    assert cache.get(keys[-1]) is not None
    huge = b"y" * 7_000  # over a tenth of the bound: never kept
    assert (
        cache.put(keys[0], huge, etag="", versions={}, shared=True, media=False, operation="o")
        is None
    )


def test_media_answers_expire_and_playlist_answers_do_not() -> None:
    cache = ResponseCache(65_536, media_freshness_s=0.001)
    with_media, without = response_key("a", None, None, None), response_key("b", None, None, None)
    cache.put(with_media, b"1", etag="", versions={}, shared=True, media=True, operation="o")
    cache.put(without, b"2", etag="", versions={}, shared=True, media=False, operation="o")
    entry = cache._entries[with_media]
    while entry.fresh():  # a millisecond: wait for the clock to pass it, no sleep
        pass
    assert cache.get(with_media) is None
    assert cache.get(without) is not None


async def test_misses_of_one_key_are_computed_once() -> None:
    cache = ResponseCache(65_536, media_freshness_s=60)
    key = response_key("d", None, None, "bob")
    computed = 0
    release = asyncio.Event()

    async def ask() -> bool:
        nonlocal computed
        async with cache.flight(key) as leads:
            if leads:
                computed += 1
                await release.wait()
            return leads

    tasks = [asyncio.create_task(ask()) for _ in range(5)]
    await asyncio.sleep(0)
    release.set()
    assert sorted(await asyncio.gather(*tasks)) == [False] * 4 + [True]
    assert computed == 1


async def test_local_heads_never_go_down_and_learn_from_reads() -> None:
    heads = LocalHeads(max_playlists=2)
    taken = heads.ticket()
    assert await heads.read_at({"a": 3}, taken)
    assert await heads.current({"a": 3})
    heads.committed("a", 4)
    assert not await heads.current({"a": 3})
    assert await heads.read_at({"a": 3}, heads.ticket())  # known: a read does not lower it
    assert heads.head("a") == 4


async def test_a_read_that_began_before_a_head_was_forgotten_cannot_teach_it() -> None:
    heads = LocalHeads(max_playlists=1)
    heads.committed("a", 5)
    taken = heads.ticket()  # a read of "a" begins (it may see version 4, before the commit)
    heads.committed("b", 1)  # "a" is forgotten
    assert heads.head("a") is None
    assert not await heads.read_at({"a": 4}, taken)
    assert await heads.read_at({"a": 5}, heads.ticket())


def test_read_sets_decide_the_audience() -> None:
    public = ReadSet()
    public.playlist(playlist())
    public.version("p", 3)
    assert public.shared
    assert public.uncacheable is None
    assert public.versions == {"p": 3}
    private = ReadSet()
    private.playlist(playlist(visibility=Visibility.PRIVATE))
    assert not private.shared
    role = ReadSet()
    role.playlist(playlist())
    role.depends_on_viewer()
    assert not role.shared
    raced = ReadSet()
    raced.playlist(playlist())
    raced.version("p", 4)
    assert raced.uncacheable == "one playlist read at two versions"


def test_persisted_documents_follow_apollos_protocol() -> None:
    docs = PersistedDocuments()
    query = "{ viewer { user { id } } }"
    sha = hashlib.sha256(query.encode()).hexdigest()
    ext = {"persistedQuery": {"version": 1, "sha256Hash": sha}}
    with pytest.raises(PersistedQueryError) as missing:
        docs.resolve(None, ext, viewer=True)
    assert (missing.value.status, missing.value.code) == (200, "PERSISTED_QUERY_NOT_FOUND")
    assert docs.resolve(query, ext) == (query, sha)  # runs, but not kept: no token
    with pytest.raises(PersistedQueryError):
        docs.resolve(None, ext, viewer=True)
    assert docs.resolve(query, ext, viewer=True, register=True) == (query, sha)
    assert docs.resolve(None, ext, viewer=True) == (query, sha)
    with pytest.raises(ViewerNeeded):  # known now, and still not looked up without a token
        docs.resolve(None, ext)
    with pytest.raises(PersistedQueryError) as wrong:
        docs.resolve("{ other }", ext)
    assert wrong.value.code == "BAD_REQUEST"
    with pytest.raises(PersistedQueryError):
        docs.resolve(None, {"persistedQuery": {"sha256Hash": "short"}})
    assert docs.resolve(query, None) == (query, None)


def test_what_clients_register_is_bounded_in_bytes_least_recently_used_first() -> None:
    docs = PersistedDocuments()
    size = MAX_DOCUMENT_BYTES - 100  # each near the longest kept
    texts = [f"#{n:08d}" + "x" * size + "\n{ __typename }" for n in range(200)]
    digests = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    for text, digest in zip(texts, digests, strict=True):
        docs.resolve(text, {"persistedQuery": {"version": 1, "sha256Hash": digest}}, register=True)
        assert docs.automatic_bytes <= MAX_AUTOMATIC_BYTES
    kept = MAX_AUTOMATIC_BYTES // len(texts[0].encode())
    assert docs.automatic_bytes == kept * len(texts[0].encode())
    newest = {"persistedQuery": {"version": 1, "sha256Hash": digests[-1]}}
    assert docs.resolve(None, newest, viewer=True)[0] == texts[-1]
    oldest = {"persistedQuery": {"version": 1, "sha256Hash": digests[0]}}
    with pytest.raises(PersistedQueryError):  # the oldest were forgotten
        docs.resolve(None, oldest, viewer=True)


def test_only_registered_documents_run(tmp_path: Path) -> None:
    query = "query A { viewer { user { id } } }"
    sha = hashlib.sha256(query.encode()).hexdigest()
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"operations": [{"id": sha, "body": query}]}))
    docs = PersistedDocuments(load_manifest(str(manifest)), only_registered=True)
    assert docs.resolve(query, None) == (query, sha)
    by_hash = {"persistedQuery": {"version": 1, "sha256Hash": sha}}
    assert docs.resolve(None, by_hash, viewer=True)[0] == query
    with pytest.raises(ViewerNeeded):
        docs.resolve(None, by_hash)
    for asked in (
        ("{ b }", None),
        ("{ b }", {"persistedQuery": {"sha256Hash": document_hash("{ b }")}}),
    ):
        with pytest.raises(PersistedQueryError) as refused:
            docs.resolve(*asked)
        assert refused.value.code == "PERSISTED_QUERY_NOT_ALLOWED"


def test_a_manifest_must_be_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"operations": [{"id": "0" * 64, "body": "{ a }"}]}))
    with pytest.raises(ValueError, match="not the SHA-256"):
        load_manifest(str(bad))
    with pytest.raises(ValueError, match="cannot read"):
        load_manifest(str(tmp_path / "absent.json"))
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="not an Apollo persisted query manifest"):
        load_manifest(str(tmp_path / "list.json"))


def test_a_manifest_that_nests_deep_or_never_ends_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(ValueError, match="nests too deep"):
        load_manifest(str(deep))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    with pytest.raises(ValueError, match="not a regular file"):
        load_manifest(str(fifo))
    with pytest.raises(ValueError, match="not a regular file"):
        load_manifest("/dev/zero")


def test_the_settings_are_validated() -> None:
    with pytest.raises(ValidationError, match="CHORUS_PERSISTED_DOCUMENTS_ONLY needs"):
        Settings(persisted_documents_only=True)
    with pytest.raises(ValidationError):
        Settings(response_cache_max_bytes=10)
    with pytest.raises(ValidationError):
        Settings(media_freshness_s=0)
    assert Settings().response_cache is True


def test_verified_tokens_are_kept_until_they_expire() -> None:
    verifier = TokenVerifier(SECRET)
    token = mint_token(SECRET, "bob")
    assert verifier.verify(token).user_id == "bob"
    assert verifier.verify(token).user_id == "bob"
    with pytest.raises(InvalidToken):
        verifier.verify(mint_token("other-" + "y" * 40, "bob"))
    expired = mint_token(SECRET, "bob", ttl=timedelta(seconds=-1))
    with pytest.raises(InvalidToken, match="expired"):
        verifier.verify(expired)
