"""Finding playlists through ``schema.execute`` on SQLite and PostgreSQL.

``User.playlists`` never shows a PRIVATE playlist to a stranger; every order
of ``viewer.playlists`` pages forward and backward to the same list a plain
Python sort gives; ``searchPlaylists`` matches title prefixes with ``%`` and
``_`` taken literally; ``totalDurationMs`` follows adds and removes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from chorus.catalog.protocol import CatalogUnavailable, Media, MediaPage
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import (
    AddEntries,
    CreatePlaylist,
    DeletePlaylist,
    RemoveEntries,
    SetMemberRole,
    UpdatePlaylist,
)
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Role, Visibility
from chorus.domain.playlist_search import title_key
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services

schema = build_schema()

PUBLIC, PRIVATE = Visibility.PUBLIC, Visibility.PRIVATE
NODE = "id title createdAt updatedAt"
PAGE_INFO = "pageInfo { hasNextPage hasPreviousPage startCursor endCursor }"
VIEWER_PAGE = f"""query($first: Int, $after: String, $last: Int, $before: String,
  $order: PlaylistOrder) {{ viewer {{ playlists(first: $first, after: $after, last: $last,
  before: $before, orderBy: $order) {{ totalCount {PAGE_INFO} edges {{ cursor node {{ {NODE} }} }}
}} }} }}"""
USER_PAGE = """query($id: ID!, $first: Int) { user(id: $id) { id playlists(first: $first) {
  totalCount edges { node { title } } } } }"""
SEARCH = f"""query($q: String!, $first: Int, $after: String, $last: Int, $before: String) {{
  searchPlaylists(query: $q, first: $first, after: $after, last: $last, before: $before) {{
  totalCount {PAGE_INFO} edges {{ cursor node {{ title visibility }} }} }} }}"""
DURATION = "query($id: ID!) { playlist(id: $id) { version totalDurationMs } }"


class DurationCatalog:
    """Knows every id starting with "m", each 1,000 ms long, and "n…" without a duration."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        self.calls += 1
        if self.down:
            raise CatalogUnavailable("down")
        known = [i for i in media_ids if i[0] in "mn"]
        return {i: Media(i, i, (), None, 1000 if i[0] == "m" else None) for i in known}

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        return MediaPage((), 0, offset)

    async def aclose(self) -> None:
        return None


async def run(
    db: Database, query: str, user: str = "alice", catalog: Any = None, **variables: Any
) -> Any:
    services = Services(db, PlaylistStore(db), catalog or DurationCatalog(), DEFAULT_LIMITS)
    return await schema.execute(
        query, variable_values=variables, context_value=RequestContext(services, user or None)
    )


async def data(db: Database, query: str, user: str = "alice", **variables: Any) -> Any:
    result = await run(db, query, user, **variables)
    assert result.errors is None, result.errors
    return result.data


async def error_code(db: Database, query: str, user: str = "alice", **variables: Any) -> str:
    result = await run(db, query, user, **variables)
    assert result.errors, result.data
    return str(result.errors[0].extensions["code"])


_ops = itertools.count()


async def create(store: PlaylistStore, title: str, visibility: Visibility, owner: str) -> str:
    made = await store.create(CreatePlaylist(f"c{next(_ops)}", title, visibility=visibility), owner)
    return made.outcome.playlist_id


async def titles(db: Database, query: str, user: str = "alice", **variables: Any) -> list[str]:
    found = await data(db, query, user, **variables)
    root = found["user"]["playlists"] if "user" in found else found["searchPlaylists"]
    return [e["node"]["title"] for e in root["edges"]]


