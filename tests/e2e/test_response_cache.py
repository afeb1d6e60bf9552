"""The response cache and HTTP caching, against a running ``chorus serve`` (SQLite and PostgreSQL).

Never wrong, never leaked: a cached answer is served only while every
playlist it read is at the version it read, and only to its audience. Each
rule is checked from outside: ``ETag`` / ``If-None-Match`` / ``304``, the
caching headers, ``/metrics``' counters, persisted queries over GET, and
answers racing edits. The plain path (cache off, a second server on the same
PostgreSQL database) is the reference the cached answers must equal.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api, serving
from tests.e2e.helpers import PLAYLIST, add, committed, create_playlist, mutate, track, version
from tests.e2e.test_subscriptions import receive, socket
from tests.servers import ChorusServer, create_database, drop_database, postgres_url

PAGE = """query Page($id: ID!) { playlist(id: $id) { id version title visibility
  entries(first: 100) { version totalCount edges { node { id mediaId media { title } } } } } }"""
PAGE_WITH_ROLE = """query Role($id: ID!) { playlist(id: $id) { version viewerRole
  entries(first: 10) { edges { node { id } } } } }"""


def post(api: Api, query: str, user: str | None = "alice", **kw: Any) -> httpx.Response:
    variables = kw.pop("variables", {})
    headers = kw.pop("headers", {})
    if user:
        headers["Authorization"] = f"Bearer {api.token(user)}"
    body = {"query": query, "variables": variables}
    return api.http.post(api.server.url, json=body, headers=headers, **kw)


def cache_counts(server: ChorusServer) -> dict[str, float]:
    """``chorus_response_cache_total`` by result, summed over operation names."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    counts: dict[str, float] = {}
    pattern = r'^chorus_response_cache_total\{operation_name="[^"]*",result="(\w+)"\} (\S+)$'
    for result, value in re.findall(pattern, text, re.MULTILINE):
        counts[result] = counts.get(result, 0.0) + float(value)
    return counts


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def public_playlist(api: Api, entries: int = 3) -> str:
    pid = create_playlist(api, visibility="PUBLIC")
    add(api, pid, [track(n) for n in range(1, entries + 1)], 0)
    return pid


def test_a_second_read_is_a_hit_with_the_same_body_and_etag(api: Api) -> None:
    pid = public_playlist(api)
    before = cache_counts(api.server)
    first = post(api, PAGE, "bob", variables={"id": pid})
    second = post(api, PAGE, "bob", variables={"id": pid})
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert first.headers["etag"] == second.headers["etag"]
    assert second.headers["cache-control"] == "private, no-cache"
    assert second.headers["vary"] == "Authorization, Accept"
    assert delta(before, cache_counts(api.server)) == {"miss": 1, "hit": 1}


def test_a_public_answer_is_shared_by_every_viewer(api: Api) -> None:
    pid = public_playlist(api)
    before = cache_counts(api.server)
    bodies = {post(api, PAGE, user, variables={"id": pid}).content for user in ("bob", "carol")}
    assert len(bodies) == 1
    assert delta(before, cache_counts(api.server)) == {"miss": 1, "hit": 1}


