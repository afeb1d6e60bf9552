"""Finding playlists against a running ``chorus serve`` with its response cache (both databases).

A list of playlists is named by no version, so a search never answers from
the cache (a playlist created after it shows at once); ``totalDurationMs``
is named by its version, so a cached answer with it is the version's.
"""

from __future__ import annotations

from tests.e2e.conftest import Api
from tests.e2e.helpers import add, committed, create_playlist, mutate, track
from tests.e2e.test_response_cache import cache_counts, delta, post

SEARCH_PLAYLISTS = """query Find($q: String!) { searchPlaylists(query: $q, first: 10) {
  totalCount edges { node { id title } } } }"""
DURATION = "query Length($id: ID!) { playlist(id: $id) { version totalDurationMs } }"


def test_a_title_search_sees_a_playlist_created_after_it(api: Api) -> None:
    query = f"Find {api.op()}"
    first = post(api, SEARCH_PLAYLISTS, "bob", variables={"q": query})
    assert first.json()["data"]["searchPlaylists"]["totalCount"] == 0
    before = cache_counts(api.server)
    pid = create_playlist(api, title=f"{query} mix", visibility="PUBLIC")
    again = post(api, SEARCH_PLAYLISTS, "bob", variables={"q": query})
    assert [e["node"]["id"] for e in again.json()["data"]["searchPlaylists"]["edges"]] == [pid]
    assert delta(before, cache_counts(api.server)).get("hit", 0) == 0
    # Renamed out of the prefix: gone from the next search at once.
    mutate(api, "updatePlaylist", playlistId=pid, baseVersion=0, title="renamed")
    gone = post(api, SEARCH_PLAYLISTS, "bob", variables={"q": query})
    assert gone.json()["data"]["searchPlaylists"]["totalCount"] == 0


def entry_durations(api: Api, pid: str) -> int:
    """The sum of the entries' ``media.durationMs``, read page by page (the plain path)."""
    query = """query Each($id: ID!) { playlist(id: $id) { entries(first: 100) {
      edges { node { media { durationMs } } } } } }"""
    edges = api.data(query, "alice", id=pid)["playlist"]["entries"]["edges"]
    return sum(e["node"]["media"]["durationMs"] or 0 for e in edges)


def test_a_cached_total_duration_is_the_versions(api: Api) -> None:
    pid = create_playlist(api, visibility="PUBLIC")
    added = add(api, pid, [track(1), track(2), track(1)], 0)
    before = cache_counts(api.server)
    first = post(api, DURATION, "bob", variables={"id": pid}).json()["data"]["playlist"]
    second = post(api, DURATION, "carol", variables={"id": pid}).json()["data"]["playlist"]
    assert delta(before, cache_counts(api.server)) == {"miss": 1, "hit": 1}  # shared: PUBLIC
    assert first == second == {"version": 1, "totalDurationMs": entry_durations(api, pid)}
    assert first["totalDurationMs"] > 0
    removed = added["entries"][0]["id"]
    committed(mutate(api, "removeEntries", playlistId=pid, baseVersion=1, entryIds=[removed]))
    after = post(api, DURATION, "bob", variables={"id": pid}).json()["data"]["playlist"]
    assert after == {"version": 2, "totalDurationMs": entry_durations(api, pid)}
    assert after["totalDurationMs"] < first["totalDurationMs"]


def test_a_total_duration_past_a_32_bit_int_is_answered(api: Api) -> None:
    # 410 × Chinook's longest track (5,286,953 ms): 2,167,650,730 ms, past
    # GraphQL's Int (2^31 - 1) — which answered null and an error before.
    pid = create_playlist(api, visibility="PUBLIC")
    for n in range(5):
        add(api, pid, [track(2820)] * 82, n)
    body = api.gql(DURATION, id=pid)
    assert "errors" not in body, body
    total = body["data"]["playlist"]["totalDurationMs"]
    assert total == 410 * 5_286_953 > 2**31 - 1
