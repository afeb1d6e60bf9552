"""Hostile GraphQL documents sent to a running ``chorus serve``: refused cheaply, with a code.

A fragment bomb (each fragment spreads the next twice) must be refused
before any validation rule walks it; so must documents with too many
fragments, spreads, or fields of one name side by side (the input of
graphql-core's quadratic overlap rule). A subscription sent over HTTP is a
client error, not a crash. Read cost is bounded per request and, when
``CHORUS_QUERY_COST_PER_MINUTE`` is set, per user and minute.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from graphql import get_introspection_query

from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, error_codes, mutation_document, track
from tests.servers import ChorusServer

MAX_COST = 10_000
"""The default of ``CHORUS_MAX_QUERY_COST``."""


def bomb(n: int, leaf: str = "__typename") -> str:
    """A ~1 KB query whose fragments each spread the next twice: 2**n leaves expanded."""
    chain = " ".join(f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}" for i in range(n))
    return f"query {{ ...F0 }} {chain} fragment F{n} on Query {{ {leaf} }}"


def refused(api: Api, document: str, code: str, **variables: Any) -> str:
    """The message of the single error of ``document``, asserting its code and no data entry."""
    body = api.gql(document, **variables)
    assert error_codes(body) == [code], body
    assert "data" not in body, body
    message: str = body["errors"][0]["message"]
    return message


def assert_no_traceback(server: ChorusServer) -> None:
    assert "Traceback" not in server.log.read_text()


# --- validation cost ------------------------------------------------------------------


def test_a_fragment_bomb_is_refused_before_validation(api: Api) -> None:
    document = bomb(21)
    assert len(document) < 1_000
    message = refused(api, document, "GRAPHQL_VALIDATION_FAILED")
    assert f"expands to {2**21} fields" in message
    assert "the limit is 10000" in message
    # Aliases at the bottom of the bomb: the alias rule would have walked it too.
    message = refused(api, bomb(21, "a: __typename"), "GRAPHQL_VALIDATION_FAILED")
    assert "expands to" in message
    # The server answers the next request as usual.
    assert api.data("{ viewer { user { id } } }")["viewer"]["user"]["id"] == "alice"
    assert_no_traceback(api.server)


def test_a_thousand_operations_are_refused_before_validation(api: Api) -> None:
    """No operation is named: graphql-core's rules would walk all 1,000 first."""
    document = " ".join(f"query Q{i} {{ __typename }}" for i in range(1_000))
    message = refused(api, document, "GRAPHQL_VALIDATION_FAILED")
    assert message == "1000 operations defined; the limit is 20"
    twenty = " ".join(f"query Q{i} {{ __typename }}" for i in range(20))
    body = api.http.post(
        api.server.url,
        json={"query": twenty, "operationName": "Q7"},
        headers={"Authorization": f"Bearer {api.token('alice')}"},
    ).json()
    assert body["data"] == {"__typename": "Query"}, body


def test_a_large_document_that_does_not_parse_is_answered_as_a_small_one(api: Api) -> None:
    """Over 2 KB the parse runs in a worker thread and its error is the answer, unparsed again."""
    small = api.gql("{ a b")
    large = api.gql("#" + "x" * 3_000 + "\n{ a b")
    assert error_codes(small) == error_codes(large) == ["GRAPHQL_PARSE_FAILED"]
    assert small["errors"][0]["message"] == large["errors"][0]["message"]
    assert small["errors"][0]["locations"] == [{"line": 1, "column": 6}]
    assert large["errors"][0]["locations"] == [{"line": 2, "column": 6}]
    assert "data" not in small, small
    assert large == {"errors": large["errors"]}
    over = api.gql("{" + " a" * 5_001 + " }")
    assert error_codes(over) == ["GRAPHQL_PARSE_FAILED"]
    assert "more than 5000 tokens" in over["errors"][0]["message"]
    assert_no_traceback(api.server)