async def test_a_users_playlists_are_the_public_ones_and_those_shared_with_the_viewer(
    database: Database, store: PlaylistStore
) -> None:
    await create(store, "open", PUBLIC, "alice")
    await create(store, "secret", PRIVATE, "alice")
    shared = await create(store, "shared", PRIVATE, "alice")
    await store.execute(SetMemberRole(shared, "s", 0, "bob", Role.VIEWER), "alice")
    gone = await create(store, "gone", PUBLIC, "alice")
    await store.execute(DeletePlaylist(gone, "d", 0), "alice")
    await create(store, "bobs own", PUBLIC, "bob")  # bob's, not alice's: in neither list

    assert await titles(database, USER_PAGE, "bob", id="alice") == ["shared", "open"]
    assert await titles(database, USER_PAGE, "carol", id="alice") == ["open"]
    assert await titles(database, USER_PAGE, "alice", id="alice") == ["shared", "secret", "open"]
    found = await data(database, USER_PAGE, "carol", id="alice")
    assert found["user"] == {
        "id": "alice",
        "playlists": {"totalCount": 1, "edges": [{"node": {"title": "open"}}]},
    }
    # The same user reached from a playlist's owner; a malformed id is no user.
    owner = "{ viewer { playlists { edges { node { owner { id playlists { totalCount } } } } } } }"
    edges = (await data(database, owner, "bob"))["viewer"]["playlists"]["edges"]
    counts = {
        e["node"]["owner"]["id"]: e["node"]["owner"]["playlists"]["totalCount"] for e in edges
    }
    assert counts == {"alice": 2, "bob": 1}
    assert (await data(database, USER_PAGE, "bob", id="has space"))["user"] is None
    assert await error_code(database, USER_PAGE, "", id="alice") == "UNAUTHENTICATED"
    # The stranger finds only the PUBLIC one by title either.
    assert await titles(database, SEARCH, "carol", q="s") == []
    assert await titles(database, SEARCH, "carol", q="") == ["bobs own", "open"]


ORDERS = [
    (field, direction)
    for field in ("CREATED_AT", "UPDATED_AT", "TITLE")
    for direction in ("ASC", "DESC")
]


def _sort_key(field: str, node: dict[str, Any]) -> tuple[Any, str]:
    raw_id = ids.playlist_id(node["id"])
    if field == "TITLE":
        return title_key(node["title"]), raw_id
    stamp = node["createdAt" if field == "CREATED_AT" else "updatedAt"]
    return datetime.fromisoformat(stamp), raw_id


async def _walk(db: Database, order: dict[str, str], size: int, *, backward: bool) -> list[str]:
    """Every playlist's id, page by page, in list order; checks pageInfo on the way."""
    seen: list[list[str]] = []
    cursor: str | None = None
    while True:
        args = {"last": size, "before": cursor} if backward else {"first": size, "after": cursor}
        page = (await data(db, VIEWER_PAGE, order=order, **args))["viewer"]["playlists"]
        info = page["pageInfo"]
        got = [e["node"]["id"] for e in page["edges"]]
        seen.append(got)
        more = info["hasPreviousPage"] if backward else info["hasNextPage"]
        came_from = info["hasNextPage"] if backward else info["hasPreviousPage"]
        assert came_from is (cursor is not None)
        if not more:
            break
        cursor = info["startCursor"] if backward else info["endCursor"]
    if backward:
        seen.reverse()
    return [i for page in seen for i in page]


