"""Resolvers through ``schema.execute`` on both databases: batching, sessions, catalog failure."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence
from typing import Any

from chorus.catalog.protocol import CatalogUnavailable, Media, MediaPage
from chorus.db.engine import Database
from chorus.db.follows import FollowStore
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.follows import FeedLimits, Target, TargetKind
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Visibility
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services

schema = build_schema()

PAGE = """query($id: ID!, $first: Int) { playlist(id: $id) { entries(first: $first) {
  edges { node { mediaId media { title } } } } } }"""


class CountingCatalog:
    """A catalog that knows every id starting with "m" and counts its calls."""

    def __init__(self, *, down: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.down = down

    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        self.calls.append(list(media_ids))
        if self.down:
            raise CatalogUnavailable("down")
        return {
            i: Media(i, f"Title {i}", ("Artist",), None, 1000) for i in media_ids if i[0] == "m"
        }

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        return MediaPage((), 0, offset)

    async def aclose(self) -> None:
        return None


async def _knows_nothing(media_ids: Sequence[str]) -> dict[str, Media]:
    return {}


async def _playlist(store: PlaylistStore, entries: int) -> str:
    created = await store.create(CreatePlaylist("c", "Mix"), "alice")
    pid = created.outcome.playlist_id
    media = tuple(f"m{i}" for i in range(entries))
    await store.execute(AddEntries(pid, "a", 0, media), "alice")
    return pid


async def _run(db: Database, catalog: CountingCatalog, query: str, **variables: Any) -> Any:
    services = Services(db, PlaylistStore(db), catalog, DEFAULT_LIMITS)
    return await schema.execute(
        query, variable_values=variables, context_value=RequestContext(services, "alice")
    )


async def test_a_page_of_100_entries_resolves_its_media_in_one_catalog_call(
    database: Database, store: PlaylistStore
) -> None:
    pid = await _playlist(store, 100)
    catalog = CountingCatalog()
    result = await _run(database, catalog, PAGE, id=ids.to_global_id("Playlist", pid), first=100)
    assert result.errors is None
    edges = result.data["playlist"]["entries"]["edges"]
    assert [e["node"]["media"]["title"] for e in edges] == [f"Title m{i}" for i in range(100)]
    assert len(catalog.calls) == 1
    assert len(catalog.calls[0]) == 100


async def test_two_aliased_playlists_with_entries_in_one_request(
    database: Database, store: PlaylistStore
) -> None:
    first = await _playlist(store, 3)
    created = await store.create(CreatePlaylist("c2", "Other"), "alice")
    second = created.outcome.playlist_id
    await store.execute(AddEntries(second, "a2", 0, ("m7", "m8")), "alice")
    query = """query($a: ID!, $b: ID!) {
      one: playlist(id: $a) { entries { edges { node { mediaId media { title } } } } }
      two: playlist(id: $b) { entries { edges { node { mediaId media { title } } } } } }"""
    catalog = CountingCatalog()
    result = await _run(
        database,
        catalog,
        query,
        a=ids.to_global_id("Playlist", first),
        b=ids.to_global_id("Playlist", second),
    )
    assert result.errors is None
    one = [e["node"]["mediaId"] for e in result.data["one"]["entries"]["edges"]]
    two = [e["node"]["mediaId"] for e in result.data["two"]["entries"]["edges"]]
    assert (one, two) == (["m0", "m1", "m2"], ["m7", "m8"])
    # Each page's media in one batch (the two pages are read concurrently on
    # their own connections and may finish on different loop ticks).
    assert sorted(map(sorted, catalog.calls)) in (
        [["m0", "m1", "m2"], ["m7", "m8"]],
        [["m0", "m1", "m2", "m7", "m8"]],
    )


async def test_a_failing_catalog_gives_media_null_not_a_failed_request(
    database: Database, store: PlaylistStore
) -> None:
    pid = await _playlist(store, 5)
    result = await _run(
        database, CountingCatalog(down=True), PAGE, id=ids.to_global_id("Playlist", pid), first=5
    )
    assert result.errors is None
    edges = result.data["playlist"]["entries"]["edges"]
    assert [e["node"]["mediaId"] for e in edges] == [f"m{i}" for i in range(5)]
    assert all(e["node"]["media"] is None for e in edges)


async def test_adding_while_the_catalog_is_down_is_a_clean_retryable_error(
    database: Database, store: PlaylistStore
) -> None:
    pid = await _playlist(store, 1)
    mutation = """mutation($id: ID!) { addEntries(input: {playlistId: $id, operationId: "x",
      baseVersion: 1, mediaIds: ["m9"]}) { version } }"""
    result = await _run(
        database, CountingCatalog(down=True), mutation, id=ids.to_global_id("Playlist", pid)
    )
    assert result.errors is not None
    assert result.errors[0].extensions == {"code": "SERVICE_UNAVAILABLE"}
    retried = await _run(
        database, CountingCatalog(), mutation, id=ids.to_global_id("Playlist", pid)
    )
    assert retried.errors is None
    assert retried.data["addEntries"]["version"] == 2
    # The catalog down again: a retry of what committed still learns so ...
    mutation = mutation.replace("{ version }", "{ version replayed }")
    again = await _run(
        database, CountingCatalog(down=True), mutation, id=ids.to_global_id("Playlist", pid)
    )
    assert again.errors is None, again.errors
    assert again.data["addEntries"] == {"version": 2, "replayed": True}
    # ... and so does one whose media the catalog has dropped since.
    forgetful = CountingCatalog()
    forgetful.get_many = _knows_nothing  # type: ignore[method-assign]
    dropped = await _run(database, forgetful, mutation, id=ids.to_global_id("Playlist", pid))
    assert dropped.data["addEntries"] == {"version": 2, "replayed": True}
    # while a new edit is refused as before.
    new = mutation.replace('"x"', '"z"')
    refused = await _run(
        database, CountingCatalog(down=True), new, id=ids.to_global_id("Playlist", pid)
    )
    assert refused.errors is not None
    assert refused.errors[0].extensions == {"code": "SERVICE_UNAVAILABLE"}


async def test_rate_limited_mutations_are_a_user_error_and_commit_nothing(
    database: Database, store: PlaylistStore
) -> None:
    from chorus.resolvers.ratelimit import RateLimiter

    pid = await _playlist(store, 1)
    services = Services(
        database, store, CountingCatalog(), DEFAULT_LIMITS, rate_limiter=RateLimiter(2)
    )
    mutation = """mutation($id: ID!, $op: ID!) { addEntries(input: {playlistId: $id,
      operationId: $op, baseVersion: 1, mediaIds: ["m9"]}) { version userErrors { code } } }"""
    results = []
    for op in ("r1", "r2", "r3"):
        result = await schema.execute(
            mutation,
            variable_values={"id": ids.to_global_id("Playlist", pid), "op": op},
            context_value=RequestContext(services, "alice"),
        )
        results.append(result.data["addEntries"])
    assert [r["version"] for r in results] == [2, 3, None]
    assert results[2]["userErrors"] == [{"code": "RATE_LIMITED"}]


FEED = """{ viewer { feed(first: 10) { edges { node { version
  changes { ... on EntriesAdded { entries { id mediaId } } } } } } } }"""


async def test_a_feed_read_leaves_nothing_for_the_collector(
    database: Database, store: PlaylistStore
) -> None:
    # A read's context, its DataLoaders and the changes they loaded are freed
    # by reference counting when the read ends: a serving process runs full
    # collections rarely (cli.process.GC_THRESHOLDS), and anything in a cycle
    # (an executor holding its own bound methods, DataLoaders holding their
    # owner's) stayed behind, tens of MB per large feed read.
    pulled = FeedLimits(push_max_followers=1)  # read from the log: no relay needed
    follows = FollowStore(database, pulled)
    created = await store.create(CreatePlaylist("c", "Mix", visibility=Visibility.PUBLIC), "alice")
    pid = created.outcome.playlist_id
    await follows.follow("bob", Target(TargetKind.PLAYLIST, pid))
    for v in range(3):
        await store.execute(
            AddEntries(pid, f"a{v}", v, tuple(f"m{v}-{i}" for i in range(20))), "alice"
        )
    services = Services(
        database, store, CountingCatalog(), DEFAULT_LIMITS, follows=follows, feed_limits=pulled
    )
    gc.collect()
    gc.disable()
    try:
        left: list[weakref.ref[object]] = []
        for _ in range(5):
            context = RequestContext(services, "bob")
            result = await schema.execute(FEED, context_value=context)
            assert result.errors is None
            edges = result.data["viewer"]["feed"]["edges"]
            assert sum(len(c["entries"]) for e in edges for c in e["node"]["changes"]) == 60
            left += [weakref.ref(context), weakref.ref(context.reads.loaders)]
            del context, result, edges
        assert [r() for r in left if r() is not None] == []
    finally:
        gc.enable()
