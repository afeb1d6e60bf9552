"""GraphQL documents and small steps shared by the end-to-end tests.

Every function takes the module's :class:`~tests.e2e.conftest.Api` and acts as
``user`` (``"alice"`` unless told), so a test reads as the story it checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.e2e.conftest import Api

USER_ERRORS = "userErrors { code message field currentVersion }"
PAYLOAD = f"operationId version replayed rebased {USER_ERRORS} playlist {{ id version title }}"
ENTRY = "id positionKey mediaId"

MUTATIONS = (
    "createPlaylist",
    "addEntries",
    "moveEntries",
    "removeEntries",
    "updatePlaylist",
    "setMemberRole",
    "removeMember",
    "revertPlaylist",
    "deletePlaylist",
)

_EXTRA = {
    "addEntries": f"entries {{ {ENTRY} }}",
    "moveEntries": f"entries {{ {ENTRY} }} skippedEntryIds",
    "removeEntries": "skippedEntryIds removedEntryIds",
}

PAGE_INFO = "pageInfo { hasNextPage hasPreviousPage startCursor endCursor }"

ENTRIES = f"""
query Entries($id: ID!, $first: Int, $after: String, $last: Int, $before: String) {{
  playlist(id: $id) {{
    version
    entryCount
    entries(first: $first, after: $after, last: $last, before: $before) {{
      totalCount
      version
      {PAGE_INFO}
      edges {{ cursor node {{ {ENTRY} }} }}
    }}
  }}
}}
"""

PLAYLIST = """
query Playlist($id: ID!) {
  playlist(id: $id) {
    id title description visibility collaborative version entryCount viewerRole
    owner { id }
  }
}
"""


def mutation_document(name: str) -> str:
    """The document of mutation ``name`` selecting its whole payload."""
    input_type = name[0].upper() + name[1:] + "Input"
    extra = _EXTRA.get(name, "")
    return (
        f"mutation Run($input: {input_type}!) {{\n"
        f"  {name}(input: $input) {{ {PAYLOAD} {extra} }}\n}}"
    )


def mutate(api: Api, name: str, user: str = "alice", **fields: Any) -> dict[str, Any]:
    """The payload of mutation ``name`` with ``fields`` as input (a fresh operation id)."""
    fields.setdefault("operationId", api.op())
    payload: dict[str, Any] = api.data(mutation_document(name), user, input=fields)[name]
    return payload


def committed(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload``, asserting that it committed a version."""
    assert payload["userErrors"] == [], payload
    assert payload["version"] is not None, payload
    return payload


def refused(payload: dict[str, Any], code: str) -> dict[str, Any]:
    """The single user error of ``payload``, asserting its code and that nothing committed."""
    assert payload["version"] is None, payload
    assert [e["code"] for e in payload["userErrors"]] == [code], payload
    error: dict[str, Any] = payload["userErrors"][0]
    return error


def create_playlist(api: Api, user: str = "alice", title: str = "Mix", **fields: Any) -> str:
    """A new playlist's global id."""
    payload = committed(mutate(api, "createPlaylist", user, title=title, **fields))
    assert payload["version"] == 0
    playlist_id: str = payload["playlist"]["id"]
    return playlist_id


def track(n: int) -> str:
    """The media id of Chinook track ``n`` (1–3503) in the embedded catalog."""
    return f"chinook:track:{n}"


def add(
    api: Api, playlist_id: str, media: list[str], base: int, user: str = "alice", **fields: Any
) -> dict[str, Any]:
    """Committed ``addEntries`` of ``media``; its payload."""
    return committed(
        mutate(
            api,
            "addEntries",
            user,
            playlistId=playlist_id,
            baseVersion=base,
            mediaIds=media,
            **fields,
        )
    )


def playlist(api: Api, playlist_id: str, user: str = "alice") -> dict[str, Any] | None:
    found: dict[str, Any] | None = api.data(PLAYLIST, user, id=playlist_id)["playlist"]
    return found


def version(api: Api, playlist_id: str, user: str = "alice") -> int:
    found = playlist(api, playlist_id, user)
    assert found is not None
    return int(found["version"])


def entries_page(api: Api, playlist_id: str, user: str = "alice", **args: Any) -> dict[str, Any]:
    """The ``entries`` connection for page arguments ``args``."""
    found = api.data(ENTRIES, user, id=playlist_id, **args)["playlist"]
    assert found is not None
    connection: dict[str, Any] = found["entries"]
    return connection


def all_entries(
    api: Api, playlist_id: str, user: str = "alice", size: int = 100
) -> list[dict[str, Any]]:
    """Every live entry in list order, paging forward."""
    out: list[dict[str, Any]] = []
    after = None
    while True:
        page = entries_page(api, playlist_id, user, first=size, after=after)
        out += [e["node"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return out
        after = page["pageInfo"]["endCursor"]


def state(api: Api, playlist_id: str, user: str = "alice") -> tuple[int, list[str]]:
    """``(version, entry ids in order)`` read together (one page: ≤ 100 entries)."""
    page = entries_page(api, playlist_id, user, first=100)
    assert not page["pageInfo"]["hasNextPage"]
    return page["version"], [e["node"]["id"] for e in page["edges"]]


def error_codes(body: dict[str, Any]) -> list[str]:
    """``extensions.code`` of every top-level error of a response body."""
    return [e.get("extensions", {}).get("code") for e in body.get("errors", [])]
