"""Bad requests get clear errors with a code, and change nothing (DESIGN §4, §5).

Malformed bodies, wrong types, unknown fields and arguments, oversized
bodies, alias and depth bombs, bad IDs and cursors, bad titles and ids, lone
surrogates. Every response is checked for internals: no traceback, no SQL,
no file path.
"""

from __future__ import annotations

import base64
import gzip
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from graphql import get_introspection_query

from chorus.graphql.schema.common import ids
from tests.e2e.conftest import Api
from tests.e2e.helpers import (
    PLAYLIST,
    add,
    committed,
    create_playlist,
    entries_page,
    mutation_document,
    track,
)

LEAKS = ("Traceback", "sqlalchemy", "/work/", "site-packages", "SELECT ", "asyncpg", "aiosqlite")


def assert_clean(response: httpx.Response) -> None:
    for leak in LEAKS:
        assert leak not in response.text, f"{leak!r} in {response.text[:500]}"


def post(api: Api, content: bytes | str, user: str | None = "alice", **headers: str) -> Any:
    """POST raw ``content`` as JSON; the response, checked for leaks."""
    sent = {"Content-Type": "application/json", **headers}
    if user:
        sent["Authorization"] = f"Bearer {api.token(user)}"
    response = api.http.post(api.server.url, content=content, headers=sent)
    assert_clean(response)
    return response


def gql(api: Api, query: str, user: str | None = "alice", **variables: Any) -> dict[str, Any]:
    """A GraphQL request whose response must be HTTP 200 JSON, without leaks.

    The body is encoded here (ASCII, with escapes), so strings may hold what
    UTF-8 cannot: a lone surrogate reaches the server as ``\\ud800``.
    """
    response = post(api, json.dumps({"query": query, "variables": variables}), user)
    assert_clean(response)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    for error in body.get("errors", []):
        assert error["message"]
        assert error["extensions"]["code"] != "INTERNAL_SERVER_ERROR", body
    return body


