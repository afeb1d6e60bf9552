"""GraphQL documents over the real schema, for the differential tests of the fast paths.

Gathered from the end-to-end tests' documents (``tests/e2e/helpers.py``,
``tests/e2e/test_response_cache.py``), the README's and docs/api.md's kinds of
reads, and written to cover what the field executor meets: aliases, named
and inline fragments, variables and their defaults, ``@skip``/``@include``,
nullable and non-null fields, lists of scalars and of objects, connections
in both directions, ``__typename``, history, search, the viewer, and errors
(a non-null field's error bubbling up, a page size refused, a validation
error, a missing variable, an unknown id). Each case is ``(user, document,
variables)``; ``$pid``, ``$private``, ``$entry`` and ``$user`` in the
variables stand for the seeded ids (:func:`bind`).
"""

from __future__ import annotations

from typing import Any

from tests.e2e.helpers import ENTRIES, PLAYLIST, mutation_document
from tests.e2e.test_response_cache import PAGE, PAGE_WITH_ROLE

ENTRY_FIELDS = (
    "id positionKey mediaId addedAt addedBy { id } "
    "media { id title artists album durationMs available }"
)

Case = tuple[str | None, str, dict[str, Any]]

CORPUS: list[Case] = [
    ("alice", ENTRIES, {"id": "$pid"}),
    ("alice", ENTRIES, {"id": "$pid", "first": 3}),
    ("alice", ENTRIES, {"id": "$pid", "last": 4}),
    ("bob", ENTRIES, {"id": "$pid", "first": 2, "after": "$cursor"}),
    ("alice", PLAYLIST, {"id": "$pid"}),
    ("bob", PLAYLIST, {"id": "$private"}),
    ("carol", PLAYLIST, {"id": "$private"}),
    ("alice", PAGE, {"id": "$pid"}),
    ("bob", PAGE_WITH_ROLE, {"id": "$pid"}),
    # Aliases, the same field twice under two names, and __typename.
    (
        "alice",
        """query Aliases($id: ID!) { a: playlist(id: $id) { t: title v: version __typename
          one: entries(first: 1) { edges { node { mediaId } } }
          two: entries(first: 2) { edges { node { m: mediaId id } } } } }""",
        {"id": "$pid"},
    ),
    # Named fragments, nested and spread twice; an inline fragment on an interface.
    (
        "alice",
        """query Frags($id: ID!) { playlist(id: $id) { ...Head entries(first: 5) { ...Page } }
          node(id: $id) { id __typename ... on Playlist { ...Head } } }
        fragment Head on Playlist { id title version owner { id } }
        fragment Page on PlaylistEntryConnection { totalCount edges { cursor node { ...E } } }
        fragment E on PlaylistEntry { """
        + ENTRY_FIELDS
        + " }",
        {"id": "$pid"},
    ),
    # @skip and @include, by variables and literals.
    (
        "alice",
        """query Dir($id: ID!, $withMedia: Boolean!, $skipKey: Boolean = true) {
          playlist(id: $id) { title @skip(if: false) description @include(if: false)
            entries(first: 4) { edges { node { id positionKey @skip(if: $skipKey)
              media @include(if: $withMedia) { title artists } } } } } }""",
        {"id": "$pid", "withMedia": True},
    ),
    (
        "alice",
        """query Dir($id: ID!, $withMedia: Boolean!, $skipKey: Boolean = true) {
          playlist(id: $id) { entries(first: 4) { edges { node { id positionKey @skip(if: $skipKey)
              media @include(if: $withMedia) { title } } } } } }""",
        {"id": "$pid", "withMedia": False, "skipKey": False},
    ),
    # Nullable fields that are null (description, a missing playlist, an unknown medium).
    (
        "alice",
        "query Q($id: ID!) { playlist(id: $id) { id title } }",
        {"id": "UGxheWxpc3Q6bm9uZQ=="},
    ),
    ("alice", "query Q($id: ID!) { node(id: $id) { id } }", {"id": "not-a-global-id"}),
    (
        "alice",
        """query Full($id: ID!) { playlist(id: $id) { id title description visibility
          collaborative version entryCount createdAt updatedAt followerCount totalDurationMs
          viewerRole owner { id followerCount } } }""",
        {"id": "$pid"},
    ),
    # Lists: every entry's media, with their artists (a list of non-null strings).
    (
        "alice",
        "query L($id: ID!) { playlist(id: $id) { entries(first: 100) { edges { node { "
        + ENTRY_FIELDS
        + " } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }",
        {"id": "$pid"},
    ),
    (
        "alice",
        "query L($id: ID!, $c: String) { playlist(id: $id) { "
        "entries(last: 3, before: $c) { edges { cursor } } } }",
        {"id": "$pid", "c": "$cursor"},
    ),
    # The viewer, its playlists (a connection with ordering), Liked Songs, follows and feed.
    (
        "alice",
        """query V { viewer { user { id followerCount }
          playlists(first: 10) { totalCount edges { cursor node { id title visibility entryCount } }
            pageInfo { hasNextPage endCursor } }
          likedSongs { id title entryCount
            entries(first: 5) { edges { node { mediaId media { viewerHasLiked } } } } }
          following(first: 5) { totalCount } feed(first: 5) { edges { cursor } } } }""",
        {},
    ),
    (
        "bob",
        "query V { viewer { user { id } playlists(last: 2) { edges { node { title owner { id } } "
        "} } } }",
        {},
    ),
    (
        "alice",
        "query U($u: ID!) { user(id: $u) { id followerCount playlists(first: 3) { edges { node { "
        "id title } } } } }",
        {"u": "$user"},
    ),
    # Search: playlists by title, media in the catalog.
    (
        "alice",
        'query S { searchPlaylists(query: "mix", first: 5) { totalCount edges { cursor node { id '
        "title owner { id } } } pageInfo { hasNextPage } } }",
        {},
    ),
    (
        "alice",
        'query S { searchPlaylists(query: "", last: 2) { edges { node { title } } pageInfo { '
        "hasPreviousPage startCursor } } }",
        {},
    ),
    (
        "alice",
        'query M { searchMedia(query: "love", first: 7) { totalCount edges { cursor node { id '
        "title artists album durationMs available viewerHasLiked } } pageInfo { hasNextPage "
        "endCursor } } }",
        {},
    ),
    # History: a past version, the changes since one, the members.
    (
        "alice",
        "query H($id: ID!) { playlist(id: $id) { atVersion(version: 2) { version title "
        "description visibility collaborative entryCount createdAt updatedAt owner { id } } } }",
        {"id": "$pid"},
    ),
    (
        "alice",
        "query H($id: ID!) { playlist(id: $id) { atVersion(version: 999) { version } } }",
        {"id": "$pid"},
    ),
    (
        "alice",
        "query C($id: ID!) { playlist(id: $id) { changes(sinceVersion: 1, first: 3) { "
        "sinceVersion currentVersion hasMore resyncRequired versions { __typename } } } }",
        {"id": "$pid"},
    ),
    (
        "alice",
        "query Mem($id: ID!) { playlist(id: $id) { members(first: 5) { totalCount edges { cursor "
        "node { role user { id } } } pageInfo { hasNextPage } } } }",
        {"id": "$pid"},
    ),
    (
        "alice",
        "query P($id: ID!) { playlist(id: $id) { presence { playlistId othersCount } } }",
        {"id": "$pid"},
    ),
    # minVersion ahead of the playlist: an error at the field, the playlist null.
    ("alice", "query MV($id: ID!) { playlist(id: $id, minVersion: 500) { id } }", {"id": "$pid"}),
    # A page size refused: an error located inside the list, bubbling to a nullable parent.
    (
        "alice",
        "query Big($id: ID!) { playlist(id: $id) { title entries(first: 5000) { totalCount } } }",
        {"id": "$pid"},
    ),
    (
        "alice",
        "query Neg($id: ID!) { playlist(id: $id) { entries(first: -1) { totalCount } } }",
        {"id": "$pid"},
    ),
    (
        "alice",
        'query Cur($id: ID!) { playlist(id: $id) { entries(after: "garbage") { totalCount } } }',
        {"id": "$pid"},
    ),
    # Validation errors and variable errors: no execution, the same errors.
    ("alice", "query Bad($id: ID!) { playlist(id: $id) { nope } }", {"id": "$pid"}),
    ("alice", "query Missing($id: ID!) { playlist(id: $id) { id } }", {}),
    ("alice", "query Typed($id: ID!) { playlist(id: $id) { id } }", {"id": 12}),
    # Two anonymous operations: a request error, no data entry.
    ("alice", "{ viewer { user { id } } } { __typename }", {}),
    # An argument that fails to coerce inside execution: a field error, data null.
    (
        "alice",
        """mutation Vis($vis: Visibility) { createPlaylist(input:
          {operationId: "never", title: "t", visibility: $vis}) { playlist { id } } }""",
        {"vis": None},
    ),
    # Several operations in one document, one chosen by name (sent as operationName below).
    ("alice", "query A { viewer { user { id } } } query B { viewer { likedSongs { title } } }", {}),
    # Mutations that commit nothing new: a replay of a seeded commit, and a refusal.
    ("alice", mutation_document("addEntries"), {"input": "$replay"}),
    (
        "bob",
        mutation_document("addEntries"),
        {
            "input": {
                "playlistId": "$private",
                "operationId": "no-access",
                "baseVersion": 0,
                "mediaIds": ["chinook:track:9"],
            }
        },
    ),
    (
        "carol",
        mutation_document("removeEntries"),
        {
            "input": {
                "playlistId": "$pid",
                "operationId": "stranger",
                "baseVersion": 0,
                "entryIds": ["$entry"],
            }
        },
    ),
    (
        "alice",
        mutation_document("updatePlaylist"),
        {
            "input": {
                "playlistId": "$pid",
                "operationId": "stale",
                "baseVersion": 0,
                "title": "late",
                "strict": True,
            }
        },
    ),
    # No viewer: refused before validation.
    (None, "query V { viewer { user { id } } }", {}),
]
"""The field executor's corpus; every case is sent with and without the fast path."""

OPERATION_NAMES = {
    "query A { viewer { user { id } } } query B { viewer { likedSongs { title } } }": "B"
}


def bind(value: Any, seeded: dict[str, Any]) -> Any:
    """``value`` with every ``"$name"`` string replaced by ``seeded[name]``."""
    if isinstance(value, str) and value.startswith("$") and value[1:] in seeded:
        return seeded[value[1:]]
    if isinstance(value, dict):
        return {k: bind(v, seeded) for k, v in value.items()}
    if isinstance(value, list):
        return [bind(v, seeded) for v in value]
    return value
