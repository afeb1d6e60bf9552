"""Every field of the schema is decided: named by a playlist version (cacheable) or not."""

from __future__ import annotations

from graphql import GraphQLInterfaceType, GraphQLObjectType, parse

from chorus.graphql.execution.cacheable_fields import VERSIONED_FIELDS, unversioned_field
from chorus.graphql.schema.build import build_schema

SCHEMA = build_schema()._schema

UNVERSIONED_FIELDS = frozenset(
    {
        "Query.searchMedia",  # the catalog's answer, no version
        "Viewer.playlists",  # which playlists a user has: no one version names it
        "User.playlists",  # the same, and which of them the viewer may read
        "Query.searchPlaylists",  # a playlist created or renamed changes it: no version
        "Query.user",  # reads nothing at any version: nothing worth keeping
        "Playlist.members",  # a members page does not name its version
        "Playlist.changes",  # history depends on retention too
        # Immutable once committed, but retention (chorus compact) can take it without a
        # new version, and the cache is keyed by head versions, so every edit would end
        # it anyway: never cached; access is checked on each read (Query.playlist).
        "Playlist.atVersion",
        "Playlist.followerCount",  # follows move no playlist version
        "User.followerCount",
        "Media.viewerHasLiked",  # the viewer's Liked Songs, not the page's playlist
        "Viewer.likedSongs",  # made on first use: its read may create it
        "Viewer.following",
        "Viewer.feed",  # rows written by the feed consumer, no version
        "Playlist.presence",  # live and short-lived: no version names it
    }
)
"""Fields reachable by a query that a cached answer must not hold."""


def _query_fields() -> set[str]:
    """``Type.field`` of every object and interface type except the mutation and subscription
    roots and what only they return (payloads, events)."""
    found = set()
    for name, kind in SCHEMA.type_map.items():
        if name.startswith("__") or not isinstance(kind, GraphQLObjectType | GraphQLInterfaceType):
            continue
        if kind in (SCHEMA.mutation_type, SCHEMA.subscription_type) or name.endswith("Payload"):
            continue
        found.update(f"{name}.{field}" for field in kind.fields)
    return found


def test_every_field_a_query_reaches_is_decided() -> None:
    undecided = _query_fields() - VERSIONED_FIELDS - UNVERSIONED_FIELDS - _BELOW_UNVERSIONED
    assert undecided == set(), (
        "decide in chorus/graphql/execution/cacheable_fields.py whether a playlist version "
        "names these "
        f"(or list them in UNVERSIONED_FIELDS here): {sorted(undecided)}"
    )
    assert _query_fields() >= VERSIONED_FIELDS, sorted(VERSIONED_FIELDS - _query_fields())


_BELOW_UNVERSIONED = frozenset(
    f"{kind}.{field}"
    for kind in [
        "PlaylistChangeBatch",
        "PlaylistPresence",
        "PresenceEntry",
        "PresenceChanged",
        "PlaylistAtVersion",
        "PlaylistChanged",
        "EntriesAdded",
        "EntriesMoved",
        "EntriesRemoved",
        "DetailsUpdated",
        "MembersChanged",
        "PlaylistDeleted",
        "ResyncRequired",
        "PlaylistMember",
        "PlaylistMemberConnection",
        "PlaylistMemberEdge",
        "PlaylistConnection",
        "PlaylistEdge",
        "MediaConnection",
        "MediaEdge",
        "UserError",
        "FeedConnection",
        "FeedEdge",
        "FeedItem",
        "FeedResyncRequired",
        "FollowConnection",
        "FollowEdge",
    ]
    for field in SCHEMA.type_map[kind].fields  # type: ignore[attr-defined]
)
"""Types reached only through an unversioned field (or events): never in a cached answer."""


def test_a_document_with_an_unversioned_field_is_named() -> None:
    page = "{ playlist(id: 1) { title entries(first: 5) { edges { node { media { title } } } } } }"
    assert unversioned_field(SCHEMA, parse(page)) is None
    members = "query { playlist(id: 1) { ...M } } fragment M on Playlist { members { totalCount } }"
    assert unversioned_field(SCHEMA, parse(members)) == "Playlist.members"
    search = '{ __typename a: searchMedia(query: "x") { totalCount } }'
    assert unversioned_field(SCHEMA, parse(search)) == "Query.searchMedia"
    assert unversioned_field(SCHEMA, parse("{ __schema { types { name } } }")) is None