def without_cost(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without ``extensions.cost``, which every executed operation reports."""
    extensions = {k: v for k, v in body.get("extensions", {}).items() if k != "cost"}
    rest = {k: v for k, v in body.items() if k != "extensions"}
    return {**rest, "extensions": extensions} if extensions else rest


def codes(body: dict[str, Any]) -> list[str]:
    return [e["extensions"]["code"] for e in body.get("errors", [])]


def request_error(body: dict[str, Any], code: str) -> str:
    """The message of the single top-level error, asserting its code."""
    assert codes(body) == [code], body
    message: str = body["errors"][0]["message"]
    return message


class Playlist:
    """A playlist the bad requests aim at, and a check that they changed nothing."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.id = create_playlist(api, title="Target", description="keep me")
        added = add(api, self.id, [track(1), track(2), track(3)], base=0)
        self.entry_ids = [e["id"] for e in added["entries"]]
        self.before = self.read()

    def read(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        details = self.api.data(PLAYLIST, id=self.id)["playlist"]
        return details, entries_page(self.api, self.id, first=100)["edges"]

    def unchanged(self) -> None:
        assert self.read() == self.before


@pytest.fixture(scope="module")
def target(api: Api) -> Iterator[Playlist]:
    playlist = Playlist(api)
    yield playlist
    playlist.unchanged()


def mutate_raw(api: Api, name: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("operationId", api.op())
    return gql(api, mutation_document(name), input=fields)


def refused(body: dict[str, Any], name: str, code: str) -> dict[str, Any]:
    assert "errors" not in body, body
    payload = body["data"][name]
    assert payload["version"] is None, payload
    assert [e["code"] for e in payload["userErrors"]] == [code], payload
    error: dict[str, Any] = payload["userErrors"][0]
    assert error["message"]
    return error


# --- the HTTP body ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "status"),
    [
        (b"{not json", 400),
        (b"", 400),
        (b"\xff\xfe\x00garbage", 400),
        (b"[1, 2]", 400),
        (b'"just a string"', 400),
        (b"{}", 400),
        (b'{"query": 123}', 400),
        (b'{"query": "{ viewer { user { id } } }", "variables": "x"}', 400),
        (b'{"query": "{ viewer { user { id } } }", "variables": [1]}', 400),
        (b'{"query": "{ viewer { user { id } } }", "operationName": 7}', 400),
    ],
    ids=[
        "not-json",
        "empty",
        "not-utf8",
        "batch",
        "string",
        "no-query",
        "query-not-string",
        "variables-string",
        "variables-list",
        "operation-name-number",
    ],
)
def test_malformed_bodies(api: Api, content: bytes, status: int) -> None:
    response = post(api, content)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert body["errors"][0]["message"]
    assert body["errors"][0]["extensions"]["code"], body


def test_refusals_name_what_is_wrong(api: Api) -> None:
    def refusal(response: Any, status: int) -> str:
        assert response.status_code == status, response.text
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "BAD_REQUEST", error
        message: str = error["message"]
        return message

    query = "{ viewer { user { id } } }"
    named = post(api, json.dumps({"query": query, "operationName": 5}))
    assert refusal(named, 400) == "operationName must be a string"
    gzipped = post(
        api, gzip.compress(json.dumps({"query": query}).encode()), **{"Content-Encoding": "gzip"}
    )
    assert refusal(gzipped, 415) == "Content-Encoding 'gzip' is not supported: send the body as is"
    body = gzip.compress(json.dumps({"query": query}).encode())
    with socket.create_connection(("127.0.0.1", api.server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
            + b"%x\r\n" % len(body)
            + body
            + b"\r\n0\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    assert head.split()[1] == b"501", answer
    assert json.loads(content)["errors"][0]["message"] == (
        "Transfer-Encoding 'gzip, chunked' is not supported: only chunked"
    )
    token = {"Authorization": f"Bearer {api.token('alice')}"}
    for name in ("variables", "extensions"):
        got = api.http.get(api.server.url, params={"query": query, name: "{"}, headers=token)
        assert refusal(got, 400) == f"the {name} query parameter is not JSON"
        # null is what a POST body may say of both: no variables, no extensions.
        got = api.http.get(api.server.url, params={"query": query, name: " null"}, headers=token)
        assert got.status_code == 200, got.text
        assert got.json()["data"]["viewer"]["user"]["id"]


@pytest.mark.parametrize("name", ["B", "", "\ud800", "\udfff\ud800x"])
@pytest.mark.parametrize(
    ("accept", "status"),
    [("application/json", 200), ("application/graphql-response+json", 400)],
    ids=["json", "graphql-response"],
)
def test_unknown_operation_name_is_a_request_error(
    api: Api, name: str, accept: str, status: int
) -> None:
    """GraphQL's GetOperation raises a request error: no ``data``; 200 under JSON (the
    GraphQL-over-HTTP specification's well-formed request), 400 under its own type."""
    # json.dumps escapes a lone surrogate: the body is valid JSON naming it.
    body = json.dumps({"query": "query A { __typename }", "operationName": name})
    response = post(api, body, Accept=accept)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(accept)
    answer = response.json()
    assert "data" not in answer
    (error,) = answer["errors"]
    assert error["extensions"]["code"] == "BAD_REQUEST"
    assert error["message"].startswith("Unknown operation named")


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_huge_body_is_refused_with_413(api: Api, target: Playlist, chunked: bool) -> None:
    variables = {
        "input": {
            "playlistId": target.id,
            "operationId": api.op(),
            "baseVersion": 1,
            "mediaIds": [track(1)],
            "after": "x" * 2_000_000,
        }
    }
    content = json.dumps({"query": mutation_document("addEntries"), "variables": variables})
    assert len(content) > 2_000_000
    headers = {"Authorization": f"Bearer {api.token('alice')}", "Content-Type": "application/json"}
    if chunked:

        def pieces() -> Iterator[bytes]:
            data = content.encode()
            for start in range(0, len(data), 65_536):
                yield data[start : start + 65_536]

        response = api.http.post(api.server.url, content=pieces(), headers=headers)
    else:
        response = api.http.post(api.server.url, content=content, headers=headers)
    assert_clean(response)
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
    target.unchanged()


@pytest.mark.parametrize("length", ["999999999999", "-1", "12abc"])
def test_bad_content_length_is_refused(api: Api, length: str) -> None:
    """A declared length over the limit (or not a number) is refused before the body is read."""
    request = (
        f"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
        '{"query": "{ __typename }"}'
    ).encode()
    with socket.create_connection(("127.0.0.1", api.server.port), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65_536):
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.split()[1] in (b"400", b"413"), answer[:300]
    for leak in LEAKS:
        assert leak.encode() not in answer


# --- the document ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("{ viewer { user { id } }", "GRAPHQL_PARSE_FAILED"),
        ("query {", "GRAPHQL_PARSE_FAILED"),
        ("mutation { createPlaylist }", "GRAPHQL_VALIDATION_FAILED"),
        ("{ nope }", "GRAPHQL_VALIDATION_FAILED"),
        ("{ viewer { user { id name } } }", "GRAPHQL_VALIDATION_FAILED"),
        ("{ viewer(first: 1) { user { id } } }", "GRAPHQL_VALIDATION_FAILED"),
        ('{ playlist(id: "x", bogus: 1) { id } }', "GRAPHQL_VALIDATION_FAILED"),
        ("{ playlist(id: 5.5) { id } }", "GRAPHQL_VALIDATION_FAILED"),
        ("{ playlist(id: true) { id } }", "GRAPHQL_VALIDATION_FAILED"),
        ("{ playlist { id } }", "GRAPHQL_VALIDATION_FAILED"),
        ('{ playlist(id: "x", minVersion: "one") { id } }', "GRAPHQL_VALIDATION_FAILED"),
        ('{ playlist(id: "x", minVersion: 3000000000) { id } }', "GRAPHQL_VALIDATION_FAILED"),
        ('{ searchMedia(query: "a", first: 1.5) { totalCount } }', "GRAPHQL_VALIDATION_FAILED"),
        ("{ viewer }", "GRAPHQL_VALIDATION_FAILED"),
        (
            'mutation { createPlaylist(input: {operationId: "o", title: "t", bogus: 1}) '
            "{ version } }",
            "GRAPHQL_VALIDATION_FAILED",
        ),
        (
            'mutation { createPlaylist(input: {operationId: "o"}) { version } }',
            "GRAPHQL_VALIDATION_FAILED",
        ),
        (
            'mutation { createPlaylist(input: {operationId: "o", title: "t", '
            "visibility: SECRET}) { version } }",
            "GRAPHQL_VALIDATION_FAILED",
        ),
        ("{ a" + " a" * 6000 + " }", "GRAPHQL_PARSE_FAILED"),
        ("{ __typename @nope }", "GRAPHQL_VALIDATION_FAILED"),
        ('{ searchMedia(query: "\\ud800") { totalCount } }', "GRAPHQL_PARSE_FAILED"),
        ('{ searchMedia(query: "\ud800") { totalCount } }', "GRAPHQL_PARSE_FAILED"),
    ],
)
def test_bad_documents(api: Api, query: str, code: str) -> None:
    body = gql(api, query)
    assert codes(body), body
    assert set(codes(body)) == {code}, body
    assert "data" not in body, body  # a request error: no data entry


@pytest.mark.parametrize(
    ("variables", "declared"),
    [
        ({"input": {"operationId": "o", "title": 5}}, "CreatePlaylistInput!"),
        ({"input": {"operationId": "o", "title": "t", "bogus": 1}}, "CreatePlaylistInput!"),
        ({"input": {"operationId": "o", "title": None}}, "CreatePlaylistInput!"),
        ({"input": {"title": "t"}}, "CreatePlaylistInput!"),
        (
            {"input": {"operationId": "o", "title": "t", "collaborative": "yes"}},
            "CreatePlaylistInput!",
        ),
        (
            {"input": {"operationId": "o", "title": "t", "visibility": "public"}},
            "CreatePlaylistInput!",
        ),
        ({"input": {"operationId": ["o"], "title": "t"}}, "CreatePlaylistInput!"),
        ({"input": "not an object"}, "CreatePlaylistInput!"),
        ({"input": None}, "CreatePlaylistInput!"),
        ({}, "CreatePlaylistInput!"),
    ],
)
def test_wrong_variable_types(api: Api, variables: dict[str, Any], declared: str) -> None:
    query = f"mutation($input: {declared}) {{ createPlaylist(input: $input) {{ version }} }}"
    body = gql(api, query, **variables)
    # The document is valid, the values are not (docs/api.md, "Codes of input …").
    assert set(codes(body)) == {"BAD_USER_INPUT"}, body
    assert "data" not in body, body  # a request error: no data entry


def test_wrong_types_in_playlist_mutations(api: Api, target: Playlist) -> None:
    document = mutation_document("addEntries")
    base = {"playlistId": target.id, "operationId": api.op(), "mediaIds": [track(9)]}
    for bad in (
        {"baseVersion": "1"},
        {"baseVersion": 1.5},
        {"baseVersion": 2**31},
        {"baseVersion": None},
        {"baseVersion": 1, "mediaIds": {"id": track(9)}},
        {"baseVersion": 1, "mediaIds": [9]},
        {"baseVersion": 1, "mediaIds": [None]},
        {"baseVersion": 1, "strict": "true"},
        {"baseVersion": 1, "after": 5.5},
        {"baseVersion": 1, "after": True},
        {"baseVersion": 1, "position": 0},
    ):
        body = gql(api, document, input={**base, **bad})
        assert set(codes(body)) == {"BAD_USER_INPUT"}, (bad, body)
    target.unchanged()


# --- aliases and depth --------------------------------------------------------------------


def aliases(n: int, field: str = "__typename") -> str:
    return " ".join(f"a{i}: {field}" for i in range(n))


def test_alias_limit(api: Api) -> None:
    assert "errors" not in gql(api, "{ " + aliases(30, "viewer { user { id } }") + " }")
    body = gql(api, "{ " + aliases(31, "viewer { user { id } }") + " }")
    assert "31 aliases" in request_error(body, "GRAPHQL_VALIDATION_FAILED")
    body = gql(api, "{ " + aliases(500, "viewer { user { id } }") + " }")
    request_error(body, "GRAPHQL_VALIDATION_FAILED")
    assert "data" not in body, body  # a request error: no data entry


def test_aliases_are_counted_through_fragments(api: Api) -> None:
    twenty = f"fragment F on Query {{ {aliases(20)} }}"
    # One fragment spread twice: 40 aliases, though only 20 are written.
    body = gql(api, f"query {{ ...F ...G }} fragment G on Query {{ ...F }} {twenty}")
    request_error(body, "GRAPHQL_VALIDATION_FAILED")
    body = gql(
        api,
        f"query {{ ...F v: viewer {{ ...U }} }} {twenty} "
        f"fragment U on Viewer {{ {aliases(15, 'user { id }')} }}",
    )
    request_error(body, "GRAPHQL_VALIDATION_FAILED")
    inline = f"{{ ... on Query {{ {aliases(20)} }} ... on Query {{ {aliases(20)} }} }}"
    request_error(gql(api, inline), "GRAPHQL_VALIDATION_FAILED")
    assert "errors" not in gql(api, f"query {{ ...F }} {twenty}")


def nested(path: list[str], leaf: str = "name") -> str:
    """``a { b { … leaf } }`` for the fields of ``path``."""
    text = leaf
    for field in reversed(path):
        text = f"{field} {{ {text} }}"
    return text


def introspection(depth: int) -> str:
    """``__schema { types { fields { type { fields … name`` exactly ``depth`` fields deep."""
    path = ["__schema", "types"]
    while len(path) < depth - 1:
        path.append("fields" if path[-1] in ("types", "type") else "type")
    return "{ " + nested(path) + " }"


def depth_errors(body: dict[str, Any]) -> list[str]:
    """Messages of the errors our depth rule reported."""
    return [e["message"] for e in body.get("errors", []) if "fields deep" in e["message"]]


def test_depth_limit_counts_introspection(api: Api) -> None:
    # graphql-core refuses nested `fields` in introspection on its own too
    # ("Maximum introspection depth exceeded"); the depth rule must answer as well.
    assert depth_errors(gql(api, introspection(12))) == []
    for depth in (13, 20, 60):
        body = gql(api, introspection(depth))
        assert set(codes(body)) == {"GRAPHQL_VALIDATION_FAILED"}, body
        assert depth_errors(body) == [
            f"operation 'anonymous' is {depth} fields deep; the limit is 12"
        ]
        assert "data" not in body, body
    # Twelve deep without nested `fields`: allowed, and answered.
    twelve = (
        "{ __schema { directives { args { type { fields { args { type { inputFields "
        "{ type { ofType { enumValues { name } } } } } } } } } } } }"
    )
    assert "errors" not in gql(api, twelve)


def test_depth_limit_through_fragments(api: Api) -> None:
    fragments = (
        "fragment T on __Type { fields { type { ...T2 } } } "
        "fragment T2 on __Type { fields { type { ...T3 } } } "
        "fragment T3 on __Type { fields { type { ...T4 } } } "
        "fragment T4 on __Type { fields { type { ...T5 } } } "
        "fragment T5 on __Type { fields { type { ...T6 } } } "
        "fragment T6 on __Type { fields { type { name } } } "
    )
    for query in ("{ __schema { types { ...T } } } ", '{ __type(name: "Playlist") { ...T } } '):
        body = gql(api, query + fragments)
        assert set(codes(body)) == {"GRAPHQL_VALIDATION_FAILED"}, body
        assert depth_errors(body), body


def test_deep_of_type_chains_are_bounded_by_tokens(api: Api) -> None:
    body = gql(
        api, '{ __type(name: "Query") { fields { type { ' + nested(["ofType"] * 30) + " } } } }"
    )
    assert "errors" not in body or set(codes(body)) <= {"GRAPHQL_VALIDATION_FAILED"}
    body = gql(api, '{ __type(name: "Query") { ' + nested(["ofType"] * 3000) + " } }")
    assert set(codes(body)) <= {"GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED"}, body
    assert codes(body)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {
            "descriptions": True,
            "specified_by_url": True,
            "directive_is_repeatable": True,
            "schema_description": True,
            "input_value_deprecation": True,
        },
    ],
    ids=["default", "all-options"],
)
def test_standard_introspection_query_succeeds(api: Api, options: dict[str, bool]) -> None:
    body = gql(api, get_introspection_query(**options))
    assert "errors" not in body, body
    names = {t["name"] for t in body["data"]["__schema"]["types"]}
    assert {"Playlist", "PlaylistEntry", "Mutation", "ErrorCode"} <= names