async def test_every_order_pages_forward_and_backward_to_the_sorted_list(
    database: Database, store: PlaylistStore
) -> None:
    made = []
    for title in ["b", "B", "a", "c  c", "C c", "a", "Émile", "émile", "z"]:
        made.append(await create(store, title, PUBLIC, "alice"))
    # Edits move updatedAt out of the creation order.
    for pid in (made[2], made[0], made[5]):
        await store.execute(UpdatePlaylist(pid, f"u{next(_ops)}", 0, description="x"), "alice")
    shared = await create(store, "m shared", PRIVATE, "bob")
    await store.execute(SetMemberRole(shared, "s", 0, "alice", Role.EDITOR), "bob")
    await create(store, "not alices", PUBLIC, "bob")

    everything = await data(database, VIEWER_PAGE, first=100)
    nodes = [e["node"] for e in everything["viewer"]["playlists"]["edges"]]
    assert everything["viewer"]["playlists"]["totalCount"] == len(nodes) == 10
    for field, direction in ORDERS:
        order = {"field": field, "direction": direction}
        expected = [n["id"] for n in sorted(nodes, key=lambda n: _sort_key(field, n))]
        if direction == "DESC":
            expected.reverse()
        for size in (1, 3, 4):
            assert await _walk(database, order, size, backward=False) == expected, (order, size)
            assert await _walk(database, order, size, backward=True) == expected, (order, size)
    # The default is CREATED_AT newest first, and TITLE alone means A to Z.
    newest = sorted(nodes, key=lambda n: _sort_key("CREATED_AT", n), reverse=True)
    assert [n["id"] for n in nodes] == [n["id"] for n in newest]
    by_title = await data(database, VIEWER_PAGE, first=100, order={"field": "TITLE"})
    titles_asc = [e["node"]["title"] for e in by_title["viewer"]["playlists"]["edges"]]
    assert [title_key(t) for t in titles_asc] == sorted(title_key(t) for t in titles_asc)


async def test_a_cursor_pages_only_the_order_it_was_read_in(
    database: Database, store: PlaylistStore
) -> None:
    for title in ("one", "two", "three"):
        await create(store, title, PUBLIC, "alice")
    by_title = {"field": "TITLE", "direction": "ASC"}
    page = (await data(database, VIEWER_PAGE, first=1, order=by_title))["viewer"]["playlists"]
    cursor = page["pageInfo"]["endCursor"]
    assert await error_code(database, VIEWER_PAGE, first=1, after=cursor) == "BAD_USER_INPUT"
    flipped = {"field": "TITLE", "direction": "DESC"}
    result = await run(database, VIEWER_PAGE, first=1, before=cursor, order=flipped)
    assert result.errors
    assert "orderBy" in result.errors[0].message
    # The same cursor in its own order and in the title search (same order) works.
    again = await data(database, VIEWER_PAGE, first=5, after=cursor, order=by_title)
    assert [e["node"]["title"] for e in again["viewer"]["playlists"]["edges"]] == ["three", "two"]
    assert await titles(database, SEARCH, q="t", after=cursor) == ["three", "two"]
    for bad in ("nope", ids.cursor("o", '["TITLE","ASC","\\ud800","x"]'), ids.member_cursor("u")):
        assert await error_code(database, VIEWER_PAGE, after=bad) == "BAD_USER_INPUT"
    # A cursor viewer.playlists gave before it took orderBy still pages newest first.
    newest = (await data(database, VIEWER_PAGE, first=1))["viewer"]["playlists"]["edges"][0]
    old = ids.playlist_cursor(
        datetime.fromisoformat(newest["node"]["createdAt"]), ids.playlist_id(newest["node"]["id"])
    )
    rest = await data(database, VIEWER_PAGE, after=old)
    assert [e["node"]["title"] for e in rest["viewer"]["playlists"]["edges"]] == ["two", "one"]