def test_a_small_bomb_passes_every_rule(api: Api) -> None:
    # 2**10 copies of one field: within the expansion limit; depth and aliases
    # are computed once per fragment.
    body = api.gql(bomb(10))
    assert "errors" not in body, body
    assert body["data"] == {"__typename": "Query"}


def test_too_many_fragments_or_spreads_are_refused(api: Api) -> None:
    fragments = " ".join(f"fragment F{i} on Query {{ __typename }}" for i in range(51))
    spreads = " ".join(f"...F{i}" for i in range(51))
    message = refused(api, f"{{ {spreads} }} {fragments}", "GRAPHQL_VALIDATION_FAILED")
    assert message == "51 fragments defined; the limit is 50"
    message = refused(
        api,
        "{ " + "...F " * 101 + "} fragment F on Query { __typename }",
        "GRAPHQL_VALIDATION_FAILED",
    )
    assert message == "more than 100 fragment spreads; spread fewer"
    body = api.gql("{ " + "...F " * 100 + "} fragment F on Query { __typename }")
    assert "errors" not in body, body


def test_one_field_repeated_side_by_side_is_refused(api: Api) -> None:
    # 1,200 `user { id }` in one selection set: 1.2 s in graphql-core's overlap rule.
    message = refused(
        api, "{ viewer { " + "user { id } " * 1200 + "} }", "GRAPHQL_VALIDATION_FAILED"
    )
    assert message == "field 'user' is selected 1200 times in one selection set; the limit is 20"
    inline = "{ viewer { " + "... on Viewer { user { id } } " * 500 + "} }"
    assert "500 times" in refused(api, inline, "GRAPHQL_VALIDATION_FAILED")
    assert "errors" not in api.gql("{ viewer { " + "user { id } " * 20 + "} }")


def _fragments_side_by_side(count: int, body: str) -> str:
    fragments = " ".join(f"fragment F{i} on Viewer {{ {body} }}" for i in range(count))
    return "{ viewer { " + " ".join(f"...F{i}" for i in range(count)) + " } } " + fragments


def test_one_field_merged_from_many_fragments_is_refused(api: Api) -> None:
    # 50 fragments each selecting `playlists { … }`, spread side by side: 1,225
    # pairs for the overlap rule to compare all the way down (~1 s each).
    nested = (
        "playlists(first: 1) { edges { node { id entries(first: 1) { edges { node { id } } } } } }"
    )
    message = refused(api, _fragments_side_by_side(50, nested), "GRAPHQL_VALIDATION_FAILED")
    assert message == (
        "field 'playlists' is selected 50 times in one selection set "
        "through its fragments; the limit is 20"
    )
    # What Relay writes: many fragments side by side sharing leaf fields.
    relay = "{ viewer { user { " + " ".join(f"...U{i}" for i in range(40)) + " } } } "
    relay += " ".join(f"fragment U{i} on User {{ id }}" for i in range(40))
    assert "errors" not in api.gql(relay), relay
    assert "errors" not in api.gql(_fragments_side_by_side(20, nested))
    assert_no_traceback(api.server)


def test_introspection_once_per_operation(api: Api) -> None:
    full = get_introspection_query()
    assert "errors" not in api.gql(full, user=None)
    twice = "{ a: __schema { types { name } } b: __schema { types { name } } }"
    message = refused(api, twice, "GRAPHQL_VALIDATION_FAILED", user=None)
    assert message == "2 __schema fields; the limit is 1 (introspect once and cache it)"
    types = "{ " + " ".join(f't{i}: __type(name: "Query") {{ name }}' for i in range(11)) + " }"
    assert "11 __type fields" in refused(api, types, "GRAPHQL_VALIDATION_FAILED", user=None)


# --- a subscription over HTTP ---------------------------------------------------------