# --- ids and cursors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_id", ["garbage", "", "!!!!", "UGxheWxpc3Q", "x" * 10_000, "\u00e9\u00e9", "null"]
)
def test_invalid_ids(api: Api, target: Playlist, bad_id: str) -> None:
    body = gql(api, "query($id: ID!) { playlist(id: $id) { id } node(id: $id) { id } }", id=bad_id)
    assert without_cost(body) == {"data": {"playlist": None, "node": None}}

    body = mutate_raw(api, "addEntries", playlistId=bad_id, baseVersion=1, mediaIds=[track(1)])
    refused(body, "addEntries", "NOT_FOUND")
    version = target.before[0]["version"]
    body = mutate_raw(
        api, "moveEntries", playlistId=target.id, baseVersion=version, entryIds=[bad_id]
    )
    assert refused(body, "moveEntries", "NOT_FOUND")["field"] == ["input", "entryIds", "0"]
    body = mutate_raw(
        api, "removeEntries", playlistId=target.id, baseVersion=version, entryIds=[bad_id]
    )
    refused(body, "removeEntries", "NOT_FOUND")
    body = mutate_raw(
        api,
        "addEntries",
        playlistId=target.id,
        baseVersion=version,
        mediaIds=[track(1)],
        before=bad_id,
    )
    assert refused(body, "addEntries", "ANCHOR_NOT_FOUND")["field"] == ["input", "before"]
    target.unchanged()


