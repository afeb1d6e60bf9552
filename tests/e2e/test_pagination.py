"""Relay pagination of ``Playlist.entries`` over HTTP (DESIGN §4, §5).

Forward, backward and windowed pages over a few hundred entries; cursors that
outlive their entry or an insert; ``pageInfo``; the page-size and cursor
errors; and the imported 3,290-entry Chinook "Music" playlist, paged both
ways with its media resolved.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chorus.graphql.schema.common import ids
from tests.e2e.conftest import Api
from tests.e2e.helpers import (
    ENTRIES,
    add,
    committed,
    create_playlist,
    entries_page,
    error_codes,
    mutate,
    track,
)
from tests.servers import ChorusServer

SIZE = 300
CHINOOK = Path(__file__).parents[2] / "src/chorus/catalog/data/chinook-music.json"


@pytest.fixture(scope="module")
def big(api: Api) -> tuple[str, list[dict[str, Any]]]:
    """A playlist of 300 entries (three adds of 100) and its entries in order."""
    pid = create_playlist(api, title="Big")
    entries: list[dict[str, Any]] = []
    for base, start in enumerate(range(1, SIZE + 1, 100)):
        media = [track(n) for n in range(start, start + 100)]
        entries += add(api, pid, media, base=base)["entries"]
    assert [e["mediaId"] for e in entries] == [track(n) for n in range(1, SIZE + 1)]
    return pid, entries


def page_forward(api: Api, pid: str, size: int, **args: Any) -> list[dict[str, Any]]:
    """Every node paging forward with ``first=size``, checking each page on the way."""
    nodes: list[dict[str, Any]] = []
    after = args.pop("after", None)
    while True:
        page = entries_page(api, pid, first=size, after=after, **args)
        check_page(page)
        assert len(page["edges"]) <= size
        nodes += [e["node"] for e in page["edges"]]
        assert page["pageInfo"]["hasPreviousPage"] is (after is not None)
        if not page["pageInfo"]["hasNextPage"]:
            return nodes
        assert len(page["edges"]) == size
        after = page["pageInfo"]["endCursor"]


def page_backward(api: Api, pid: str, size: int, **args: Any) -> list[dict[str, Any]]:
    """Every node paging backward with ``last=size``, returned in list order."""
    pages: list[list[dict[str, Any]]] = []
    before = args.pop("before", None)
    while True:
        page = entries_page(api, pid, last=size, before=before, **args)
        check_page(page)
        assert len(page["edges"]) <= size
        pages.append([e["node"] for e in page["edges"]])
        assert page["pageInfo"]["hasNextPage"] is (before is not None)
        if not page["pageInfo"]["hasPreviousPage"]:
            return [n for p in reversed(pages) for n in p]
        assert len(page["edges"]) == size
        before = page["pageInfo"]["startCursor"]


def check_page(page: dict[str, Any]) -> None:
    """Start and end cursors are those of the first and last edge; nodes in order."""
    edges = page["edges"]
    info = page["pageInfo"]
    if edges:
        assert info["startCursor"] == edges[0]["cursor"]
        assert info["endCursor"] == edges[-1]["cursor"]
    else:
        assert info["startCursor"] is None
        assert info["endCursor"] is None
    keys = [e["node"]["positionKey"] for e in edges]
    assert keys == sorted(keys)
    assert isinstance(page["totalCount"], int)
    assert isinstance(page["version"], int)


def node_ids(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["id"] for n in nodes]


# --- every entry exactly once, in order -------------------------------------------


@pytest.mark.parametrize("size", [7, 37, 100])
def test_forward_and_backward_see_every_entry_once(
    api: Api, big: tuple[str, list[dict[str, Any]]], size: int
) -> None:
    pid, entries = big
    forward = page_forward(api, pid, size)
    backward = page_backward(api, pid, size)
    assert node_ids(forward) == node_ids(entries)
    assert node_ids(backward) == node_ids(entries)
    assert forward == backward


def test_page_info_and_counts(api: Api, big: tuple[str, list[dict[str, Any]]]) -> None:
    pid, entries = big
    first = entries_page(api, pid, first=10)
    assert first["pageInfo"]["hasNextPage"] is True
    assert first["pageInfo"]["hasPreviousPage"] is False
    assert (first["totalCount"], first["version"]) == (SIZE, 3)

    default = entries_page(api, pid)
    assert len(default["edges"]) == 50, "default page size"

    last = entries_page(api, pid, last=10)
    assert node_ids([e["node"] for e in last["edges"]]) == node_ids(entries[-10:])
    assert last["pageInfo"]["hasNextPage"] is False
    assert last["pageInfo"]["hasPreviousPage"] is True

    end = last["pageInfo"]["endCursor"]
    beyond = entries_page(api, pid, first=10, after=end)
    assert beyond["edges"] == []
    assert beyond["pageInfo"] == {
        "hasNextPage": False,
        "hasPreviousPage": True,
        "startCursor": None,
        "endCursor": None,
    }
    start = first["pageInfo"]["startCursor"]
    before_start = entries_page(api, pid, last=10, before=start)
    assert before_start["edges"] == []
    assert before_start["pageInfo"]["hasPreviousPage"] is False
    assert before_start["pageInfo"]["hasNextPage"] is True

    before_last_hundred = entries_page(api, pid, last=100)["pageInfo"]["startCursor"]
    second_to_last = entries_page(api, pid, last=1, before=before_last_hundred)
    exact = entries_page(api, pid, first=100, after=second_to_last["pageInfo"]["endCursor"])
    assert len(exact["edges"]) == 100
    assert exact["pageInfo"]["hasNextPage"] is False, "the last full page knows it is last"

    assert entries_page(api, pid, first=0)["edges"] == []

    found = api.data(ENTRIES, id=pid, first=1)["playlist"]
    assert (found["entryCount"], found["version"]) == (SIZE, 3)


def test_windows_between_two_cursors(api: Api, big: tuple[str, list[dict[str, Any]]]) -> None:
    pid, entries = big
    cursors = [e["cursor"] for e in entries_page(api, pid, first=100)["edges"]]
    after, before = cursors[10], cursors[60]  # the window is entries 11 … 59

    page = entries_page(api, pid, first=20, after=after, before=before)
    check_page(page)
    assert node_ids([e["node"] for e in page["edges"]]) == node_ids(entries[11:31])
    assert page["pageInfo"]["hasNextPage"] is True
    assert page["pageInfo"]["hasPreviousPage"] is True

    page = entries_page(api, pid, last=20, after=after, before=before)
    check_page(page)
    assert node_ids([e["node"] for e in page["edges"]]) == node_ids(entries[40:60])
    assert page["pageInfo"]["hasPreviousPage"] is True
    assert page["pageInfo"]["hasNextPage"] is True

    whole = entries_page(api, pid, first=100, after=after, before=before)
    assert node_ids([e["node"] for e in whole["edges"]]) == node_ids(entries[11:60])
    assert whole["pageInfo"]["hasNextPage"] is False, "nothing more inside the window"

    # Walking the window both ways sees it whole, once; one entry at a time too.
    assert node_ids(page_forward(api, pid, 1, after=after, before=cursors[20])) == node_ids(
        entries[11:20]
    )
    assert node_ids(page_forward(api, pid, 7, after=after, before=before)) == node_ids(
        entries[11:60]
    )
    assert node_ids(page_backward(api, pid, 7, after=after, before=before)) == node_ids(
        entries[11:60]
    )

    # An empty window, and one that is inside out.
    assert entries_page(api, pid, first=10, after=cursors[10], before=cursors[11])["edges"] == []
    assert entries_page(api, pid, first=10, after=cursors[60], before=cursors[10])["edges"] == []


# --- cursors while the list changes -----------------------------------------------


def test_cursor_of_a_removed_entry_pages_from_where_it_stood(api: Api) -> None:
    pid = create_playlist(api, title="Shrinking")
    entries = add(api, pid, [track(n) for n in range(1, 101)], base=0)["entries"]
    page = entries_page(api, pid, first=50)
    cursor = page["edges"][-1]["cursor"]  # entry 49 (0-based)
    committed(
        mutate(
            api,
            "removeEntries",
            playlistId=pid,
            baseVersion=1,
            entryIds=[entries[49]["id"], entries[50]["id"]],
        )
    )

    after = entries_page(api, pid, first=10, after=cursor)
    assert node_ids([e["node"] for e in after["edges"]]) == node_ids(entries[51:61])
    assert after["pageInfo"]["hasPreviousPage"] is True
    before = entries_page(api, pid, last=10, before=cursor)
    assert node_ids([e["node"] for e in before["edges"]]) == node_ids(entries[39:49])
    assert before["pageInfo"]["hasNextPage"] is True
    assert after["totalCount"] == 98

    # Every entry removed: the cursor still answers, with an empty page.
    committed(
        mutate(
            api,
            "removeEntries",
            playlistId=pid,
            baseVersion=2,
            entryIds=[e["id"] for e in entries if e not in (entries[49], entries[50])],
        )
    )
    empty = entries_page(api, pid, first=10, after=cursor)
    assert empty["edges"] == []
    assert empty["pageInfo"]["hasNextPage"] is False
    assert empty["totalCount"] == 0


def test_cursors_survive_inserts_and_moves(api: Api) -> None:
    pid = create_playlist(api, title="Growing")
    entries = add(api, pid, [track(n) for n in range(1, 61)], base=0)["entries"]
    first = entries_page(api, pid, first=30)
    cursor = first["pageInfo"]["endCursor"]  # after entry 29

    inserted = add(api, pid, [track(201), track(202)], base=1, after=entries[29]["id"])["entries"]
    in_front = add(api, pid, [track(203)], base=1, before=entries[0]["id"])["entries"]
    moved = committed(
        mutate(
            api,
            "moveEntries",
            playlistId=pid,
            baseVersion=3,
            entryIds=[entries[59]["id"]],
            after=entries[29]["id"],
        )
    )["entries"]

    rest = page_forward(api, pid, 25, after=cursor)
    assert node_ids(rest) == node_ids([*moved, *inserted, *entries[30:59]])
    before = page_backward(api, pid, 25, before=first["edges"][0]["cursor"])
    assert node_ids(before) == node_ids(in_front)
    # Both ways from the same old cursor: nothing seen twice, nothing missed.
    head = page_backward(api, pid, 25, before=cursor)
    assert node_ids(head) == node_ids([*in_front, *entries[:29]])
    whole = [*head, first["edges"][-1]["node"], *rest]
    assert node_ids(whole) == node_ids(page_forward(api, pid, 100))
    assert len(set(node_ids(whole))) == 63


# --- errors ---------------------------------------------------------------------------


def _forged(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "args",
    [
        {"first": 101},
        {"last": 101},
        {"first": 1000000},
        {"first": -1},
        {"last": -5},
        {"first": 10, "last": 10},
        {"first": 10, "after": "garbage"},
        {"first": 10, "after": ""},
        {"last": 10, "before": "%%%"},
        {"first": 10, "after": _forged("k:")},
        {"first": 10, "after": _forged("k:abc")},
        {"first": 10, "after": _forged("k::entry")},
        {"first": 10, "after": _forged("p:2024-01-01|x")},
        {"first": 10, "after": _forged("k:a b:entry")},
        {"first": 10, "after": _forged("k:abc:entry:more")},
        {"first": 10, "after": _forged("k:" + "a" * 400 + ":e")},
        {"first": 10, "after": "A" * 600},
        {"first": 10, "after": ids.to_global_id("Playlist", "x")},
    ],
)
def test_bad_page_arguments_are_request_errors(
    api: Api, big: tuple[str, list[dict[str, Any]]], args: dict[str, Any]
) -> None:
    pid, _ = big
    body = api.gql(ENTRIES, id=pid, **args)
    assert error_codes(body) == ["BAD_USER_INPUT"], body
    assert body["data"] == {"playlist": None} or body["data"] is None
    assert "Traceback" not in json.dumps(body)


def test_first_and_last_at_the_limit(api: Api, big: tuple[str, list[dict[str, Any]]]) -> None:
    pid, entries = big
    assert len(entries_page(api, pid, first=100)["edges"]) == 100
    assert node_ids([e["node"] for e in entries_page(api, pid, last=100)["edges"]]) == node_ids(
        entries[-100:]
    )


# --- the imported Chinook "Music" playlist ----------------------------------------------

MUSIC_PAGE = """
query Music($id: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  playlist(id: $id) {
    title version entryCount
    entries(first: $first, after: $after, last: $last, before: $before) {
      totalCount version
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { id positionKey mediaId media { id title artists durationMs } } }
    }
  }
}
"""


def music_source() -> list[str]:
    """The media ids of Chinook playlist 1, "Music", in source order."""
    document = json.loads(CHINOOK.read_text())
    (music,) = [p for p in document["playlists"] if p["id"] == 1]
    assert music["name"] == "Music"
    return [track(n) for n in music["track_ids"]]


def import_chinook(server: ChorusServer) -> subprocess.CompletedProcess[str]:
    """Run ``chorus import chinook --owner alice`` against the server's database."""
    result = subprocess.run(
        [sys.executable, "-m", "chorus.cli", "import", "chinook", "--owner", "alice"],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def music(server: ChorusServer, api: Api) -> str:
    """``chorus import chinook --owner alice`` against the server's database; Music's id."""
    result = import_chinook(server)
    lines = [line.split() for line in result.stdout.splitlines()]
    found = [
        line[0] for line in lines if line[-1:] == ["Music"] and line[1:3] == ["3290", "entries"]
    ]
    assert found, result.stdout
    assert ids.playlist_id(found[0])  # the import prints global IDs, as the API takes them
    return found[0]


def test_music_playlist_pages_both_ways(api: Api, music: str) -> None:
    expected = music_source()
    assert len(expected) == 3290

    def page(**args: Any) -> dict[str, Any]:
        found = api.data(MUSIC_PAGE, id=music, **args)["playlist"]
        assert found["title"] == "Music"
        assert found["entryCount"] == 3290
        connection: dict[str, Any] = found["entries"]
        assert connection["totalCount"] == 3290
        check_page(connection)
        return connection

    forward: list[dict[str, Any]] = []
    after = None
    while True:
        connection = page(first=100, after=after)
        forward += [e["node"] for e in connection["edges"]]
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]

    backward_pages: list[list[dict[str, Any]]] = []
    before = None
    while True:
        connection = page(last=100, before=before)
        backward_pages.append([e["node"] for e in connection["edges"]])
        if not connection["pageInfo"]["hasPreviousPage"]:
            break
        before = connection["pageInfo"]["startCursor"]
    backward = [n for p in reversed(backward_pages) for n in p]

    assert len(forward) == 3290
    assert len(set(node_ids(forward))) == 3290, "every entry exactly once"
    assert [n["mediaId"] for n in forward] == expected, "in the source's order"
    assert backward == forward
    missing = [n["mediaId"] for n in forward if n["media"] is None]
    assert missing == [], f"{len(missing)} media not resolved"
    assert all(n["media"]["id"] == n["mediaId"] and n["media"]["title"] for n in forward)


