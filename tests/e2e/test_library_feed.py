"""Liked Songs, follows and the feed against ``chorus serve`` (issue 14), SQLite and PostgreSQL.

The server runs with ``CHORUS_FEED_PUSH_MAX_FOLLOWERS=2``: a playlist with one
follower is pushed (the embedded relay writes its rows before the bus hears
the version), one with two is pulled at read time. ``feedEvents`` is the
synchronisation point: when it delivers a version, the version's feed rows
are written.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from websockets.asyncio.client import ClientConnection

from chorus.db.engine import Database
from chorus.db.tables import feed_item
from tests.deadlines import patience
from tests.e2e.conftest import Api, running_server
from tests.e2e.helpers import add, committed, create_playlist, mutate, refused, track
from tests.e2e.test_subscriptions import receive, socket, subscribe
from tests.servers import ChorusServer

LIKE_PAYLOAD = "operationId version replayed userErrors { code message field } playlist { id }"
LIKE = f"mutation($input: LikeMediaInput!) {{ likeMedia(input: $input) {{ {LIKE_PAYLOAD} }} }}"
UNLIKE = (
    f"mutation($input: UnlikeMediaInput!) {{ unlikeMedia(input: $input) {{ {LIKE_PAYLOAD} }} }}"
)
LIKED = """{ viewer { likedSongs { id title visibility version viewerRole
  entries(first: 10) { edges { node { mediaId media { viewerHasLiked } } } } } } }"""
FOLLOW_PAYLOAD = "following changed userErrors { code field } target { __typename }"
FOLLOW = f"mutation($input: FollowInput!) {{ follow(input: $input) {{ {FOLLOW_PAYLOAD} }} }}"
UNFOLLOW = f"mutation($input: UnfollowInput!) {{ unfollow(input: $input) {{ {FOLLOW_PAYLOAD} }} }}"
FEED = """query($first: Int, $after: String) { viewer { feed(first: $first, after: $after) {
  pageInfo { hasNextPage endCursor }
  edges { cursor node { version kind actor { id } happenedAt playlist { id title }
    changes { __typename } } } } } }"""
FEED_EVENTS = (
    "subscription { feedEvents { __typename ... on FeedItem { version kind playlist { id title }"
    " actor { id } } ... on FeedResyncRequired { reason } } }"
)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChorusServer]:
    settings = {"CHORUS_FEED_PUSH_MAX_FOLLOWERS": "2"}
    with running_server(request.param, tmp_path_factory, **settings) as chorus:
        yield chorus


def like(api: Api, user: str, media: str, query: str = LIKE, op: str | None = None) -> Any:
    name = "likeMedia" if query is LIKE else "unlikeMedia"
    variables = {"input": {"operationId": op or api.op(), "mediaId": media}}
    return api.data(query, user, **variables)[name]


def follow(api: Api, user: str, kind: str, target: str, query: str = FOLLOW) -> Any:
    name = "follow" if query is FOLLOW else "unfollow"
    return api.data(query, user, input={"kind": kind, "targetId": target})[name]


def feed(api: Api, user: str) -> list[tuple[str, int, str]]:
    """The whole feed as (playlist id, version, kind), two items a page."""
    items: list[tuple[str, int, str]] = []
    after = None
    while True:
        page = api.data(FEED, user, first=2, after=after)["viewer"]["feed"]
        items += [
            (e["node"]["playlist"]["id"], e["node"]["version"], e["node"]["kind"])
            for e in page["edges"]
        ]
        if not page["pageInfo"]["hasNextPage"]:
            return items
        after = page["pageInfo"]["endCursor"]


def live_streams(server: ChorusServer) -> int:
    body: dict[str, Any] = httpx.get(f"{server.base_url}/healthz", timeout=5).json()
    return int(body["live_streams"])


async def listen(server: ChorusServer, ws: ClientConnection, joins: int) -> None:
    """Subscribe to feedEvents and wait until its ``joins`` hub memberships stand."""
    before = await asyncio.to_thread(live_streams, server)
    message = {"id": "feed", "type": "subscribe", "payload": {"query": FEED_EVENTS}}
    await ws.send(json.dumps(message))
    deadline = time.monotonic() + patience(20)  # tells 'joined' from 'hung', not a speed
    while await asyncio.to_thread(live_streams, server) < before + joins:
        assert time.monotonic() < deadline, "feedEvents never joined its playlists"
        await asyncio.sleep(0.05)


async def next_item(ws: ClientConnection) -> dict[str, Any]:
    message = await receive(ws)
    assert message["type"] == "next", message
    item: dict[str, Any] = message["payload"]["data"]["feedEvents"]
    return item


def test_like_and_unlike_are_versions_of_liked_songs(api: Api) -> None:
    first = like(api, "lia", track(1))
    assert first["userErrors"] == []
    assert first["version"] == 1  # version 0 was made on first use
    op = api.op()
    second = like(api, "lia", track(2), op=op)
    retry = like(api, "lia", track(2), op=op)
    assert (retry["replayed"], retry["version"]) == (True, second["version"])
    again = like(api, "lia", track(1))
    assert again["version"] == 3  # liking twice: a version, no duplicate
    liked = api.data(LIKED, "lia")["viewer"]["likedSongs"]
    assert liked["title"] == "Liked Songs"
    assert (liked["visibility"], liked["viewerRole"]) == ("PRIVATE", "OWNER")
    nodes = [e["node"] for e in liked["entries"]["edges"]]
    assert [n["mediaId"] for n in nodes] == [track(2), track(1)]
    assert all(n["media"]["viewerHasLiked"] for n in nodes)
    assert like(api, "lia", track(2), UNLIKE)["version"] == 4
    search = api.data(
        '{ searchMedia(query: "", first: 3) { edges { node { id viewerHasLiked } } } }', "lia"
    )["searchMedia"]["edges"]
    assert {e["node"]["id"]: e["node"]["viewerHasLiked"] for e in search} == {
        track(1): True,
        track(2): False,
        track(3): False,
    }
    # Nobody else sees it, edits it, or can make it theirs.
    assert api.data("query($id: ID!) { playlist(id: $id) { id } }", "bob", id=liked["id"]) == {
        "playlist": None
    }
    rename = mutate(
        api, "updatePlaylist", "lia", playlistId=liked["id"], baseVersion=4, title="Mine"
    )
    refused(rename, "FORBIDDEN")
    unknown = like(api, "lia", "chinook:track:999999")
    assert [e["code"] for e in unknown["userErrors"]] == ["MEDIA_NOT_FOUND"]


async def test_likes_reach_a_liked_songs_subscriber(api: Api, server: ChorusServer) -> None:
    liked_id = api.data("{ viewer { likedSongs { id version } } }", "lou")["viewer"]["likedSongs"]
    async with socket(server, api.token("lou")) as ws:
        await subscribe(ws, "liked", liked_id["id"], liked_id["version"])
        await asyncio.to_thread(like, api, "lou", track(5))
        message = await receive(ws)
        assert message["type"] == "next", message
        event = message["payload"]["data"]["playlistEvents"]
        assert event["version"] == liked_id["version"] + 1
        assert [c["__typename"] for c in event["changes"]] == ["EntriesAdded"]


async def test_follow_edit_and_see_it_in_the_feed_pushed_and_pulled(
    api: Api, server: ChorusServer
) -> None:
    alone = create_playlist(api, "ann", "Alone", visibility="PUBLIC")  # 1 follower: pushed
    crowd = create_playlist(api, "ann", "Crowd", visibility="PUBLIC")  # 2 followers: pulled
    for playlist in (alone, crowd):
        assert follow(api, "ben", "PLAYLIST", playlist)["changed"]
    assert not follow(api, "ben", "PLAYLIST", alone)["changed"]  # idempotent
    follow(api, "cat", "PLAYLIST", crowd)
    counts = api.data(
        "query($a: ID!, $c: ID!) { a: playlist(id: $a) { followerCount } "
        "c: playlist(id: $c) { followerCount } }",
        "ben",
        a=alone,
        c=crowd,
    )
    assert (counts["a"]["followerCount"], counts["c"]["followerCount"]) == (1, 2)
    async with socket(server, api.token("ben")) as ws:
        await listen(server, ws, joins=2)
        add(api, alone, [track(1)], 0, "ann")
        assert (await next_item(ws))["version"] == 1
        add(api, crowd, [track(2)], 0, "ann")
        item = await next_item(ws)
        assert (item["version"], item["playlist"]["title"], item["actor"]["id"]) == (
            1,
            "Crowd",
            "ann",
        )
    assert feed(api, "ben") == [(crowd, 1, "PLAYLIST_CHANGED"), (alone, 1, "PLAYLIST_CHANGED")]
    assert feed(api, "cat") == [(crowd, 1, "PLAYLIST_CHANGED")]
    # Thin: the title is read now, not when the version was committed.
    mutate(api, "updatePlaylist", "ann", playlistId=crowd, baseVersion=1, title="Renamed")
    titles = [
        e["node"]["playlist"]["title"]
        for e in api.data(FEED, "ben", first=5)["viewer"]["feed"]["edges"]
        if e["node"]["playlist"]["id"] == crowd
    ]
    assert set(titles) == {"Renamed"}
    # Unfollowing ends the follow's effect.
    assert follow(api, "ben", "PLAYLIST", crowd, UNFOLLOW)["following"] is False
    assert [i[0] for i in feed(api, "ben")] == [alone]


async def test_the_server_switches_a_playlist_back_to_push_behind_the_unfollow(
    api: Api, server: ChorusServer
) -> None:
    """Two followers: pulled; one unfollows: the server's switcher backfills the other.

    Only the switcher writes hal's row: version 1 was committed while pulled.
    """
    band = create_playlist(api, "gus", "Band", visibility="PUBLIC")
    for user in ("hal", "ivy"):
        follow(api, user, "PLAYLIST", band)
    add(api, band, [track(4)], 0, "gus")  # pulled: no feed row
    assert feed(api, "hal") == [(band, 1, "PLAYLIST_CHANGED")]
    follow(api, "ivy", "PLAYLIST", band, UNFOLLOW)  # one follower: switching to push
    db = Database(server.database_url)
    try:

        async def hal_rows() -> int:
            async with db.read() as conn:
                where = feed_item.c.follower_id == "hal"
                return int(
                    await conn.scalar(select(func.count()).select_from(feed_item).where(where)) or 0
                )

        deadline = time.monotonic() + patience(20)  # 'switched' or 'never ran'
        while await hal_rows() < 1:
            assert time.monotonic() < deadline, "the switch back to push never ran"
            await asyncio.sleep(0.05)
    finally:
        await db.dispose()
    assert feed(api, "hal") == [(band, 1, "PLAYLIST_CHANGED")]  # the same, now pushed


async def test_losing_access_to_a_private_playlist_ends_its_feed(
    api: Api, server: ChorusServer
) -> None:
    secret = create_playlist(api, "ada", "Secret")
    refused_follow = follow(api, "bo", "PLAYLIST", secret)
    assert [e["code"] for e in refused_follow["userErrors"]] == ["NOT_FOUND"]
    committed(
        mutate(
            api,
            "setMemberRole",
            "ada",
            playlistId=secret,
            baseVersion=0,
            userId="bo",
            role="VIEWER",
        )
    )
    assert follow(api, "bo", "PLAYLIST", secret)["following"]
    async with socket(server, api.token("bo")) as ws:
        await listen(server, ws, joins=1)
        add(api, secret, [track(3)], 1, "ada")
        assert (await next_item(ws))["version"] == 2
    assert [v for _, v, _ in feed(api, "bo")] == [2]
    committed(mutate(api, "removeMember", "ada", playlistId=secret, baseVersion=2, userId="bo"))
    assert feed(api, "bo") == []


async def test_a_running_feed_follows_follows_made_after_it_started(
    api: Api, server: ChorusServer
) -> None:
    first = create_playlist(api, "eve", "First", visibility="PUBLIC")
    second = create_playlist(api, "eve", "Second", visibility="PUBLIC")
    async with socket(server, api.token("dan")) as ws:
        await listen(server, ws, joins=0)
        before = await asyncio.to_thread(live_streams, server)

        async def joined(count: int) -> None:
            deadline = time.monotonic() + patience(20)  # 'joined' or 'hung', not a speed
            while await asyncio.to_thread(live_streams, server) != before + count:
                assert time.monotonic() < deadline, "the feed never followed the change"
                await asyncio.sleep(0.05)

        assert follow(api, "dan", "PLAYLIST", first)["changed"]
        await joined(1)
        add(api, first, [track(1)], 0, "eve")
        item = await next_item(ws)
        assert (item["playlist"]["id"], item["version"]) == (first, 1)
        # Unfollowed while running: its next version is not offered; the new follow's is.
        follow(api, "dan", "PLAYLIST", first, UNFOLLOW)
        await joined(0)
        follow(api, "dan", "PLAYLIST", second)
        await joined(1)
        add(api, first, [track(2)], 1, "eve")
        add(api, second, [track(3)], 0, "eve")
        item = await next_item(ws)
        assert (item["playlist"]["id"], item["version"]) == (second, 1)


def test_a_page_of_entries_shows_each_viewer_their_own_likes(api: Api) -> None:
    # A page fetches its media's likes in one query: each viewer still gets
    # their own, and the answer cached for one is not served to the other.
    playlist = create_playlist(api, "lia", title="Likes in a page", visibility="PUBLIC")
    add(api, playlist, [track(11), track(12), track(13), track(11)], 0, user="lia")
    like(api, "lia", track(12))
    like(api, "noa", track(13))
    page = """query($id: ID!) { playlist(id: $id) { entries(first: 10) {
      edges { node { mediaId media { id viewerHasLiked } } } } } }"""

    def likes(user: str) -> list[tuple[str, bool]]:
        edges = api.data(page, user, id=playlist)["playlist"]["entries"]["edges"]
        return [(e["node"]["mediaId"], e["node"]["media"]["viewerHasLiked"]) for e in edges]

    for _ in range(2):  # the second read may come from the response cache
        assert likes("lia") == [
            (track(11), False),
            (track(12), True),
            (track(13), False),
            (track(11), False),
        ]
        assert likes("noa") == [
            (track(11), False),
            (track(12), False),
            (track(13), True),
            (track(11), False),
        ]
    like(api, "lia", track(11))
    assert [liked for _, liked in likes("lia")] == [True, True, False, True]


def test_following_a_user_brings_their_new_public_playlists(api: Api) -> None:
    assert follow(api, "fan", "USER", "star")["target"] == {"__typename": "User"}
    own = follow(api, "fan", "USER", "fan")
    assert [e["code"] for e in own["userErrors"]] == ["INVALID_INPUT"]
    public = create_playlist(api, "star", "Out now", visibility="PUBLIC")
    create_playlist(api, "star", "Drafts")  # PRIVATE: not for the fan
    # the relay pushes after the commit; 'hung' bound only
    deadline = time.monotonic() + patience(20)
    while feed(api, "fan") != [(public, 0, "PLAYLIST_CREATED")]:
        assert time.monotonic() < deadline, feed(api, "fan")
        time.sleep(0.05)
    following = api.data(
        "{ viewer { following(kind: USER) { totalCount edges { followedAt node { "
        "... on User { id followerCount } } } } } }",
        "fan",
    )["viewer"]["following"]
    assert following["totalCount"] == 1
    assert following["edges"][0]["node"] == {"id": "star", "followerCount": 1}


def test_bad_feed_arguments_are_clear_errors(api: Api) -> None:
    body = api.gql("{ viewer { feed(first: 51) { pageInfo { hasNextPage } } } }", "ben")
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "between 0 and 50" in body["errors"][0]["message"]
    body = api.gql('{ viewer { feed(after: "nope") { pageInfo { hasNextPage } } } }', "ben")
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    bad = follow(api, "ben", "PLAYLIST", "not-a-global-id")
    assert bad["userErrors"] == [{"code": "NOT_FOUND", "field": ["input", "targetId"]}]
