"""JWKSVerifier against a JWKS document the test serves itself (tests/jwks_server.py).

The clock of the key set is the test's: the cache and the refetch interval
pass when the test says, not after real minutes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator

import jwt
import pytest

from chorus.auth import ClaimRules, InvalidToken, mint_token
from chorus.jwks import JWKSKeys, JWKSVerifier
from tests.jwks_server import AUDIENCE, ISSUER, JWKSServer, ProviderKey

RULES = ClaimRules("sub", ISSUER, AUDIENCE)
RSA = ProviderKey.make("rsa-1")
EC = ProviderKey.make("ec-1", "ES256")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def provider() -> Iterator[JWKSServer]:
    server = JWKSServer(RSA, EC)
    yield server
    server.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def verifier(url: str, clock: Clock, rules: ClaimRules = RULES) -> JWKSVerifier:
    keys = JWKSKeys(url, cache_s=300, refetch_interval_s=30, timeout_s=2, clock=clock)
    return JWKSVerifier(keys, frozenset({"RS256", "ES256"}), rules)


@pytest.mark.parametrize("key", [RSA, EC], ids=["RS256", "ES256"])
async def test_rs256_and_es256_tokens_are_accepted(
    provider: JWKSServer, clock: Clock, key: ProviderKey
) -> None:
    tokens = verifier(provider.url, clock)
    identity = await tokens.identify(key.token("alice"))
    assert identity.user_id == "alice"
    assert provider.fetches == 1


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"iss": "https://other.example/"}, r"issuer \(iss\) must be"),
        ({"iss": None}, r"issuer \(iss\) must be"),
        ({"aud": "another-api"}, r"audience \(aud\) must include chorus-api"),
        ({"aud": None}, r"audience \(aud\) must include"),
        ({"aud": ["x", 5]}, r"audience \(aud\) must include"),
        ({"sub": "alice smith"}, r"subject \(sub\) is not a valid user id"),
        ({"sub": 7}, r"subject \(sub\)"),
        ({"exp": int(time.time()) - 5}, "expired"),
    ],
)
async def test_wrong_claims_are_refused(
    provider: JWKSServer, clock: Clock, claims: dict[str, object], reason: str
) -> None:
    with pytest.raises(InvalidToken, match=reason):
        await verifier(provider.url, clock).identify(RSA.token(**claims))


async def test_an_audience_list_holding_ours_is_accepted(
    provider: JWKSServer, clock: Clock
) -> None:
    token = RSA.token(aud=["billing", AUDIENCE])
    assert (await verifier(provider.url, clock).identify(token)).user_id == "alice"


async def test_the_user_claim_is_a_setting(provider: JWKSServer, clock: Clock) -> None:
    tokens = verifier(provider.url, clock, ClaimRules("email", ISSUER, AUDIENCE))
    assert (await tokens.identify(RSA.token("opaque-id", email="bo@x.test"))).user_id == "bo@x.test"
    with pytest.raises(InvalidToken, match=r"user claim \(email\) is not a valid user id"):
        await tokens.identify(RSA.token("opaque-id"))


async def test_a_new_key_is_found_and_a_removed_key_refused_after_the_cache(
    provider: JWKSServer, clock: Clock
) -> None:
    tokens = verifier(provider.url, clock)
    old_token = RSA.token("alice")
    assert (await tokens.identify(old_token)).user_id == "alice"
    new = ProviderKey.make("rsa-2")
    provider.keys = [new, EC]  # the provider rotates: rsa-1 out, rsa-2 in
    clock.now += 31  # past the refetch interval: an unknown kid refetches
    assert (await tokens.identify(new.token("bob"))).user_id == "bob"
    assert provider.fetches == 2
    # The old token's identity was kept, but not past a current set without its key.
    with pytest.raises(InvalidToken, match=r"key id \(kid\) is not one"):
        await tokens.identify(old_token)


async def test_a_kept_identity_ends_when_the_cache_refresh_drops_its_key(
    provider: JWKSServer, clock: Clock
) -> None:
    tokens = verifier(provider.url, clock)
    token = RSA.token("alice")
    await tokens.identify(token)
    await tokens.identify(token)
    assert provider.fetches == 1  # kept: no fetch, no signature check
    provider.keys = [EC]
    clock.now += 301  # the cached set is stale: the next use refetches
    with pytest.raises(InvalidToken, match=r"key id \(kid\) is not one"):
        await tokens.identify(token)
    assert provider.fetches == 2


async def test_a_flood_of_unknown_kids_fetches_at_most_once_per_interval(
    provider: JWKSServer, clock: Clock
) -> None:
    tokens = verifier(provider.url, clock)
    await tokens.identify(RSA.token())
    for n in range(200):
        stranger = ProviderKey(f"random-{n}", "RS256", RSA.private)
        with pytest.raises(InvalidToken, match=r"key id \(kid\) is not one"):
            await tokens.identify(stranger.token())
    assert provider.fetches == 1  # the set was fetched within the interval: none refetches
    clock.now += 31
    floods = [ProviderKey(f"again-{n}", "RS256", RSA.private).token() for n in range(50)]
    outcomes = await asyncio.gather(*(tokens.identify(t) for t in floods), return_exceptions=True)
    assert all(isinstance(o, InvalidToken) for o in outcomes)
    assert provider.fetches == 2  # concurrent ones share one fetch, then the interval holds


async def test_a_jwks_url_that_is_down_refuses_with_the_reason(clock: Clock) -> None:
    server = JWKSServer(RSA)
    url = server.url
    server.close()
    tokens = verifier(url, clock)
    for _ in range(20):
        with pytest.raises(InvalidToken, match=r"identity provider's keys cannot be fetched"):
            await tokens.identify(RSA.token())
    assert tokens.keys.fetches == 1  # down is not hammered either
    with pytest.raises(RuntimeError, match="cannot fetch"):
        await tokens.keys.ensure()


async def test_keys_held_outlive_an_outage(clock: Clock) -> None:
    server = JWKSServer(RSA)
    tokens = verifier(server.url, clock)
    await tokens.identify(RSA.token("alice"))
    server.close()
    clock.now += 301  # stale: the next use tries a refetch, which fails
    assert (await tokens.identify(RSA.token("bob"))).user_id == "bob"
    assert tokens.keys.fetches == 2
    await tokens.keys.ensure()  # /readyz: keys are held


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, object], claims: dict[str, object], signature: bytes) -> str:
    parts = [json.dumps(header).encode(), json.dumps(claims).encode()]
    return ".".join([*(_b64(p) for p in parts), _b64(signature)])


async def test_hs256_signed_with_the_public_key_is_refused(
    provider: JWKSServer, clock: Clock
) -> None:
    # The algorithm-confusion attack: the public key (in the JWKS) used as an HMAC secret.
    claims = {"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60}
    pem = RSA.public_pem()
    header = {"alg": "HS256", "kid": RSA.kid, "typ": "JWT"}
    signing_input = ".".join(_b64(json.dumps(p).encode()) for p in (header, claims)).encode()
    hmac = jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA256)
    forged = _unsigned(header, claims, hmac.sign(signing_input, pem))
    jwk_forged = _unsigned(header, claims, hmac.sign(signing_input, json.dumps(RSA.jwk()).encode()))
    tokens = verifier(provider.url, clock)
    for token in (forged, jwk_forged):
        with pytest.raises(InvalidToken, match=r"signed by the identity provider \(ES256, RS256\)"):
            await tokens.identify(token)


@pytest.mark.parametrize("alg", ["none", "HS256", "RS512", ""])
async def test_other_algorithms_are_refused(provider: JWKSServer, clock: Clock, alg: str) -> None:
    claims = {"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60}
    token = _unsigned({"alg": alg, "kid": RSA.kid}, claims, b"")
    with pytest.raises(InvalidToken, match="signed by the identity provider"):
        await verifier(provider.url, clock).identify(token)
    assert provider.fetches == 0  # refused before any key is looked up


async def test_a_local_hs256_token_is_refused(provider: JWKSServer, clock: Clock) -> None:
    token = mint_token("s" * 40, "alice", rules=RULES)
    with pytest.raises(InvalidToken, match="signed by the identity provider"):
        await verifier(provider.url, clock).identify(token)


async def test_a_key_under_another_algorithm_is_refused(provider: JWKSServer, clock: Clock) -> None:
    # The EC key's kid on a token whose header says RS256 (signed with the RSA key).
    token = jwt.encode(
        {"sub": "m", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60},
        RSA.private,
        algorithm="RS256",
        headers={"kid": EC.kid},
    )
    with pytest.raises(InvalidToken, match=r"key \(ec-1\) is for ES256, not RS256"):
        await verifier(provider.url, clock).identify(token)


async def test_a_signature_of_another_key_is_refused(provider: JWKSServer, clock: Clock) -> None:
    impostor = ProviderKey("rsa-1", "RS256", ProviderKey.make("x").private)
    with pytest.raises(InvalidToken, match="signature is not valid"):
        await verifier(provider.url, clock).identify(impostor.token())


async def test_a_token_without_kid_is_refused(provider: JWKSServer, clock: Clock) -> None:
    claims = {"sub": "a", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60}
    token = jwt.encode(claims, RSA.private, algorithm="RS256")
    with pytest.raises(InvalidToken, match=r"no key id \(kid\)"):
        await verifier(provider.url, clock).identify(token)