CURSOR_QUERIES = {
    "viewer.playlists": "{ viewer { playlists(after: $c) { totalCount } } }",
    "searchMedia": '{ searchMedia(query: "love", after: $c) { totalCount } }',
    "entries-after": "{ playlist(id: $id) { entries(after: $c) { totalCount } } }",
    "entries-before": "{ playlist(id: $id) { entries(last: 2, before: $c) { totalCount } } }",
    "members": "{ playlist(id: $id) { members(after: $c) { totalCount } } }",
}


def declared(query: str, **types: str) -> str:
    """``query`` with the variables it uses declared."""
    used = [f"${name}: {kind}" for name, kind in types.items() if f"${name}" in query]
    return f"query({', '.join(used)}) {query}" if used else query


@pytest.mark.parametrize("query", list(CURSOR_QUERIES.values()), ids=list(CURSOR_QUERIES))
@pytest.mark.parametrize(
    "cursor",
    ["garbage", "", "czotMQ", "azp4", "\u2603" * 3, "\ud800", "=" * 8, "k" * 5000],
    ids=["garbage", "empty", "negative-offset", "no-entry", "snowmen", "surrogate", "pad", "5000"],
)
def test_invalid_cursors(api: Api, target: Playlist, query: str, cursor: str) -> None:
    document = declared(query, id="ID!", c="String")
    body = gql(api, document, id=target.id, c=cursor)
    request_error(body, "BAD_USER_INPUT")


