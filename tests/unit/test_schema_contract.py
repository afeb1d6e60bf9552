"""The committed schema.graphql is the code's schema, and the contract's names are there."""

from __future__ import annotations

from pathlib import Path

import graphql
from graphql import build_schema as parse_sdl

from chorus.graphql.schema.build import print_schema

ROOT = Path(__file__).resolve().parents[2]


def test_schema_graphql_matches_the_code() -> None:
    committed = (ROOT / "schema.graphql").read_text()
    assert committed == print_schema(), "run: chorus export-schema > schema.graphql"


def test_import_graphql_is_graphql_core() -> None:
    # src layout + installed package: our chorus.graphql never shadows graphql-core.
    assert graphql.__name__ == "graphql"
    assert hasattr(graphql, "graphql_sync")
    assert "site-packages" in str(graphql.__file__)


def test_contract_names_of_design_section_5() -> None:
    schema = parse_sdl(print_schema())
    query = schema.query_type
    mutation = schema.mutation_type
    assert query is not None
    assert mutation is not None
    assert {"node", "playlist", "viewer", "searchMedia"} <= set(query.fields)
    assert {
        "createPlaylist",
        "addEntries",
        "moveEntries",
        "removeEntries",
        "updatePlaylist",
        "setMemberRole",
        "removeMember",
        "revertPlaylist",
        "deletePlaylist",
    } <= set(mutation.fields)
    playlist = schema.get_type("Playlist")
    assert {
        "id",
        "title",
        "description",
        "visibility",
        "collaborative",
        "owner",
        "version",
        "entryCount",
        "viewerRole",
        "createdAt",
        "updatedAt",
        "entries",
        "members",
        "changes",
    } <= set(playlist.fields)  # type: ignore[union-attr]
    assert set(schema.get_type("ErrorCode").values) == {  # type: ignore[union-attr]
        "NOT_FOUND",
        "FORBIDDEN",
        "VERSION_CONFLICT",
        "ANCHOR_NOT_FOUND",
        "INVALID_INPUT",
        "LIMIT_EXCEEDED",
        "OPERATION_ID_REUSED",
        "MEDIA_NOT_FOUND",
        "RATE_LIMITED",
    }
    for name in (
        "PlaylistEntryConnection",
        "PlaylistMemberConnection",
        "PlaylistConnection",
        "MediaConnection",
    ):
        assert {"edges", "pageInfo", "totalCount"} <= set(schema.get_type(name).fields)  # type: ignore[union-attr]