def test_if_none_match_is_a_304_until_the_version_moves(api: Api) -> None:
    pid = public_playlist(api)
    etag = post(api, PAGE, variables={"id": pid}).headers["etag"]
    before = cache_counts(api.server)
    again = post(api, PAGE, variables={"id": pid}, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    assert delta(before, cache_counts(api.server)) == {"not_modified": 1}
    add(api, pid, [track(9)], version(api, pid))
    changed = post(api, PAGE, variables={"id": pid}, headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["etag"] != etag
    assert track(9) in changed.text


def test_an_edit_is_seen_at_once_by_the_next_read(api: Api) -> None:
    pid = public_playlist(api)
    for _ in range(2):
        post(api, PAGE, "bob", variables={"id": pid})
    done = add(api, pid, [track(7)], 1)
    page = post(api, PAGE, "bob", variables={"id": pid}).json()["data"]["playlist"]
    assert page["version"] == done["version"]
    assert page["entries"]["totalCount"] == 4


def test_a_removed_member_no_longer_gets_a_private_playlist(api: Api) -> None:
    pid = create_playlist(api, visibility="PRIVATE")
    add(api, pid, [track(1)], 0)
    committed(
        mutate(api, "setMemberRole", playlistId=pid, baseVersion=1, userId="bob", role="VIEWER")
    )
    for _ in range(2):
        seen = post(api, PAGE, "bob", variables={"id": pid}).json()["data"]["playlist"]
        assert seen is not None
    # Another viewer never gets bob's answer: it is not shared.
    assert post(api, PAGE, "carol", variables={"id": pid}).json()["data"]["playlist"] is None
    committed(mutate(api, "removeMember", playlistId=pid, baseVersion=2, userId="bob"))
    assert post(api, PAGE, "bob", variables={"id": pid}).json()["data"]["playlist"] is None


def test_a_playlist_made_private_is_no_longer_served_to_strangers(api: Api) -> None:
    pid = public_playlist(api)
    for _ in range(2):
        assert post(api, PAGE, "carol", variables={"id": pid}).json()["data"]["playlist"]
    committed(mutate(api, "updatePlaylist", playlistId=pid, baseVersion=1, visibility="PRIVATE"))
    assert post(api, PAGE, "carol", variables={"id": pid}).json()["data"]["playlist"] is None
    mine = post(api, PAGE, "alice", variables={"id": pid}).json()["data"]["playlist"]
    assert mine["visibility"] == "PRIVATE"


def test_a_deleted_playlist_is_gone_from_the_cache(api: Api) -> None:
    pid = public_playlist(api)
    for _ in range(2):
        assert post(api, PAGE, "carol", variables={"id": pid}).json()["data"]["playlist"]
    committed(mutate(api, "deletePlaylist", playlistId=pid, baseVersion=1))
    for user in ("carol", "alice"):
        assert post(api, PAGE, user, variables={"id": pid}).json()["data"]["playlist"] is None


def test_viewer_role_is_each_viewers_own(api: Api) -> None:
    pid = public_playlist(api)
    committed(
        mutate(api, "setMemberRole", playlistId=pid, baseVersion=1, userId="bob", role="EDITOR")
    )
    before = cache_counts(api.server)
    for _ in range(2):
        roles = {
            user: post(api, PAGE_WITH_ROLE, user, variables={"id": pid}).json()["data"]["playlist"][
                "viewerRole"
            ]
            for user in ("bob", "carol", "alice")
        }
        assert roles == {"bob": "EDITOR", "carol": None, "alice": "OWNER"}
    assert delta(before, cache_counts(api.server)) == {"miss": 3, "hit": 3}


def test_requests_without_a_valid_token_are_never_cached(api: Api) -> None:
    pid = public_playlist(api)
    post(api, PAGE, "bob", variables={"id": pid})
    before = cache_counts(api.server)
    # If-None-Match: * never turns a refusal into a 304 (a client would never learn
    # its token expired).
    anonymous = post(api, PAGE, None, variables={"id": pid}, headers={"If-None-Match": "*"})
    assert anonymous.status_code == 200
    bad = post(
        api, PAGE, None, variables={"id": pid}, headers={"Authorization": "Bearer nope.nope.x"}
    )
    for response in (anonymous, bad):
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        assert "data" not in response.json()  # a request error
        # Refused before validation (docs/api.md, Identity): nothing was looked up,
        # nothing executed, nothing may keep the answer.
        assert response.headers["cache-control"] == "no-store"
        assert "etag" not in response.headers
    assert delta(before, cache_counts(api.server)) == {}


def test_mutations_are_not_stored_by_anyone(api: Api) -> None:
    response = post(
        api,
        "mutation M($input: CreatePlaylistInput!) { createPlaylist(input: $input) { version } }",
        variables={"input": {"operationId": api.op(), "title": "T"}},
    )
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    assert "etag" not in response.headers


def test_uncacheable_reads_still_get_an_etag(api: Api) -> None:
    query = "query Mine { viewer { playlists(first: 5) { totalCount } } }"
    before = cache_counts(api.server)
    first = post(api, query)
    second = post(api, query, headers={"If-None-Match": first.headers["etag"]})
    assert second.status_code == 304
    # Counted once each, as executed: the 304 was its execution's bypass.
    assert delta(before, cache_counts(api.server)) == {"bypass": 2}


def test_reads_racing_edits_name_their_version_and_never_lag_a_commit(api: Api) -> None:
    """Every answer is what SQL holds at the version it names; none older than a known commit."""
    pid = create_playlist(api, visibility="PUBLIC")
    placed: dict[int, list[str]] = {0: []}
    stop = threading.Event()
    answers: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def reader(user: str) -> None:
        client = Api(api.server)
        try:
            while not stop.is_set():
                body = post(client, PAGE, user, variables={"id": pid}).json()
                answers.append(body["data"]["playlist"])
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            client.http.close()

    readers = [threading.Thread(target=reader, args=(u,)) for u in ("bob", "bob", "carol")]
    for t in readers:
        t.start()
    try:
        current = 0
        for n in range(1, 16):
            done = add(api, pid, [track(n)], current)
            current = done["version"]
            placed[current] = placed[current - 1] + [e["id"] for e in done["entries"]]
            after = post(api, PAGE, "bob", variables={"id": pid}).json()["data"]["playlist"]
            assert after["version"] >= current
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not failures, failures
    assert len(answers) > 15
    for answer in answers:
        at = answer["version"]
        assert answer["entries"]["version"] == at
        assert [e["node"]["id"] for e in answer["entries"]["edges"]] == placed[at]


# --- persisted queries over GET -------------------------------------------------------


def sha(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()


def get(api: Api, params: dict[str, str], user: str = "alice", **headers: str) -> httpx.Response:
    headers["Authorization"] = f"Bearer {api.token(user)}"
    return api.http.get(api.server.url, params=params, headers=headers)


def apq(digest: str) -> str:
    return json.dumps({"persistedQuery": {"version": 1, "sha256Hash": digest}})


def test_automatic_persisted_queries_over_get(api: Api) -> None:
    pid = public_playlist(api)
    query = PAGE.replace("query Page", "query Persisted")
    params = {"extensions": apq(sha(query)), "variables": json.dumps({"id": pid})}
    unknown = get(api, params)
    assert unknown.status_code == 200
    assert unknown.json()["errors"][0]["message"] == "PersistedQueryNotFound"
    assert unknown.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
    registered = get(api, {**params, "query": query})
    assert registered.status_code == 200
    assert registered.json()["data"]["playlist"]["id"] == pid
    by_hash = get(api, params, Accept="*/*")
    assert by_hash.status_code == 200
    assert by_hash.content == registered.content
    assert by_hash.headers["vary"] == "Authorization, Accept"
    assert get(api, params, **{"If-None-Match": by_hash.headers["etag"]}).status_code == 304


def test_a_document_sent_without_a_token_runs_but_is_not_registered(api: Api) -> None:
    query = "query Anonymous { __schema { queryType { name } } }"  # introspection: no token needed
    params = {"query": query, "extensions": apq(sha(query))}
    ran = api.http.get(api.server.url, params=params)  # no Authorization
    assert ran.status_code == 200
    schema = {"__schema": {"queryType": {"name": "Query"}}}
    assert ran.json()["data"] == schema
    by_hash = get(api, {"extensions": apq(sha(query))})
    assert by_hash.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
    assert get(api, params).json()["data"] == schema  # with a token: kept
    assert get(api, {"extensions": apq(sha(query))}).json()["data"] == schema
    viewer = "query Mine { viewer { user { id } } }"  # a query strawberry runs, not a cached one
    anonymous = api.http.get(
        api.server.url, params={"query": viewer, "extensions": apq(sha(viewer))}
    )
    assert anonymous.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    unknown = get(api, {"extensions": apq(sha(viewer))})
    assert unknown.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


def test_without_a_token_a_hash_is_never_looked_up(api: Api) -> None:
    # Issue 30, finding 7: PERSISTED_QUERY_NOT_FOUND until someone registered
    # the hash, then UNAUTHENTICATED, told a client without a token which
    # documents others use. Now the refusal comes before the lookup.
    query = "query Oracle { viewer { user { id } } }"
    params = {"extensions": apq(sha(query))}
    body = {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha(query)}}}
    graphql_response = "application/graphql-response+json"

    def anonymous() -> list[httpx.Response]:
        return [
            api.http.get(api.server.url, params=params),
            api.http.get(api.server.url, params=params, headers={"Accept": graphql_response}),
            api.http.post(api.server.url, json=body),
            api.http.get(api.server.url, params=params, headers={"Authorization": "Bearer x"}),
        ]

    unknown = anonymous()
    assert get(api, {**params, "query": query}).json()["data"] == {
        "viewer": {"user": {"id": "alice"}}
    }
    assert get(api, params).json()["data"] == {"viewer": {"user": {"id": "alice"}}}
    known = anonymous()
    for before, after in zip(unknown, known, strict=True):
        assert (before.status_code, before.content) == (after.status_code, after.content)
        shown = ("content-type", "cache-control", "www-authenticate")
        assert {h: before.headers.get(h) for h in shown} == {h: after.headers.get(h) for h in shown}
    # The very refusal the document's text gets without a token.
    as_text = api.http.get(api.server.url, params={"query": query})
    assert (known[0].status_code, known[0].content) == (200, as_text.content)
    assert known[0].json() == {
        "errors": [
            {
                "message": "send 'Authorization: Bearer <token>'",
                "extensions": {"code": "UNAUTHENTICATED"},
            }
        ],
    }
    assert known[1].status_code == 401
    assert known[1].headers["www-authenticate"] == "Bearer"
    assert known[2].content == known[0].content
    assert known[3].json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert "malformed" in known[3].json()["errors"][0]["message"]


def test_without_a_token_introspection_goes_by_text_not_by_hash(api: Api) -> None:
    query = "query ByHash { __schema { mutationType { name } } }"
    params = {"query": query, "extensions": apq(sha(query))}
    schema = {"__schema": {"mutationType": {"name": "Mutation"}}}
    assert get(api, params).json()["data"] == schema  # registered, with a token
    by_hash = api.http.get(api.server.url, params={"extensions": apq(sha(query))})
    assert by_hash.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert api.http.get(api.server.url, params=params).json()["data"] == schema


def test_a_persisted_hash_must_be_the_documents(api: Api) -> None:
    response = get(api, {"query": "{ viewer { user { id } } }", "extensions": apq("0" * 64)})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


def test_a_mutation_over_get_is_refused(api: Api) -> None:
    query = 'mutation { createPlaylist(input: {operationId: "g1", title: "x"}) { version } }'
    response = get(api, {"query": query})
    assert response.status_code == 405  # GraphQL over HTTP: MUST be 405
    assert response.headers["allow"] == "POST"
    assert response.json()["errors"][0]["extensions"]["code"] == "METHOD_NOT_ALLOWED"
    assert version_count(api) == 0


def version_count(api: Api) -> int:
    """Playlists titled ``x`` the viewer owns (a refused mutation made none)."""
    body = post(api, "{ viewer { playlists(first: 100) { edges { node { title } } } } }")
    edges = body.json()["data"]["viewer"]["playlists"]["edges"]
    return sum(1 for e in edges if e["node"]["title"] == "x")


# --- the plain path as the reference; registered documents only --------------------


def test_cached_answers_equal_the_plain_path(tmp_path: Path) -> None:
    # One database, served in turn with the response cache on (the default) and off:
    # after each edit, every reader's answers (and ETags) are the same both ways.
    database = create_database()
    url = postgres_url(database)
    try:
        with serving(url, tmp_path) as cached:
            pid = create_playlist(cached, visibility="PUBLIC")
            add(cached, pid, [track(n) for n in range(1, 30)], 0)
            committed(
                mutate(
                    cached,
                    "setMemberRole",
                    playlistId=pid,
                    baseVersion=1,
                    userId="bob",
                    role="EDITOR",
                )
            )
        for step in range(3):
            answers: dict[tuple[str, str], tuple[Any, str]] = {}
            with serving(url, tmp_path) as cached:
                for user in ("alice", "bob", "carol"):
                    for query in (PAGE, PAGE_WITH_ROLE, PLAYLIST):
                        first = post(cached, query, user, variables={"id": pid})
                        hot = post(cached, query, user, variables={"id": pid})  # a hit
                        assert hot.json() == first.json()
                        assert hot.headers["etag"] == first.headers["etag"]
                        answers[user, query] = hot.json(), hot.headers["etag"]
                assert cache_counts(cached.server).get("hit", 0) > 0
            with serving(url, tmp_path, CHORUS_RESPONSE_CACHE="false") as plain:
                for (user, query), (body, etag) in answers.items():
                    ref = post(plain, query, user, variables={"id": pid})
                    assert ref.json() == body
                    assert ref.headers["etag"] == etag
                assert cache_counts(plain.server).get("hit", 0) == 0
                add(plain, pid, [track(40 + step)], 2 + step)
    finally:
        drop_database(database)


def test_only_registered_documents_run_when_configured(tmp_path: Path) -> None:
    allowed = "query Allowed { viewer { user { id } } }"
    manifest = tmp_path / "documents.json"
    manifest.write_text(
        json.dumps(
            {
                "format": "apollo-persisted-query-manifest",
                "version": 1,
                "operations": [{"id": sha(allowed), "body": allowed, "name": "Allowed"}],
            }
        )
    )
    server = ChorusServer(
        f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}",
        tmp_path,
        CHORUS_PERSISTED_DOCUMENTS=str(manifest),
        CHORUS_PERSISTED_DOCUMENTS_ONLY="true",
    )
    server.start()
    client = Api(server)
    try:
        by_hash = get(client, {"extensions": apq(sha(allowed))})
        assert by_hash.json()["data"] == {"viewer": {"user": {"id": "alice"}}}
        assert post(client, allowed).json()["data"] == by_hash.json()["data"]
        other = "query Other { viewer { user { id } } }"
        for refused in (
            post(client, other),
            get(client, {"query": other, "extensions": apq(sha(other))}),
            get(client, {"extensions": apq(sha(other))}),
        ):
            assert refused.status_code == 400
            assert refused.json()["errors"][0]["extensions"]["code"] == (
                "PERSISTED_QUERY_NOT_ALLOWED"
            )
        # The socket is no way around it: a subscribe of an unregistered
        # document (a mutation here) is refused, a registered one runs.
        created = (
            'mutation { createPlaylist(input: {operationId: "ws-pdo", title: "No"}) { version } }'
        )
        answers = asyncio.run(
            _over_socket(server, client.token("alice"), [other, created, allowed])
        )
        assert [a["type"] for a in answers] == ["error", "error", "next"], answers
        assert {a["payload"][0]["extensions"]["code"] for a in answers[:2]} == {
            "PERSISTED_QUERY_NOT_ALLOWED"
        }
        assert answers[2]["payload"]["data"] == {"viewer": {"user": {"id": "alice"}}}
    finally:
        client.http.close()
        server.stop()


async def _over_socket(server: ChorusServer, token: str, queries: list[str]) -> list[Any]:
    """Each query subscribed on one socket in turn; the first answer to each."""
    async with socket(server, token) as ws:
        answers = []
        for n, query in enumerate(queries):
            await ws.send(
                json.dumps({"id": f"q{n}", "type": "subscribe", "payload": {"query": query}})
            )
            answers.append(await receive(ws))
        return answers


def test_a_manifest_that_cannot_be_used_stops_start_up(tmp_path: Path) -> None:
    manifest = tmp_path / "documents.json"
    manifest.write_text(json.dumps({"operations": [{"id": "0" * 64, "body": "{ a }"}]}))
    server = ChorusServer(
        f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}",
        tmp_path,
        CHORUS_PERSISTED_DOCUMENTS=str(manifest),
    )
    try:
        with pytest.raises(RuntimeError, match="not the SHA-256 of its body"):
            server.start()
        assert server.process is not None
        assert server.process.wait(timeout=30) == 2
    finally:
        server.stop()  # closes its log