@pytest.mark.parametrize(
    "position", ["999999999", "1000000000", "9" * 40, " 5", "1_000", "\u0663", "+1", "-0"]
)
def test_forged_search_cursors(api: Api, position: str) -> None:
    """Only what searchMedia hands out; a separate catalog would answer 400 past its limit."""
    body = gql(
        api,
        'query($c: String) { searchMedia(query: "love", after: $c) { totalCount } }',
        c=ids.cursor("s", position),
    )
    request_error(body, "BAD_USER_INPUT")


def test_page_sizes(api: Api, target: Playlist) -> None:
    for query in (
        "{ viewer { playlists(first: $n) { totalCount } } }",
        '{ searchMedia(query: "a", first: $n) { totalCount } }',
        "{ playlist(id: $id) { members(first: $n) { totalCount } } }",
        "{ playlist(id: $id) { changes(sinceVersion: 0, first: $n) { hasMore } } }",
    ):
        document = declared(query, id="ID!", n="Int")
        for n in (101, -1, 2**31 - 1):
            request_error(gql(api, document, id=target.id, n=n), "BAD_USER_INPUT")
        assert "errors" not in gql(api, document, id=target.id, n=100)
        assert "errors" not in gql(api, document, id=target.id, n=0)


# --- titles, descriptions and other strings ------------------------------------------------


