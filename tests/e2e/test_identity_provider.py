"""``chorus serve`` trusting an identity provider: tokens checked with its JWKS document.

The provider is the test's own (tests/jwks_server.py): an HTTP server on
127.0.0.1 serving RSA and EC public keys, whose keys the test rotates and
whose fetches it counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chorus.auth import mint_token
from tests.e2e.helpers import error_codes
from tests.e2e.raw import first_answer
from tests.jwks_server import AUDIENCE, ISSUER, JWKSServer, ProviderKey
from tests.servers import TEST_SECRET, ChorusServer

VIEWER = "{ viewer { user { id } } }"
RSA = ProviderKey.make("rsa-1")
EC = ProviderKey.make("ec-1", "ES256")
INTERVAL_S = 1.0


def _start(tmp_path_factory: pytest.TempPathFactory, url: str) -> ChorusServer:
    data_dir = tmp_path_factory.mktemp("identity-provider")
    server = ChorusServer(
        f"sqlite+aiosqlite:///{data_dir / 'chorus.db'}",
        data_dir,
        CHORUS_JWKS_URL=url,
        CHORUS_JWT_ISSUER=ISSUER,
        CHORUS_JWT_AUDIENCE=AUDIENCE,
        CHORUS_JWKS_REFETCH_INTERVAL_S=str(INTERVAL_S),
        CHORUS_JWKS_CACHE_S="2",
    )
    server.start()
    return server


@pytest.fixture(scope="module")
def provider() -> Iterator[JWKSServer]:
    server = JWKSServer(RSA, EC)
    yield server
    server.close()


@pytest.fixture(scope="module")
def chorus(
    provider: JWKSServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChorusServer]:
    server = _start(tmp_path_factory, provider.url)
    yield server
    server.stop()


def _viewer(server: ChorusServer, token: str) -> dict[str, Any]:
    response = httpx.post(
        server.url, json={"query": VIEWER}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _refused(server: ChorusServer, token: str) -> str:
    body = _viewer(server, token)
    assert error_codes(body) == ["UNAUTHENTICATED"], body
    message: str = body["errors"][0]["message"]
    return message


@pytest.mark.parametrize("key", [RSA, EC], ids=["RS256", "ES256"])
def test_provider_tokens_are_accepted(chorus: ChorusServer, key: ProviderKey) -> None:
    assert _viewer(chorus, key.token("alice"))["data"] == {"viewer": {"user": {"id": "alice"}}}


def test_wrong_issuer_or_audience_is_unauthenticated(chorus: ChorusServer) -> None:
    assert "issuer (iss) must be" in _refused(chorus, RSA.token(iss="https://evil.example/"))
    assert "audience (aud) must include" in _refused(chorus, RSA.token(aud="another"))


def test_local_hs256_tokens_are_refused(chorus: ChorusServer) -> None:
    token = mint_token(TEST_SECRET, "alice")
    assert "signed by the identity provider (ES256, RS256)" in _refused(chorus, token)
    # … and the banner does not suggest `chorus token`, which is refused here.
    banner = chorus.log.read_text()
    assert "a token:  from the identity provider (" in banner
    assert "chorus token alice" not in banner


def test_a_flood_of_unknown_kids_fetches_the_jwks_at_most_once_per_interval(
    chorus: ChorusServer, provider: JWKSServer
) -> None:
    before = provider.fetches
    started = time.monotonic()
    with httpx.Client() as client:
        for n in range(100):
            token = ProviderKey(f"random-{n}", "RS256", RSA.private).token()
            response = client.post(
                chorus.url, json={"query": VIEWER}, headers={"Authorization": f"Bearer {token}"}
            )
            assert error_codes(response.json()) == ["UNAUTHENTICATED"]
    elapsed = time.monotonic() - started
    # One fetch per interval at most (the stale set's refetch counts among them), plus one.
    assert provider.fetches - before <= int(elapsed / INTERVAL_S) + 1, (provider.fetches, elapsed)


def test_a_rotated_key_is_found_and_the_removed_one_refused(
    chorus: ChorusServer, provider: JWKSServer
) -> None:
    old = RSA.token("alice")
    assert _viewer(chorus, old)["data"] is not None
    new = ProviderKey.make("rsa-2")
    provider.keys = [new, EC]
    try:
        time.sleep(INTERVAL_S + 0.2)  # the last fetch may have been just now
        assert _viewer(chorus, new.token("bob"))["data"] == {"viewer": {"user": {"id": "bob"}}}
        # The old token's kept identity ends with the set that held its key.
        assert "key id (kid) is not one" in _refused(chorus, old)
    finally:
        provider.keys = [RSA, EC]
        time.sleep(INTERVAL_S + 0.2)  # so that the next test's rsa-1 token refetches


async def _connection_init(server: ChorusServer, token: str) -> tuple[int, str]:
    frame = json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
    code, said = await first_answer(server, frame)
    return code, json.loads(said)["type"] if code == 0 else said


async def test_a_provider_token_opens_a_websocket(chorus: ChorusServer) -> None:
    assert await _connection_init(chorus, EC.token("alice")) == (0, "connection_ack")
    code, reason = await _connection_init(chorus, RSA.token(aud="another"))
    assert code == 4403
    assert "audience (aud) must include" in reason


async def test_a_provider_that_is_down_is_unavailable_not_unauthenticated(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    provider = JWKSServer(RSA)
    url = provider.url
    provider.close()
    chorus = _start(tmp_path_factory, url)
    try:
        # Not the token's fault: a client must not sign its user out for the outage.
        body = _viewer(chorus, RSA.token())
        assert error_codes(body) == ["SERVICE_UNAVAILABLE"], body
        assert "identity provider's keys cannot be fetched" in body["errors"][0]["message"]
        code, reason = await _connection_init(chorus, RSA.token())
        assert code == 1013  # try again later: graphql-ws retries it (4403 it does not)
        assert "keys cannot be fetched" in reason
        async with httpx.AsyncClient(base_url=chorus.base_url) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 503
            jwks = ready.json()["checks"]["jwks"]
            assert jwks.startswith("down:")
            assert f"cannot fetch {url}" in jwks
            assert (await client.get("/healthz")).status_code == 200
    finally:
        chorus.stop()