async def test_search_matches_title_prefixes_case_insensitively_with_literal_wildcards(
    database: Database, store: PlaylistStore
) -> None:
    for title in ["50% off", "50 cent", "500 days", "a_b", "axb", "Chill Mix", "chill   mix 2"]:
        await create(store, title, PUBLIC, "alice")
    await create(store, "CHILLER", PUBLIC, "bob")
    await create(store, "chill private", PRIVATE, "alice")
    await create(store, "Straße", PUBLIC, "bob")

    assert await titles(database, SEARCH, "carol", q="50%") == ["50% off"]
    assert await titles(database, SEARCH, "carol", q="a_") == ["a_b"]
    assert await titles(database, SEARCH, "carol", q="%") == []
    assert await titles(database, SEARCH, "carol", q="50") == ["50 cent", "50% off", "500 days"]
    assert await titles(database, SEARCH, "carol", q="CHILL") == [
        "Chill Mix",
        "chill   mix 2",
        "CHILLER",
    ]
    assert await titles(database, SEARCH, "carol", q="  chill  MIX") == [
        "Chill Mix",
        "chill   mix 2",
    ]
    assert await titles(database, SEARCH, "carol", q="STRASSE") == ["Straße"]
    assert await titles(database, SEARCH, "carol", q="hill") == []  # a prefix, not a substring
    # The owner of the PRIVATE one does not find it either: the search is of PUBLIC ones.
    assert "chill private" not in await titles(database, SEARCH, "alice", q="chill")

    forward = (await data(database, SEARCH, q="", first=4))["searchPlaylists"]
    assert forward["totalCount"] == 9
    assert forward["pageInfo"]["hasNextPage"]
    tail = await data(database, SEARCH, q="", last=5, before=forward["pageInfo"]["endCursor"])
    back = tail["searchPlaylists"]
    assert [e["node"]["title"] for e in back["edges"]] == [
        e["node"]["title"] for e in forward["edges"][:3]
    ]
    assert back["pageInfo"] == {**back["pageInfo"], "hasNextPage": True, "hasPreviousPage": False}

    assert await error_code(database, SEARCH, q="x" * 201) == "BAD_USER_INPUT"
    assert await error_code(database, SEARCH, q="a\u0000") == "BAD_USER_INPUT"
    assert await error_code(database, SEARCH, q="a", first=101) == "BAD_USER_INPUT"
    assert await error_code(database, SEARCH, "", q="a") == "UNAUTHENTICATED"


async def test_total_duration_follows_adds_and_removes(
    database: Database, store: PlaylistStore
) -> None:
    pid = await create(store, "timed", PUBLIC, "alice")
    gid = ids.playlist_global_id(pid)
    assert (await data(database, DURATION, id=gid))["playlist"] == {
        "version": 0,
        "totalDurationMs": 0,
    }
    added = await store.execute(AddEntries(pid, "a", 0, ("m1", "m2", "m1", "x1", "n1")), "alice")
    entries = added.outcome.entries
    assert (await data(database, DURATION, id=gid))["playlist"]["totalDurationMs"] == 3000
    await store.execute(RemoveEntries(pid, "r", 1, (entries[0].entry_id,)), "alice")
    assert (await data(database, DURATION, id=gid))["playlist"] == {
        "version": 2,
        "totalDurationMs": 2000,
    }
    down = DurationCatalog()
    down.down = True
    result = await run(database, DURATION, catalog=down, id=gid)
    assert result.errors is None
    assert result.data["playlist"]["totalDurationMs"] is None


async def test_total_duration_is_computed_once_per_version(
    database: Database, store: PlaylistStore
) -> None:
    pid = await create(store, "timed", PUBLIC, "alice")
    await store.execute(AddEntries(pid, "a", 0, ("m1", "m2")), "alice")
    catalog = DurationCatalog()
    services = Services(database, store, catalog, DEFAULT_LIMITS)
    gid = ids.playlist_global_id(pid)
    for _ in range(3):
        result = await schema.execute(
            DURATION, variable_values={"id": gid}, context_value=RequestContext(services, "bob")
        )
        assert result.data == {"playlist": {"version": 1, "totalDurationMs": 2000}}
    assert catalog.calls == 1
    await store.execute(AddEntries(pid, "b", 1, ("m3",)), "alice")
    result = await schema.execute(
        DURATION, variable_values={"id": gid}, context_value=RequestContext(services, "bob")
    )
    assert result.data == {"playlist": {"version": 2, "totalDurationMs": 3000}}
    assert catalog.calls == 2


@pytest.mark.parametrize("query", [VIEWER_PAGE, SEARCH.replace("$q: String!", '$q: String! = ""')])
async def test_lists_of_playlists_are_never_kept_in_the_response_cache(
    database: Database, store: PlaylistStore, query: str
) -> None:
    await create(store, "p", PUBLIC, "alice")
    services = Services(database, store, DurationCatalog(), DEFAULT_LIMITS)
    context = RequestContext(services, "alice")
    result = await schema.execute(query, context_value=context)
    assert result.errors is None
    assert context.reads.record.uncacheable is not None
