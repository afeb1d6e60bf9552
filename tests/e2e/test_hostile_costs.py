"""An attacker's second pass (issue 10): reads that slipped past the cost model.

Against a running ``chorus serve``: a subscription is costed like a query; an
input object of thousands of unknown fields (literal or variables) is refused
before validation; a mutation's payload read spends the query budget (over
it, ``playlist`` is refused, the edit is not); a socket that never sends
``connection_init`` is closed after ``CHORUS_HEAD_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.e2e.conftest import Api, running_server
from tests.e2e.test_subscriptions import PROTOCOL, receive, socket, ws_url
from tests.servers import ChorusServer

CHANGES = (
    "changes(sinceVersion: 0, first: 100) { versions { changes {"
    " ... on EntriesAdded { entries { id media { title artists album durationMs } } } } } }"
)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChorusServer]:
    with running_server(
        "sqlite",
        tmp_path_factory,
        CHORUS_QUERY_COST_PER_MINUTE="3000",
        CHORUS_MAX_QUERY_COST="3000",
        CHORUS_HEAD_TIMEOUT_S="1",
    ) as server:
        yield server


def playlist(api: Api) -> str:
    created = api.data(
        'mutation { createPlaylist(input: {operationId: "c", title: "Costs", visibility: PUBLIC})'
        " { playlist { id } } }"
    )
    return str(created["createPlaylist"]["playlist"]["id"])


async def test_a_subscription_over_the_cost_limit_is_refused(
    server: ChorusServer, api: Api
) -> None:
    fields = " ".join(f"a{i}: {CHANGES}" for i in range(6))  # 6 x 10,101 > 10,000
    item = f"... on FeedItem {{ version playlist {{ {fields} }} }}"
    query = f"subscription {{ feedEvents {{ {item} }} }}"
    async with socket(server, api.token("alice")) as ws:
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
        message = await receive(ws)
    assert (message["id"], message["type"]) == ("1", "error"), message
    error = message["payload"][0]
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert "the query costs" in error["message"]


async def test_a_subscription_spends_the_query_budget_as_it_starts(
    budgeted: ChorusServer,
) -> None:
    """``CHORUS_QUERY_COST_PER_MINUTE`` holds on a socket too: each subscription is charged
    its cost once, as it starts; over what is left it is refused ``RATE_LIMITED``. Before,
    only the cost limit applied, and a spent budget let any number of them run."""
    api = Api(budgeted)
    pages = " ".join(
        f"e{i}: entries(first: 100) {{ edges {{ node {{ id media {{ title }} }} }} }}"
        for i in range(7)
    )  # ~2,100 of the 3,000 a minute
    query = (
        f"subscription {{ feedEvents {{ ... on FeedItem {{ version playlist {{ {pages} }} }} }} }}"
    )
    async with socket(budgeted, api.token("dora")) as ws:
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
        with pytest.raises(TimeoutError):  # running: nothing to send until a version comes
            await asyncio.wait_for(ws.recv(), 1)
        await ws.send(json.dumps({"id": "2", "type": "subscribe", "payload": {"query": query}}))
        message = await receive(ws)
    assert (message["id"], message["type"]) == ("2", "error"), message
    error = message["payload"][0]
    assert error["extensions"]["code"] == "RATE_LIMITED", error
    assert error["extensions"]["retryAfterMs"] > 0
    api.http.close()


def test_an_input_object_of_many_unknown_fields_is_refused_at_once(api: Api) -> None:
    literal = " ".join(f"k{i}: 1" for i in range(1600))
    started = time.monotonic()
    body = api.gql(f"mutation {{ follow(input: {{{literal}}}) {{ changed }} }}", user=None)
    assert time.monotonic() - started < 2  # 1,600 of them took 16 s of validation
    assert body["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert "1600 fields; the limit is 64" in body["errors"][0]["message"]
    assert len(json.dumps(body)) < 1000  # not 1.8 MB of "did you mean"
    through_variables = api.gql(
        "mutation($i: FollowInput!) { follow(input: $i) { changed } }",
        user=None,
        # Just under the body's bound of 20,000 JSON values (test_hostile_input.py).
        i={f"k{i}": 1 for i in range(19_000)},
    )
    assert "19000 fields; the limit is 64" in through_variables["errors"][0]["message"]
    # A document kept once it passed (its shape is not walked again) still has
    # each request's variables checked.
    kept = "mutation Kept($i: FollowInput!) { follow(input: $i) { changed } }"
    assert "data" in api.gql(kept, user="alice", i={"kind": "USER", "targetId": "bob"})
    again = api.gql(kept, user="alice", i={f"k{i}": 1 for i in range(65)})
    assert again["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert "65 fields; the limit is 64" in again["errors"][0]["message"]


def test_a_variables_default_page_size_is_costed_as_the_default(api: Api) -> None:
    query = (
        "query($n: Int = 100) { viewer { playlists(first: $n) { edges { node {"
        " entries(first: $n) { edges { node { id media { title } } } } } } } } }"
    )
    by_default = api.gql(query)
    sent = api.gql(query, n=100)
    assert by_default["errors"] == sent["errors"]
    assert by_default["errors"][0]["message"].startswith("the query costs 30302")


def test_a_variable_sent_as_null_is_costed_as_the_page_it_runs(api: Api) -> None:
    """``{"n": null}`` for ``$n: Int = 1`` runs pages of the default size (50): costed at
    its default of 1 it slipped past the limit (a fresh user's 3 s, 900 KB answer)."""
    query = (
        "query($n: Int = 1) { viewer { playlists(first: $n) { edges { node {"
        " entries(first: $n) { edges { node { addedBy { playlists(first: $n)"
        " { edges { node { title } } } } } } } } } } } }"
    )
    assert "errors" not in api.gql(query)  # one of each: cheap
    refused = api.gql(query, n=None)
    assert "data" not in refused
    assert refused["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert refused["errors"][0]["message"] == api.gql(query, n=50)["errors"][0]["message"]


def test_variables_that_do_not_coerce_spend_no_budget(budgeted: ChorusServer) -> None:
    """Nothing runs when the variables do not coerce: ``BAD_USER_INPUT``, whatever the
    cost they were counted at, and the budget is not charged for it."""
    api = Api(budgeted)
    query = "query($n: Int) { viewer { playlists(first: $n) { edges { node { id } } } } }"
    report = api.gql(query, n=1)["extensions"]["cost"]["throttleStatus"]
    for _ in range(3):
        bad = api.gql(query, n="x")
        assert [e["extensions"]["code"] for e in bad["errors"]] == ["BAD_USER_INPUT"]
        assert "throttleStatus" not in bad["extensions"]["cost"]
    after = api.gql(query, n=1)["extensions"]["cost"]["throttleStatus"]
    # Each good read charged 4; the bad ones nothing (the bucket refills meanwhile).
    assert after["currentlyAvailable"] >= report["currentlyAvailable"] - 4
    api.http.close()


def test_a_mutation_payloads_read_spends_the_query_budget(budgeted: ChorusServer) -> None:
    api = Api(budgeted)
    pid = playlist(api)
    pages = " ".join(
        f"e{i}: entries(first: 100) {{ edges {{ node {{ id media {{ title }} }} }} }}"
        for i in range(8)
    )
    mutation = (
        "mutation($i: AddEntriesInput!) { addEntries(input: $i) { version replayed"
        f" userErrors {{ code }} playlist {{ {pages} }} }} }}"
    )
    edit = {
        "playlistId": pid,
        "operationId": "e1",
        "baseVersion": 0,
        "mediaIds": ["chinook:track:1"],
    }
    first = api.gql(mutation, i=edit)  # cost ~2,400 of the 3,000 a minute
    assert first["data"]["addEntries"]["version"] == 1
    assert first["data"]["addEntries"]["playlist"] is not None
    again = api.gql(mutation, i=edit)  # a retry: answered, but its read is over the budget
    assert again["data"]["addEntries"]["replayed"] is True
    assert again["data"]["addEntries"]["version"] == 1
    assert again["data"]["addEntries"]["playlist"] is None
    assert [e["extensions"]["code"] for e in again["errors"]] == ["RATE_LIMITED"]
    api.http.close()


async def test_a_socket_without_connection_init_is_closed_after_the_head_timeout(
    budgeted: ChorusServer,
) -> None:
    started = time.monotonic()
    async with connect(ws_url(budgeted), subprotocols=[PROTOCOL]) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4408
    assert time.monotonic() - started < 5