@pytest.mark.parametrize(
    ("title", "code"),
    [
        ("", "INVALID_INPUT"),
        ("   ", "INVALID_INPUT"),
        ("\t\n  \r", "INVALID_INPUT"),
        ("\u3000", "INVALID_INPUT"),
        ("x" * 10_240, "LIMIT_EXCEEDED"),
        ("x" * 201, "LIMIT_EXCEEDED"),
        ("\U0001f3b5" * 201, "LIMIT_EXCEEDED"),
        ("a\x00b", "INVALID_INPUT"),
        ("\x00", "INVALID_INPUT"),
        ("bell\x07", "INVALID_INPUT"),
        ("esc\x1b[31m", "INVALID_INPUT"),
        ("del\x7f", "INVALID_INPUT"),
        ("two\nlines", "INVALID_INPUT"),
        ("c1\x85c1", "INVALID_INPUT"),
        ("a\ud800b", "INVALID_INPUT"),
        ("\udfff", "INVALID_INPUT"),
    ],
    ids=[
        "empty",
        "spaces",
        "whitespace",
        "ideographic-space",
        "10KB",
        "201",
        "201-emoji",
        "NUL",
        "only-NUL",
        "bell",
        "escape",
        "DEL",
        "newline",
        "C1",
        "lone-high-surrogate",
        "lone-low-surrogate",
    ],
)
def test_bad_titles(api: Api, target: Playlist, title: str, code: str) -> None:
    body = mutate_raw(api, "createPlaylist", title=title)
    assert refused(body, "createPlaylist", code)["field"] == ["input", "title"]
    body = mutate_raw(
        api,
        "updatePlaylist",
        playlistId=target.id,
        baseVersion=target.before[0]["version"],
        title=title,
    )
    assert refused(body, "updatePlaylist", code)["field"] == ["input", "title"]
    target.unchanged()


@pytest.mark.parametrize(
    "title",
    [
        "\U0001f3b5 Road trip \U0001f697\U0001f4a8",
        "\U0001f469\u200d\U0001f469\u200d\U0001f467 family mix",
        "\U0001f44b\U0001f3fd \U0001f1eb\U0001f1f7 \u2764\ufe0f",
        "Cafe\u0301 \u00e9t\u00e9 \u65e5\u672c\u8a9e \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
        "\U0001d11e" * 200,
        "x" * 200,
        "quotes \" ' \\ and <b>tags</b> ${x} %s {{x}}",
        "'; DROP TABLE playlist; --",
    ],
    ids=["emoji", "zwj", "modifiers-flags", "scripts", "200-astral", "200", "quoting", "sql"],
)
def test_titles_are_stored_exactly(api: Api, title: str) -> None:
    body = mutate_raw(api, "createPlaylist", title=title)
    assert "errors" not in body, body
    payload = committed(body["data"]["createPlaylist"])
    assert payload["playlist"]["title"] == title
    found = api.data(PLAYLIST, id=payload["playlist"]["id"])["playlist"]
    assert found["title"] == title


def test_titles_are_trimmed(api: Api) -> None:
    payload = committed(
        mutate_raw(api, "createPlaylist", title="  padded\t")["data"]["createPlaylist"]
    )
    assert payload["playlist"]["title"] == "padded"


def test_descriptions(api: Api, target: Playlist) -> None:
    version = target.before[0]["version"]
    for description, code in (("d" * 1001, "LIMIT_EXCEEDED"), ("nul\x00", "INVALID_INPUT")):
        body = mutate_raw(
            api,
            "updatePlaylist",
            playlistId=target.id,
            baseVersion=version,
            description=description,
        )
        refused(body, "updatePlaylist", code)
    target.unchanged()
    kept = "two\nlines\tand a tab \U0001f3b8"
    playlist = create_playlist(api, description=kept)
    found = api.data("query($id: ID!) { playlist(id: $id) { description } }", id=playlist)
    assert found["playlist"]["description"] == kept


def test_media_ids(api: Api, target: Playlist) -> None:
    version = target.before[0]["version"]

    def add_media(media: list[str], **fields: Any) -> dict[str, Any]:
        return mutate_raw(
            api, "addEntries", playlistId=target.id, baseVersion=version, mediaIds=media, **fields
        )

    refused(add_media([track(n) for n in range(1, 102)]), "addEntries", "LIMIT_EXCEEDED")
    refused(add_media([track(1)] * 1000), "addEntries", "LIMIT_EXCEEDED")
    refused(add_media([]), "addEntries", "INVALID_INPUT")
    error = refused(add_media([track(1), "chinook:track:999999"]), "addEntries", "MEDIA_NOT_FOUND")
    assert error["field"] == ["input", "mediaIds", "1"]
    for bad in ("", "x" * 10_000, "a\x00b", "a\ud800b", " "):
        body = add_media([track(1), bad])
        assert "errors" not in body, body
        assert body["data"]["addEntries"]["version"] is None
        assert body["data"]["addEntries"]["userErrors"][0]["code"] in (
            "INVALID_INPUT",
            "MEDIA_NOT_FOUND",
            "LIMIT_EXCEEDED",
        )
    both = add_media([track(1)], after=target.entry_ids[0], before=target.entry_ids[1])
    refused(both, "addEntries", "INVALID_INPUT")
    target.unchanged()