def test_a_subscription_over_http_is_a_bad_request(api: Api) -> None:
    query = 'subscription { playlistEvents(playlistId: "x", sinceVersion: 0) { __typename } }'
    response = api.raw({"query": query})
    assert response.status_code == 400, response.text
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "BAD_REQUEST"
    assert error["message"] == (
        "subscriptions need a WebSocket: use graphql-transport-ws on this URL"
    )
    # Before validation: a subscription that would not validate gets the same answer.
    response = api.raw({"query": "subscription { viewer { user { id } } }"})
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
    # A subscription beside a query, no operationName: the mistake is not naming one.
    both = query.replace("subscription {", "subscription S {") + " query Q { __typename }"
    response = api.raw({"query": both})
    assert response.json()["errors"] == [
        {
            "message": "the document holds several operations: give operationName",
            "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
        }
    ], response.text
    named = api.raw({"query": both, "operationName": "Q"})
    assert named.json()["data"] == {"__typename": "Query"}, named.text
    assert_no_traceback(api.server)


# --- read cost ------------------------------------------------------------------------


CHANGES_WITH_MEDIA = (
    "changes(sinceVersion: 0, first: 20) { versions { version changes { "
    "... on EntriesAdded { entries { id media { title artists } } } } } }"
)


@pytest.fixture(scope="module")
def playlist_id(api: Api) -> str:
    pid = create_playlist(api, title="Costly")
    add(api, pid, [track(1), track(2)], base=0)
    return pid


def test_thirty_aliases_of_changes_with_media_are_refused(api: Api, playlist_id: str) -> None:
    aliased = " ".join(f"c{i}: {CHANGES_WITH_MEDIA}" for i in range(30))
    document = f"query($id: ID!) {{ playlist(id: $id) {{ {aliased} }} }}"
    message = refused(api, document, "GRAPHQL_VALIDATION_FAILED", id=playlist_id)
    assert message.startswith("the query costs ")
    assert f"the limit is {MAX_COST}" in message
    # One of them is an ordinary sync, and says what it cost.
    body = api.gql(
        f"query($id: ID!) {{ playlist(id: $id) {{ {CHANGES_WITH_MEDIA} }} }}", id=playlist_id
    )
    assert "errors" not in body, body
    cost = body["extensions"]["cost"]
    requested = cost["requestedQueryCost"]
    assert cost == {
        "requestedQueryCost": requested,
        "actualQueryCost": requested,
        "maximum": MAX_COST,
    }
    assert 100 < cost["requestedQueryCost"] < MAX_COST


def test_a_version_counts_the_entries_it_may_hold(api: Api, playlist_id: str) -> None:
    # Each version may hold 100 entries: 100 versions of them are 10,000.
    many = (
        "changes(sinceVersion: 0, first: 100) { versions { changes { "
        "... on EntriesAdded { entries { id mediaId positionKey } } } } }"
    )
    document = f"query($id: ID!) {{ playlist(id: $id) {{ {many} }} }}"
    message = refused(api, document, "GRAPHQL_VALIDATION_FAILED", id=playlist_id)
    assert message.startswith("the query costs 10")
    fewer = document.replace("first: 100", "first: 50")
    assert "errors" not in api.gql(fewer, id=playlist_id)


def revert(api: Api, pid: str, base: int, to_version: int) -> dict[str, Any]:
    document = mutation_document("revertPlaylist")
    fields = {"playlistId": pid, "baseVersion": base, "toVersion": to_version}
    payload: dict[str, Any] = api.data(document, input={"operationId": api.op(), **fields})
    return payload["revertPlaylist"]


