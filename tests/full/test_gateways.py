"""API processes apart from WebSocket gateways (``CHORUS_SERVE_ROLE``, docs/deploying.md).

One ``chorus serve --role api`` takes the mutations, two ``--role gateway``
hold the subscriptions; every event a gateway's subscriber receives went
outbox → ``chorus relay`` → Kafka → ``chorus fanout`` → Redis pub/sub → that
gateway. Each role refuses the other's requests with 421 and says where to go.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from chorus.auth import mint_token
from chorus.graphql.roles import MISDIRECTED_CODE
from tests.deadlines import patience
from tests.e2e.conftest import Api
from tests.e2e.helpers import add, create_playlist, mutation_document, track, version
from tests.e2e.test_subscriptions import PROTOCOL, SUBSCRIPTION, close_socket, open_socket, ws_url
from tests.full.helpers import Deployment, full_deployment
from tests.servers import TEST_SECRET, TansuServer

EDITS = 12
TIMEOUT_S = patience(20.0)


@pytest.fixture(scope="module")
def deployment(
    postgres_template: str, tansu: TansuServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """One API process (``servers[0]``), two gateways and the relay and fanout between them."""
    roles = ("api", "gateway", "gateway")
    data_dir = tmp_path_factory.mktemp("gateways")
    with full_deployment(tansu, data_dir, roles, ("relay", "fanout")) as running:
        yield running


async def _subscribe(ws: ClientConnection, playlist_id: str, since: int) -> None:
    variables = {"playlistId": playlist_id, "sinceVersion": since}
    payload = {"query": SUBSCRIPTION, "variables": variables}
    await ws.send(json.dumps({"id": "events", "type": "subscribe", "payload": payload}))


async def _versions(ws: ClientConnection, count: int) -> list[int]:
    """The versions of the next ``count`` events on ``ws``, as they came."""
    versions = []
    while len(versions) < count:
        message = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        if message["type"] == "ping":
            continue
        assert message["type"] == "next", message
        event: dict[str, Any] = message["payload"]["data"]["playlistEvents"]
        assert event["__typename"] == "PlaylistChanged", event
        versions.append(event["version"])
    return versions


async def test_mutations_through_the_api_reach_every_gateway_in_order(
    deployment: Deployment,
) -> None:
    api = Api(deployment.servers[0])
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        since = version(api, playlist_id)
        token = mint_token(TEST_SECRET, "alice")
        sockets = [await open_socket(gateway, token) for gateway in deployment.servers[1:]]
        try:
            for ws in sockets:
                await _subscribe(ws, playlist_id, since)
            base = since
            for n in range(EDITS):
                base = add(api, playlist_id, [track(n + 1)], base)["version"]
            expected = list(range(since + 1, since + EDITS + 1))
            assert base == expected[-1]
            received = await asyncio.gather(*(_versions(ws, EDITS) for ws in sockets))
            assert received == [expected, expected]
        finally:
            for ws in sockets:
                await close_socket(ws)
    finally:
        api.http.close()


async def test_a_subscriber_moving_to_another_gateway_resumes_where_it_left(
    deployment: Deployment,
) -> None:
    api = Api(deployment.servers[0])
    token = mint_token(TEST_SECRET, "alice")
    try:
        playlist_id = create_playlist(api, visibility="PUBLIC")
        since = base = version(api, playlist_id)
        first = await open_socket(deployment.servers[1], token)
        try:
            await _subscribe(first, playlist_id, since)
            for n in range(EDITS // 2):
                base = add(api, playlist_id, [track(n + 1)], base)["version"]
            seen = await _versions(first, EDITS // 4)
        finally:
            await close_socket(first)
        # Committed while the client has no socket: the next gateway reads them from SQL.
        for n in range(EDITS // 2, EDITS):
            base = add(api, playlist_id, [track(n + 1)], base)["version"]
        second = await open_socket(deployment.servers[2], token)
        try:
            await _subscribe(second, playlist_id, seen[-1])
            rest = await _versions(second, since + EDITS - seen[-1])
        finally:
            await close_socket(second)
        assert seen + rest == list(range(since + 1, since + EDITS + 1))
    finally:
        api.http.close()


async def test_the_api_process_refuses_websockets(deployment: Deployment) -> None:
    url = ws_url(deployment.servers[0])
    with pytest.raises(InvalidStatus) as refused:
        await connect(url, subprotocols=[PROTOCOL], open_timeout=TIMEOUT_S)
    response = refused.value.response
    assert response.status_code == 421
    error = json.loads(response.body or b"{}")["errors"][0]
    assert error["extensions"]["code"] == MISDIRECTED_CODE
    assert "gateway" in error["message"]


def test_a_gateway_refuses_http_queries_and_mutations(deployment: Deployment) -> None:
    gateway = Api(deployment.servers[1])
    try:
        create = {"operationId": "op-gateway", "title": "Mix"}
        for body in (
            {"query": "{ __typename }"},
            {"query": mutation_document("createPlaylist"), "variables": {"input": create}},
        ):
            response = gateway.raw(body)
            assert response.status_code == 421, response.text
            error = response.json()["errors"][0]
            assert error["extensions"]["code"] == MISDIRECTED_CODE
            assert "API process" in error["message"]
    finally:
        gateway.http.close()


async def test_a_gateway_refuses_a_mutation_over_its_socket(deployment: Deployment) -> None:
    gateway = deployment.servers[2]
    ws = await open_socket(gateway, mint_token(TEST_SECRET, "alice"))
    try:
        create = {"operationId": "op-over-socket", "title": "Mix"}
        payload = {"query": mutation_document("createPlaylist"), "variables": {"input": create}}
        await ws.send(json.dumps({"id": "m", "type": "subscribe", "payload": payload}))
        message = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        assert message["type"] == "error", message
        assert message["payload"][0]["extensions"]["code"] == MISDIRECTED_CODE
    finally:
        await close_socket(ws)


def test_readyz_names_each_process_role(deployment: Deployment) -> None:
    roles = {}
    for server in deployment.servers:
        ready = httpx.get(f"{server.base_url}/readyz", timeout=TIMEOUT_S)
        assert ready.status_code == 200, ready.text
        roles[server.port] = ready.json()["role"]
    assert sorted(roles.values()) == ["api", "gateway", "gateway"]
    banner = deployment.servers[1].log.read_text()
    assert "role gateway" in banner