def test_entry_id_lists(api: Api, target: Playlist) -> None:
    version = target.before[0]["version"]
    many = [target.entry_ids[0]] * 101
    for name in ("moveEntries", "removeEntries"):
        body = mutate_raw(api, name, playlistId=target.id, baseVersion=version, entryIds=many)
        refused(body, name, "LIMIT_EXCEEDED")
        body = mutate_raw(
            api,
            name,
            playlistId=target.id,
            baseVersion=version,
            entryIds=[target.entry_ids[0], target.entry_ids[0]],
        )
        refused(body, name, "INVALID_INPUT")
        body = mutate_raw(api, name, playlistId=target.id, baseVersion=version, entryIds=[])
        refused(body, name, "INVALID_INPUT")
    body = mutate_raw(
        api,
        "moveEntries",
        playlistId=target.id,
        baseVersion=version,
        entryIds=[target.entry_ids[0]],
        after=target.entry_ids[0],
    )
    refused(body, "moveEntries", "INVALID_INPUT")
    target.unchanged()


@pytest.mark.parametrize(
    ("operation_id", "code"),
    [
        ("o" * 65, "INVALID_INPUT"),
        ("o" * 10_000, "INVALID_INPUT"),
        ("", "INVALID_INPUT"),
        ("op\x00", "INVALID_INPUT"),
        ("op\ud800", "INVALID_INPUT"),
        ("op\n", "INVALID_INPUT"),
    ],
    ids=["65", "10000", "empty", "NUL", "lone-surrogate", "newline"],
)
def test_bad_operation_ids(api: Api, target: Playlist, operation_id: str, code: str) -> None:
    body = mutate_raw(api, "createPlaylist", operationId=operation_id, title="t")
    assert refused(body, "createPlaylist", code)["field"] == ["input", "operationId"]
    body = mutate_raw(
        api,
        "addEntries",
        operationId=operation_id,
        playlistId=target.id,
        baseVersion=target.before[0]["version"],
        mediaIds=[track(5)],
    )
    assert refused(body, "addEntries", code)["field"] == ["input", "operationId"]
    target.unchanged()


def test_operation_id_of_64_is_fine(api: Api) -> None:
    body = mutate_raw(api, "createPlaylist", operationId="o" * 63 + "\u00e9", title="t")
    committed(body["data"]["createPlaylist"])


def test_other_bad_inputs(api: Api, target: Playlist) -> None:
    version = target.before[0]["version"]
    for user_id in ("", "x" * 200, "nul\x00", "\ud800", "tab\t"):
        body = mutate_raw(
            api,
            "setMemberRole",
            playlistId=target.id,
            baseVersion=version,
            userId=user_id,
            role="VIEWER",
        )
        refused(body, "setMemberRole", "INVALID_INPUT")
    for to_version in (-1, version + 1, 2**31 - 1):
        body = mutate_raw(
            api, "revertPlaylist", playlistId=target.id, baseVersion=version, toVersion=to_version
        )
        refused(body, "revertPlaylist", "INVALID_INPUT")
    # Nothing to update: the whole input is at fault. An explicit null for a detail that
    # cannot be cleared: that field. Either way the answer names the playlist, as every
    # user error on a playlist the caller may see does (docs/api.md, Mutations).
    body = mutate_raw(api, "updatePlaylist", playlistId=target.id, baseVersion=version)
    assert refused(body, "updatePlaylist", "INVALID_INPUT")["field"] == ["input"]
    assert body["data"]["updatePlaylist"]["playlist"]["id"] == target.id
    for null_field in ("title", "visibility", "collaborative"):
        body = mutate_raw(
            api, "updatePlaylist", playlistId=target.id, baseVersion=version, **{null_field: None}
        )
        error = refused(body, "updatePlaylist", "INVALID_INPUT")
        assert error["field"] == ["input", null_field], body
        assert body["data"]["updatePlaylist"]["playlist"]["id"] == target.id, body
    target.unchanged()


@pytest.mark.parametrize("query", ["a" * 201, "\ud800", "a\x00b", "%", "_", "\\", "'"])
def test_search_queries(api: Api, query: str) -> None:
    body = gql(api, "query($q: String!) { searchMedia(query: $q) { totalCount } }", q=query)
    if len(query) > 200 or "errors" in body:
        request_error(body, "BAD_USER_INPUT")
        if query == "\ud800":
            assert "lone surrogate" in body["errors"][0]["message"], body
        if query == "a\x00b":
            assert "control characters" in body["errors"][0]["message"], body
    else:
        assert body["data"]["searchMedia"]["totalCount"] >= 0