def test_a_revert_changes_at_most_a_batch_and_big_versions_are_charged_as_read(
    api: Api,
) -> None:
    # 1,100 entries in eleven adds: one revert to the empty list would change
    # them all in one version, over the 1,000 a batch may touch.
    pid = create_playlist(api, title="Reverted")
    for n in range(11):
        add(api, pid, [track(100 * n + i) for i in range(1, 101)], base=n)
    over = revert(api, pid, 11, 0)
    assert over["version"] is None
    [error] = over["userErrors"]
    assert error["code"] == "LIMIT_EXCEEDED", error
    assert "1100 entries" in error["message"]
    assert "in steps" in error["message"]
    # In steps: versions 1 and 11 are 1,000 entries apart; each revert is one
    # version of 1,000 entries.
    version = 11
    for n in range(11):
        payload = revert(api, pid, version, 1 if n % 2 == 0 else 11)
        assert payload["userErrors"] == [], payload
        version = payload["version"]
    # The query cost counts a version's entries at 100; these hold 1,000, so
    # each version read is charged 900 more, and the page stops before the
    # version that would pass the limit.
    document = (
        "query($id: ID!) { playlist(id: $id) { changes(sinceVersion: 11, first: 20) {"
        " versions { version changes { ... on EntriesAdded { entries { id } }"
        " ... on EntriesRemoved { entryIds } } } hasMore } } }"
    )
    body = api.gql(document, id=pid)
    assert "errors" not in body, body
    page = body["data"]["playlist"]["changes"]
    cost = body["extensions"]["cost"]
    requested, kept = cost["requestedQueryCost"], len(page["versions"])
    assert [v["version"] for v in page["versions"]] == list(range(12, 12 + kept))
    assert page["hasMore"] is True
    assert cost["actualQueryCost"] == requested + 900 * kept <= MAX_COST
    assert requested + 900 * (kept + 1) > MAX_COST
    # atVersion(12) undoes versions 13 … 22 from the head: 10,000 entries of
    # changes, 400 within the 200 points it is counted at, the rest charged one
    # point per 2. Two aliases of one version rebuild it once, charged once.
    at = "{ title entries(first: 1) { totalCount } }"
    document = f"query($id: ID!) {{ playlist(id: $id) {{ a: atVersion(version: 12) {at} }} }}"
    body = api.gql(document, id=pid)
    assert "errors" not in body, body
    single = body["extensions"]["cost"]
    assert single["actualQueryCost"] == single["requestedQueryCost"] + 4_800
    twice = (
        "query($id: ID!) { playlist(id: $id) {"
        f" a: atVersion(version: 12) {at} b: atVersion(version: 12) {at} }} }}"
    )
    body = api.gql(twice, id=pid)
    assert "errors" not in body, body
    assert body["data"]["playlist"]["a"] == body["data"]["playlist"]["b"]
    cost = body["extensions"]["cost"]
    assert cost["actualQueryCost"] == cost["requestedQueryCost"] + 4_800


def heavy_versions(api: Api, pid: str, count: int) -> int:
    """Ten adds of 100 entries to the new playlist ``pid``, then ``count`` versions of
    1,000 entries each (reverts to 0, to 10, …); the version it ends at."""
    # The payload selects no entries: 100 of them cost 100 (docs/api.md, query cost), and
    # these adds set up a test that may run under a small budget.
    lean_add = (
        "mutation($input: AddEntriesInput!) "
        "{ addEntries(input: $input) { version userErrors { code } } }"
    )
    for n in range(10):
        media = [track(100 * n + i) for i in range(1, 101)]
        answer = api.data(
            lean_add,
            input={"playlistId": pid, "operationId": api.op(), "baseVersion": n, "mediaIds": media},
        )["addEntries"]
        assert (answer["version"], answer["userErrors"]) == (n + 1, []), answer
    version = 10
    for n in range(count):
        version = revert(api, pid, version, 0 if n % 2 == 0 else 10)["version"]
    return version