def test_import_again_changes_nothing(server: ChorusServer, api: Api, music: str) -> None:
    before = api.data(MUSIC_PAGE, id=music, first=1)["playlist"]
    import_chinook(server)
    after = api.data(MUSIC_PAGE, id=music, first=1)["playlist"]
    assert after == before


# --- the other connections -----------------------------------------------------------

CONNECTIONS = {
    "viewer.playlists": (
        "query($first: Int, $after: String) { viewer { playlists(first: $first, after: $after) "
        "{ totalCount pageInfo { hasNextPage hasPreviousPage startCursor endCursor } "
        "edges { cursor node { id } } } } }",
        lambda data: data["viewer"]["playlists"],
    ),
    "members": (
        "query($id: ID!, $first: Int, $after: String) { playlist(id: $id) { "
        "members(first: $first, after: $after) { totalCount "
        "pageInfo { hasNextPage hasPreviousPage startCursor endCursor } "
        "edges { cursor node { user { id } role } } } } }",
        lambda data: data["playlist"]["members"],
    ),
    "searchMedia": (
        'query($first: Int, $after: String) { searchMedia(query: "love", first: $first, '
        "after: $after) { totalCount pageInfo { hasNextPage hasPreviousPage startCursor "
        "endCursor } edges { cursor node { id } } } }",
        lambda data: data["searchMedia"],
    ),
}