def test_lone_surrogates_in_the_raw_body(api: Api, target: Playlist) -> None:
    """JSON escapes that decode to a lone surrogate, where they cannot be encoded as UTF-8."""
    query = mutation_document("createPlaylist").replace("\n", " ")
    content = (
        '{"query": ' + json.dumps(query) + ', "variables": {"input": '
        '{"operationId": "lone-\\ud83d", "title": "half an emoji \\ud83d"}}}'
    )
    response = post(api, content)
    assert response.status_code in (200, 400), response.text
    body = response.json()
    if response.status_code == 200 and "errors" not in body:
        payload = body["data"]["createPlaylist"]
        assert payload["version"] is None
        assert payload["userErrors"][0]["code"] == "INVALID_INPUT"
    else:
        assert body["errors"][0]["extensions"]["code"]

    content = (
        '{"query": "query($a: ID!, $b: ID!) { playlist(id: $a) { id } node(id: $b) { id } }", '
        '"variables": {"a": "\\udc00", "b": "\\ud800x"}}'
    )
    response = post(api, content)
    assert response.status_code == 200, response.text
    assert without_cost(response.json()) == {"data": {"playlist": None, "node": None}}
    target.unchanged()


def test_member_user_ids_follow_the_token_rule(api: Api) -> None:
    playlist = create_playlist(api)
    body = mutate_raw(
        api, "setMemberRole", playlistId=playlist, baseVersion=0, userId="has space", role="VIEWER"
    )
    refused(body, "setMemberRole", "INVALID_INPUT")


def _nul_ids(target: Playlist) -> list[str]:
    raw = ids.playlist_id(target.id)
    return [
        ids.to_global_id("Playlist", "a\x00b"),
        ids.to_global_id("PlaylistEntry", raw, "e\x00"),
        ids.to_global_id("PlaylistEntry", "p\x00", "e"),
    ]


def test_ids_that_decode_to_nul(api: Api, target: Playlist) -> None:
    """Well-formed base64 whose text holds NUL, which PostgreSQL text cannot hold."""
    version = target.before[0]["version"]
    for bad in _nul_ids(target):
        body = gql(api, "query($id: ID!) { playlist(id: $id) { id } node(id: $id) { id } }", id=bad)
        assert without_cost(body) == {"data": {"playlist": None, "node": None}}, body
        body = mutate_raw(api, "addEntries", playlistId=bad, baseVersion=0, mediaIds=[track(1)])
        refused(body, "addEntries", "NOT_FOUND")
        for name in ("moveEntries", "removeEntries"):
            body = mutate_raw(api, name, playlistId=target.id, baseVersion=version, entryIds=[bad])
            refused(body, name, "NOT_FOUND")
        body = mutate_raw(
            api,
            "addEntries",
            playlistId=target.id,
            baseVersion=version,
            mediaIds=[track(1)],
            after=bad,
        )
        refused(body, "addEntries", "ANCHOR_NOT_FOUND")
    target.unchanged()


@pytest.mark.parametrize(
    "text",
    ["k:abc:e\x00", "k:a\x00:e", "m:\x00", "s:\x00", "p:2024-01-01T00:00:00+00:00|\x00"],
    ids=["entry-nul", "key-nul", "member-nul", "search-nul", "playlist-nul"],
)
def test_cursors_that_decode_to_nul(api: Api, target: Playlist, text: str) -> None:
    cursor = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    for query in CURSOR_QUERIES.values():
        body = gql(api, declared(query, id="ID!", c="String"), id=target.id, c=cursor)
        assert "errors" not in body or set(codes(body)) == {"BAD_USER_INPUT"}, body


def test_a_request_that_says_one_thing_twice_is_refused(api: Api) -> None:
    # Proxies and servers disagree on which of two counts: refused, as duplicate JSON keys.
    alice, bob = api.token("alice"), api.token("bob")
    query = "{ viewer { user { id } } }"
    both = [("Authorization", f"Bearer {bob}"), ("Authorization", f"Bearer {alice}")]
    response = api.http.post(api.server.url, json={"query": query}, headers=both)
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
    assert "one Authorization header" in response.json()["errors"][0]["message"]
    one = {"Authorization": f"Bearer {alice}"}
    params = [("query", "{ __typename }"), ("query", query)]
    response = api.http.get(api.server.url, params=params, headers=one)
    assert response.status_code == 400, response.text
    assert "'query' parameter once" in response.json()["errors"][0]["message"]
    # Once each, both are answered.
    response = api.http.get(api.server.url, params=[("query", query)], headers=one)
    assert response.json()["data"] == {"viewer": {"user": {"id": "alice"}}}