def followed_heavy_feed(api: Api, user: str, pid: str, count: int, document: str) -> Any:
    """``user`` follows ``pid``, which gets :func:`heavy_versions`; the feed ``document``'s answer.

    Read again until the feed holds all ``10 + count`` versions (the relay
    writes the follower's feed rows just after each commit), 10 s at most.
    """
    follow = "mutation($input: FollowInput!) { follow(input: $input) { changed } }"
    api.data(follow, user, input={"kind": "PLAYLIST", "targetId": pid})
    heavy_versions(api, pid, count)
    deadline = time.monotonic() + patience(10)
    while True:
        body = api.gql(document, user=user)
        edges = (body.get("data") or {}).get("viewer", {}).get("feed", {}).get("edges", [])
        if len(edges) == 10 + count or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_a_feed_item_s_changes_are_charged_as_changes_charges_them(api: Api) -> None:
    pid = create_playlist(api, title="Followed", visibility="PUBLIC")
    document = (
        "{ viewer { feed(first: 20) { edges { node { version changes { __typename"
        " ... on EntriesAdded { entries { id } } ... on EntriesRemoved { entryIds } } } } } } }"
    )
    body = followed_heavy_feed(api, "fan", pid, 4, document)
    assert "errors" not in body, body
    versions = [e["node"]["version"] for e in body["data"]["viewer"]["feed"]["edges"]]
    assert sorted(versions) == list(range(1, 15)), versions
    cost = body["extensions"]["cost"]
    assert cost["actualQueryCost"] == cost["requestedQueryCost"] + 4 * 900


def test_a_feed_page_past_its_history_budget_keeps_its_other_items(api: Api) -> None:
    # Twelve versions of 1,000 entries: 12 × 900 charged beyond 100 each is over
    # what the limit leaves. The items past it have changes null with the error
    # saying how to read them; the page, its cursor and the other items stay.
    pid = create_playlist(api, title="Heavy feed", visibility="PUBLIC")
    document = (
        "{ viewer { feed(first: 30) { pageInfo { endCursor } edges { node { version"
        " changes { ... on EntriesAdded { entries { id } } ... on EntriesRemoved { entryIds } }"
        " } } } } }"
    )
    body = followed_heavy_feed(api, "reader", pid, 12, document)
    edges = body["data"]["viewer"]["feed"]["edges"]
    assert len(edges) == 22, body
    refused = [e["node"]["version"] for e in edges if e["node"]["changes"] is None]
    assert refused, body
    assert {e["extensions"]["code"] for e in body["errors"]} == {"LIMIT_EXCEEDED"}
    assert all(e["path"][-1] == "changes" for e in body["errors"])
    assert "Playlist.changes(sinceVersion: " in body["errors"][0]["message"]
    assert body["data"]["viewer"]["feed"]["pageInfo"]["endCursor"] is not None
    assert body["extensions"]["cost"]["actualQueryCost"] <= MAX_COST


def test_an_old_version_is_rebuilt_only_within_the_query_cost(budget: Api) -> None:
    # Ten versions of 1,000 entries each (a revert to 0, to 10, …): rebuilding the
    # oldest undoes 9,000 entries of changes; a limit of 500 leaves this request
    # 400 + 2 × (500 − requested) of them, fewer: refused before the rewind.
    pid = create_playlist(budget, title="Heavy")
    version = heavy_versions(budget, pid, 10)
    assert version == 20
    at = "{ title entries(first: 1) { totalCount } }"
    old = f"query($id: ID!) {{ playlist(id: $id) {{ atVersion(version: 11) {at} }} }}"
    body = budget.gql(old, id=pid)
    assert body["data"]["playlist"]["atVersion"] is None, body
    [error] = body["errors"]
    assert error["extensions"]["code"] == "LIMIT_EXCEEDED", error
    assert "undoing 9000 entries of changes" in error["message"], error
    assert "a request of its own" in error["message"]
    # The head undoes nothing, and is answered.
    near = old.replace("version: 11", "version: 20")
    body = budget.gql(near, id=pid)
    assert "errors" not in body, body
    assert body["data"]["playlist"]["atVersion"]["entries"]["totalCount"] == 1000
    assert_no_traceback(budget.server)


