"""``Playlist.atVersion`` over HTTP against the running server, on SQLite and PostgreSQL.

History at ten versions equals what ``entries`` returned at each of them
(recorded as the edits went), cursors of those pages page the old version,
below the retention floor (``chorus compact``) is ``HISTORY_COMPACTED``, and
a removed member gets nothing.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.e2e.conftest import Api
from tests.e2e.helpers import ENTRY, PAGE_INFO, add, committed, create_playlist, mutate, track
from tests.switches import child_environ

AT = f"""
query At($id: ID!, $v: Int!, $first: Int, $after: String, $last: Int, $before: String) {{
  playlist(id: $id) {{
    version
    atVersion(version: $v) {{
      version title entryCount
      entries(first: $first, after: $after, last: $last, before: $before) {{
        totalCount version {PAGE_INFO} edges {{ cursor node {{ {ENTRY} }} }}
      }}
    }}
  }}
}}
"""

NOW = f"""
query Now($id: ID!) {{
  playlist(id: $id) {{
    version title entryCount
    entries(first: 100) {{ totalCount version {PAGE_INFO} edges {{ cursor node {{ {ENTRY} }} }} }}
  }}
}}
"""


def _edit(api: Api, pid: str, step: int, base: int, entries: list[dict[str, Any]]) -> int:
    """One edit of a rotating kind; the version it committed."""
    kind = step % 4
    if kind == 0 or len(entries) < 2:
        payload = add(api, pid, [track(step + 1), track(step + 50)], base)
    elif kind == 1:
        payload = committed(
            mutate(
                api,
                "moveEntries",
                playlistId=pid,
                baseVersion=base,
                entryIds=[entries[-1]["node"]["id"]],
                before=entries[0]["node"]["id"],
            )
        )
    elif kind == 2:
        payload = committed(
            mutate(
                api,
                "removeEntries",
                playlistId=pid,
                baseVersion=base,
                entryIds=[entries[len(entries) // 2]["node"]["id"]],
            )
        )
    else:
        payload = committed(
            mutate(api, "updatePlaylist", playlistId=pid, baseVersion=base, title=f"Mix {step}")
        )
    return int(payload["version"])


def test_history_at_ten_versions_equals_what_entries_returned_then(api: Api) -> None:
    pid = create_playlist(api)
    recorded: dict[int, dict[str, Any]] = {}
    now = api.data(NOW, id=pid)["playlist"]
    for step in range(20):
        version = _edit(api, pid, step, now["version"], now["entries"]["edges"])
        now = api.data(NOW, id=pid)["playlist"]
        assert now["version"] == version
        if step % 2:
            recorded[version] = now
    assert len(recorded) == 10
    for version, then in recorded.items():
        body = api.data(AT, id=pid, v=version, first=100)["playlist"]
        assert body["version"] == now["version"]
        at = body["atVersion"]
        assert (at["version"], at["title"], at["entryCount"]) == (
            version,
            then["title"],
            then["entryCount"],
        )
        assert at["entries"] == then["entries"]
        # The same list two at a time, by the old version's own cursors.
        edges, after = [], None
        while True:
            page = api.data(AT, id=pid, v=version, first=2, after=after)["playlist"]
            connection = page["atVersion"]["entries"]
            edges += connection["edges"]
            if not connection["pageInfo"]["hasNextPage"]:
                break
            after = connection["pageInfo"]["endCursor"]
        assert edges == then["entries"]["edges"]
        # A cursor recorded then pages backwards at that version now.
        if len(edges) >= 3:
            back = api.data(AT, id=pid, v=version, last=2, before=edges[2]["cursor"])
            assert back["playlist"]["atVersion"]["entries"]["edges"] == edges[:2]


def test_a_removed_member_gets_nothing(api: Api) -> None:
    pid = create_playlist(api)
    add(api, pid, [track(1)], 0)
    committed(
        mutate(api, "setMemberRole", playlistId=pid, baseVersion=1, userId="bob", role="VIEWER")
    )
    assert api.data(AT, "bob", id=pid, v=1)["playlist"]["atVersion"]["entryCount"] == 1
    committed(mutate(api, "removeMember", playlistId=pid, baseVersion=2, userId="bob"))
    body = api.gql(AT, "bob", id=pid, v=2)
    assert (body["data"], body.get("errors")) == ({"playlist": None}, None)
    body = api.gql(AT, "mallory", id=pid, v=1)
    assert (body["data"], body.get("errors")) == ({"playlist": None}, None)


def test_below_the_retention_floor_is_history_compacted(api: Api) -> None:
    pid = create_playlist(api)
    for base in range(12):
        add(api, pid, [track(base + 1)], base)
    environ = child_environ()
    done = subprocess.run(
        [sys.executable, "-m", "chorus.cli", "compact", "--keep-versions", "4"],
        env={**environ, "CHORUS_DATABASE_URL": api.server.database_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    body = api.gql(AT, id=pid, v=8)
    assert body["data"] == {"playlist": {"version": 12, "atVersion": None}}
    (error,) = body["errors"]
    assert error["extensions"] == {
        "code": "HISTORY_COMPACTED",
        "oldestVersion": 9,
        "currentVersion": 12,
    }
    assert error["path"] == ["playlist", "atVersion"]
    kept = api.data(AT, id=pid, v=9, first=100)["playlist"]["atVersion"]
    assert (kept["version"], kept["entryCount"]) == (9, 9)
    (bad,) = api.gql(AT, id=pid, v=13)["errors"]
    assert bad["extensions"]["code"] == "BAD_USER_INPUT"