@pytest.mark.parametrize("name", list(CONNECTIONS))
def test_other_connections_page_forward(api: Api, name: str) -> None:
    user = f"pager-{name}"
    pid = create_playlist(api, user, title="Members")
    for n in range(7):
        committed(
            mutate(
                api,
                "setMemberRole",
                user,
                playlistId=pid,
                baseVersion=n,
                userId=f"member-{n}",
                role="VIEWER",
            )
        )
    for n in range(4):
        create_playlist(api, user, title=f"Owned {n}")
    query, connection = CONNECTIONS[name]

    whole = connection(api.data(query, user, id=pid, first=100))
    expected = [e["node"] for e in whole["edges"]]
    if name == "searchMedia":  # 130 matches: the first 20 are enough
        assert whole["totalCount"] > 100
        assert whole["pageInfo"]["hasNextPage"] is True
        expected = expected[:20]
    else:
        assert whole["pageInfo"]["hasNextPage"] is False
        assert len(expected) == whole["totalCount"]

    seen: list[dict[str, Any]] = []
    after = None
    while len(seen) < len(expected):
        page = connection(api.data(query, user, id=pid, first=3, after=after))
        check_cursors(page)
        assert page["pageInfo"]["hasPreviousPage"] is (after is not None)
        assert page["totalCount"] == whole["totalCount"]
        seen += [e["node"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen[: len(expected)] == expected
    if name == "members":
        assert len(expected) == 8
    if name == "viewer.playlists":
        assert len(expected) == 5


def check_cursors(page: dict[str, Any]) -> None:
    edges = page["edges"]
    info = page["pageInfo"]
    assert info["startCursor"] == (edges[0]["cursor"] if edges else None)
    assert info["endCursor"] == (edges[-1]["cursor"] if edges else None)