def test_nested_connections_at_maximum_page_sizes_are_refused(api: Api) -> None:
    document = """
    query($n: Int) { viewer { playlists(first: $n) { edges { node {
      entries(first: $n) { edges { node { media { title } addedBy { id } } } }
      members(first: $n) { edges { node { user { id } } } }
    } } } } }
    """
    message = refused(api, document, "GRAPHQL_VALIDATION_FAILED", n=100)
    assert "the query costs" in message
    body = api.gql(document, n=10)
    assert "errors" not in body, body
    assert body["extensions"]["cost"]["requestedQueryCost"] <= MAX_COST


def test_a_mutation_costs_its_payload(api: Api, playlist_id: str) -> None:
    body = api.gql(
        mutation_document("createPlaylist"), input={"operationId": api.op(), "title": "Paid"}
    )
    assert "errors" not in body, body
    assert body["extensions"]["cost"]["requestedQueryCost"] > 0


# --- the per-user budget --------------------------------------------------------------


@pytest.fixture(scope="module")
def budget(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """A server (SQLite) with a per-request limit of 500 and a budget of 1,000 a minute."""
    data_dir: Path = tmp_path_factory.mktemp("chorus-budget")
    server = ChorusServer(
        f"sqlite+aiosqlite:///{data_dir / 'chorus.db'}",
        data_dir,
        CHORUS_MAX_QUERY_COST="500",
        CHORUS_QUERY_COST_PER_MINUTE="1000",
    )
    server.start()
    client = Api(server)
    yield client
    client.http.close()
    server.stop()


PLAYLISTS_402 = (
    "{ viewer { playlists(first: 100) { edges { node { id owner { id } "
    "entries(first: 1) { totalCount } } } } } }"
)
"""Costs 2 + 100 × (edge + node + owner + entries) = 402."""


BIG_MUTATION = """
mutation Big($input: CreatePlaylistInput!) {
  createPlaylist(input: $input) {
    version
    playlist { entries(first: 100) { edges { node { id media { title } } } } }
  }
}
"""
"""A mutation whose selection costs more than a spent budget has left."""


def test_the_budget_runs_out_and_introspection_is_free(budget: Api) -> None:
    first = budget.gql(PLAYLISTS_402, user="carol")
    assert "errors" not in first, first
    cost = first["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 402
    assert cost["maximum"] == 500
    status = cost["throttleStatus"]
    assert status["maximumAvailable"] == 1000
    assert 598 <= status["currentlyAvailable"] < 1000
    assert "errors" not in budget.gql(PLAYLISTS_402, user="carol")
    body = budget.gql(PLAYLISTS_402, user="carol")
    assert error_codes(body) == ["RATE_LIMITED"], body
    assert "data" not in body, body  # refused as execution starts: nothing executed
    message = body["errors"][0]["message"]
    assert "costs 402" in message
    assert "1000 a minute" in message
    # When to retry: the bucket refills 1000 points a minute, so 402 points take at most
    # ~24 s; the spec's media type says it as HTTP's Retry-After too.
    wait_ms = body["errors"][0]["extensions"]["retryAfterMs"]
    assert 1 <= wait_ms <= 402 * 60, body
    strict = budget.http.post(
        budget.server.url,
        json={"query": PLAYLISTS_402},
        headers={
            "Authorization": f"Bearer {budget.token('carol')}",
            "Accept": "application/graphql-response+json",
        },
    )
    assert strict.status_code == 429, strict.text
    after = int(strict.headers["retry-after"])
    assert after == -(-strict.json()["errors"][0]["extensions"]["retryAfterMs"] // 1000)
    assert 1 <= after <= 25, strict.headers
    # Mutations spend the mutation rate limit, not this budget: a spent budget
    # never refuses the retry that tells a client whether its edit committed.
    left = body["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
    created = budget.gql(
        BIG_MUTATION, user="carol", input={"operationId": budget.op(), "title": "Past the budget"}
    )
    assert created["extensions"]["cost"]["requestedQueryCost"] > left + 100, created
    assert created["data"]["createPlaylist"]["version"] == 0, created
    # Its payload's reads were refused and nothing was charged: the report says the
    # budget (as every answer does while it is on), and no actual cost.
    assert created["data"]["createPlaylist"]["playlist"] is None, created
    assert error_codes(created) == ["RATE_LIMITED"], created
    # When to read it: as the query budget's own refusal says it.
    assert 1 <= created["errors"][0]["extensions"]["retryAfterMs"] <= 60_000, created
    assert created["errors"][0]["path"] == ["createPlaylist", "playlist"], created
    report = created["extensions"]["cost"]
    assert "actualQueryCost" not in report, report
    assert report["throttleStatus"]["maximumAvailable"] == 1000, report
    assert report["throttleStatus"]["currentlyAvailable"] <= left + 50, report
    # An edit within the budget reports what it cost, and the budget.
    small = budget.gql(
        "mutation Small($input: CreatePlaylistInput!) "
        "{ createPlaylist(input: $input) { version } }",
        user="dave",
        input={"operationId": budget.op(), "title": "Within the budget"},
    )
    report = small["extensions"]["cost"]
    assert report["actualQueryCost"] == report["requestedQueryCost"], small
    assert 900 <= report["throttleStatus"]["currentlyAvailable"] < 1000, small
    # Introspection is never charged, and another user has a budget of their own.
    assert "errors" not in budget.gql(get_introspection_query(), user="carol")
    assert "errors" not in budget.gql(PLAYLISTS_402, user="dave")
    # The per-request limit of this server.
    message = refused(
        budget,
        PLAYLISTS_402.replace("owner { id }", "owner { id } o: owner { id }"),
        "GRAPHQL_VALIDATION_FAILED",
    )
    assert "the query costs 502; the limit is 500" in message
    assert_no_traceback(budget.server)


# --- no token: refused before validation ------------------------------------------------------


def test_without_a_token_only_introspection_is_validated(api: Api) -> None:
    # 25 aliased pages of an old version, ~3 KB: over the cost limit and, with an
    # unknown field, invalid; each new to the document cache. Without a token it is
    # refused before any rule runs (the unknown field is not reported), as what the
    # first field needing a viewer says; with one, validation reports the field.
    fields = " ".join(
        f"a{i}: atVersion(version: 1)"
        " { entries(first: 100) { edges { node { id nope } } } }"
        for i in range(25)
    )
    document = f'{{ playlist(id: "x") {{ {fields} }} }}'
    before = len(api.server.log.read_text().splitlines())
    for token in (None, "not.a.token"):
        response = api.http.post(
            api.server.url,
            json={"query": document},
            headers={"Authorization": f"Bearer {token}"} if token else {},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert "data" not in body, body
        assert error_codes(body) == ["UNAUTHENTICATED"], body
        assert "extensions" not in body  # no cost: nothing past the refusal ran
    assert api.server.log.read_text().splitlines()[before:] == []
    body = api.gql(document)
    assert set(error_codes(body)) == {"GRAPHQL_VALIDATION_FAILED"}, body
    assert "Cannot query field 'nope'" in body["errors"][0]["message"]
    # Without a token, an introspection-only document is still validated (and answered).
    body = api.gql("{ __schema { nope } }", user=None)
    assert error_codes(body) == ["GRAPHQL_VALIDATION_FAILED"], body
    assert api.gql("{ __typename }", user=None) == {
        "data": {"__typename": "Query"},
        "extensions": {"cost": {"requestedQueryCost": 0, "maximum": 10000, "actualQueryCost": 0}},
    }
    # A fragment that spreads itself is walked once while looking for root fields.
    cycle = '{ ...F } fragment F on Query { ...F playlist(id: "x") { id } }'
    assert error_codes(api.gql(cycle, user=None)) == ["UNAUTHENTICATED"]
    assert error_codes(api.gql(cycle)) == ["GRAPHQL_VALIDATION_FAILED"]


# --- integer literals too long to convert ---------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        "{ viewer { playlists(first: " + "9" * 4400 + ") { totalCount } } }",
        "query Q($n: Int = " + "9" * 4400 + ") { viewer { playlists(first: $n) { totalCount } } }",
        "{ viewer { playlists(first: -" + "1" * 400 + ") { totalCount } } }",
    ],
    ids=["argument-4400", "default-4400", "negative-400"],
)
def test_an_int_literal_too_long_to_convert_fails_validation(api: Api, document: str) -> None:
    before = len(api.server.log.read_text().splitlines())
    body = api.gql(document, user="alice")
    assert error_codes(body) == ["GRAPHQL_VALIDATION_FAILED"], str(body)[:500]
    assert "data" not in body, str(body)[:500]
    message = body["errors"][0]["message"]
    assert message.startswith("Int cannot represent non 32-bit signed integer value: "), message
    assert len(message) < 200  # the literal is abbreviated, not echoed
    assert api.server.log.read_text().splitlines()[before:] == []  # no error line
    # An out-of-range literal of ordinary length keeps graphql-core's own message.
    short = refused(
        api,
        "{ viewer { playlists(first: 99999999999) { totalCount } } }",
        "GRAPHQL_VALIDATION_FAILED",
    )
    assert short == "Int cannot represent non 32-bit signed integer value: 99999999999"


def test_an_over_long_integer_for_an_id_fails_validation_naming_the_type(api: Api) -> None:
    message = refused(
        api, "{ playlist(id: " + "7" * 5000 + ") { id } }", "GRAPHQL_VALIDATION_FAILED"
    )
    assert message.startswith("Expected value of type 'ID!', found 777777777777… (5000 digits)")
    assert_no_traceback(api.server)


def test_a_document_past_100000_characters_is_refused_unread(api: Api) -> None:
    # Three tokens and a megabyte of white space: under the token limit, but lexed
    # for up to 280 ms each time, and a long name came back in its error.
    padded = "{" + " " * 1_000_000 + "__typename }"
    body = api.gql(padded)
    assert error_codes(body) == ["GRAPHQL_PARSE_FAILED"], str(body)[:300]
    message = body["errors"][0]["message"]
    assert message == f"the document is {len(padded)} characters; the limit is 100000"
    name = "{ " + "a" * 200_000 + " }"
    assert len(str(api.gql(name))) < 1_000  # nothing of it echoed
    within = "{" + " " * 90_000 + "__typename }"
    assert api.data(within) == {"__typename": "Query"}


def test_an_introspection_answer_is_kept_and_served_without_executing(api: Api) -> None:
    # GraphiQL's introspection query took ~17 ms of the loop per send: 100 clients
    # without a token held /healthz for seconds. Its answer is the schema's.
    document = get_introspection_query()
    first = api.http.post(api.server.url, json={"query": document})
    assert first.status_code == 200
    assert "errors" not in first.json()
    before = executed_queries(api)
    again = [api.http.post(api.server.url, json={"query": document}) for _ in range(3)]
    assert {r.content for r in again} == {first.content}
    assert {r.headers["etag"] for r in again} == {first.headers["etag"]}
    with_token = api.http.post(
        api.server.url,
        json={"query": document},
        headers={
            "Authorization": f"Bearer {api.token('alice')}",
            "If-None-Match": first.headers["etag"],
        },
    )
    assert with_token.status_code == 304
    assert executed_queries(api) == before  # none of the four executed
    # Another document, or other variables, is its own answer.
    other = "query Q($t: String!) { __type(name: $t) { name } }"
    for name in ("Playlist", "Media"):
        body = api.gql(other, user=None, t=name)
        assert body["data"] == {"__type": {"name": name}}, body


def executed_queries(api: Api) -> float:
    """Queries this server executed (``chorus_graphql_request_seconds_count``, every name)."""
    text = api.http.get(api.server.base_url + "/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("chorus_graphql_request_seconds_count{")
        and 'operation_type="query"' in line
    )
