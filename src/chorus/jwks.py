"""Tokens of an identity provider: RS256/ES256 JWTs checked with the keys of its JWKS URL.

:class:`JWKSKeys` holds the provider's key set, fetched with PyJWT's
:class:`~jwt.PyJWKClient` in a worker thread (it speaks blocking urllib; the
event loop never waits on the network). The rules (docs/identity.md, Identity providers):

* Keys are kept ``CHORUS_JWKS_CACHE_S``; the first token verified after that
  refetches them, so a key the provider removed stops verifying then, and a
  new one is found.
* A token whose ``kid`` is not held refetches the set, but never more often
  than once per ``CHORUS_JWKS_REFETCH_INTERVAL_S``: a flood of random ``kid``
  values costs at most one fetch per interval. Every fetch, scheduled or not,
  is held to that interval, so a provider that is down is not hammered either.
* Concurrent requests share one fetch.
* A failed fetch keeps the keys held (a provider's short outage does not sign
  everyone out); with no keys held, tokens are refused with the reason.

:class:`JWKSVerifier` checks a token against those keys and
:func:`chorus.auth.check_claims`, and keeps verified identities like
:class:`chorus.auth.TokenVerifier`, but only while the key that signed them
is still in a current key set.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt
from jwt import PyJWK, PyJWKClient

from chorus.auth import (
    ClaimRules,
    Identity,
    InvalidToken,
    KeysUnavailable,
    check_claims,
    check_form,
)

ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
)
"""What ``CHORUS_JWT_ALGORITHMS`` may name: never HS* (its key would be public), never ``none``."""

MAX_KID_LENGTH = 256
_JWS = jwt.PyJWS()


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One key of the set: PyJWT's key and the JWK it was read from."""

    jwk: PyJWK
    data: dict[str, Any]


@dataclass(slots=True)
class _Held:
    keys: dict[str, SigningKey] = field(default_factory=dict)
    fetched_at: float | None = None  # monotonic; None: never fetched
    error: str | None = None  # why the last fetch failed; None when it worked


class JWKSKeys:
    """The identity provider's signing keys, by ``kid``.

    Args:
        url: the JWKS document's URL (``CHORUS_JWKS_URL``).
        cache_s: how long a fetched set is used before the next use refetches it.
        refetch_interval_s: the least time between two fetches.
        timeout_s: one fetch's HTTP timeout.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        url: str,
        *,
        cache_s: float = 300.0,
        refetch_interval_s: float = 30.0,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._client = PyJWKClient(
            url,
            cache_keys=False,
            cache_jwk_set=False,
            timeout=timeout_s,
            headers={"User-Agent": "chorus"},
        )
        self._cache_s = cache_s
        self._interval_s = refetch_interval_s
        self._now = clock
        self._held = _Held()
        self._attempted_at: float | None = None
        self._fetching: asyncio.Future[None] | None = None
        self.fetches = 0
        """Fetches started (for tests and /metrics-minded readers)."""

    def holds(self, key: SigningKey) -> bool:
        """Whether ``key`` is still, unchanged, in a current set.

        A set past ``cache_s`` is not current: a kept identity is then checked
        again, which refetches.
        """
        held = self._held
        if held.fetched_at is None or self._now() - held.fetched_at >= self._cache_s:
            return False
        now_held = held.keys.get(str(key.data["kid"]))
        return now_held is not None and now_held.data == key.data

    async def key(self, kid: str) -> SigningKey:
        """The key of ``kid``, refetching the set when it is stale or lacks it.

        Raises:
            InvalidToken: no such key after a refetch (or none allowed yet), or
                no key set could be fetched; the message says which.
        """
        held = self._held
        stale = held.fetched_at is None or self._now() - held.fetched_at >= self._cache_s
        if stale or kid not in held.keys:
            await self._refetch()
        held = self._held
        found = held.keys.get(kid)
        if found is not None:
            return found
        if held.fetched_at is None:
            raise KeysUnavailable(
                f"the identity provider's keys cannot be fetched ({self.url}): {held.error}"
            )
        raise InvalidToken("the token's key id (kid) is not one of the identity provider's keys")

    async def ensure(self) -> None:
        """Fetch the set if none is held (within the refetch interval); for ``/readyz``.

        Raises:
            RuntimeError: no key set is held; the message says why.
        """
        if self._held.fetched_at is None:
            await self._refetch()
        if self._held.fetched_at is None:
            raise RuntimeError(f"cannot fetch {self.url}: {self._held.error}")

    async def _refetch(self) -> None:
        if self._fetching is None:
            now = self._now()
            if self._attempted_at is not None and now - self._attempted_at < self._interval_s:
                return  # the bound that makes unknown kids cheap
            self._attempted_at = now
            self.fetches += 1
            self._fetching = asyncio.ensure_future(self._fetch())
        fetching = self._fetching
        # Shielded: a request that gives up (a timeout, a closed socket) must not
        # cancel the fetch the others wait for.
        await asyncio.shield(fetching)

    async def _fetch(self) -> None:
        try:
            data = await asyncio.to_thread(self._client.fetch_data)
            keys = _signing_keys(data)
        except (jwt.PyJWKClientError, jwt.PyJWKSetError, jwt.PyJWKError) as error:
            self._held.error = " ".join(str(error).split())[:200]
        else:
            self._held = _Held(keys, self._now())
        finally:
            self._fetching = None


def _signing_keys(data: object) -> dict[str, SigningKey]:
    """The usable signing keys of a JWKS document, by ``kid``.

    Keys without a ``kid``, for encryption (``use: enc``), of a type PyJWT
    cannot use, or symmetric (``kty: oct``) are left out.

    Raises:
        PyJWKSetError: the document is not a JWKS or holds no such key.
    """
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise jwt.PyJWKSetError("the JWKS document has no keys array")
    keys: dict[str, SigningKey] = {}
    for raw in data["keys"]:
        if not isinstance(raw, dict) or raw.get("use", "sig") != "sig":
            continue
        kid = raw.get("kid")
        if not isinstance(kid, str) or raw.get("kty") == "oct":
            continue
        try:
            keys[kid] = SigningKey(PyJWK(raw), raw)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
    if not keys:
        raise jwt.PyJWKSetError("the JWKS document holds no usable signing key with a kid")
    return keys


class JWKSVerifier:
    """Verify identity-provider tokens; verified identities kept while their key is current.

    Args:
        keys: the provider's key set.
        algorithms: the ``alg`` values accepted (a subset of :data:`ASYMMETRIC_ALGORITHMS`).
        rules: the user claim, issuer and audience every token must hold.
        max_tokens: valid tokens remembered (least recently used forgotten).
    """

    def __init__(
        self,
        keys: JWKSKeys,
        algorithms: frozenset[str],
        rules: ClaimRules,
        *,
        max_tokens: int = 10_000,
    ) -> None:
        if not algorithms or not algorithms <= ASYMMETRIC_ALGORITHMS:
            raise ValueError(f"algorithms must be some of {sorted(ASYMMETRIC_ALGORITHMS)}")
        self.keys = keys
        self._algorithms = algorithms
        self._rules = rules
        self._max = max_tokens
        self._seen: OrderedDict[str, tuple[Identity, SigningKey]] = OrderedDict()

    async def identify(self, token: str) -> Identity:
        """The identity of a valid token.

        Raises:
            InvalidToken: the form, ``alg``, ``kid``, signature or claims are
                not right, or the keys cannot be fetched; the message says which.
        """
        seen = self._seen.get(token)
        if seen is not None:
            identity, key = seen
            if time.time() < identity.expires_at.timestamp() and self.keys.holds(key):
                self._seen.move_to_end(token)
                return identity
            del self._seen[token]
        identity, key = await self._verify(token)
        self._seen[token] = (identity, key)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return identity

    async def _verify(self, token: str) -> tuple[Identity, SigningKey]:
        check_form(token)
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, ValueError, TypeError, RecursionError):
            raise InvalidToken("the token is malformed") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self._algorithms:
            # HS256 included: its "secret" would be whatever key the attacker picks,
            # such as the provider's public key (the algorithm-confusion attack).
            names = ", ".join(sorted(self._algorithms))
            raise InvalidToken(f"the token must be signed by the identity provider ({names})")
        if not isinstance(kid, str) or not 0 < len(kid) <= MAX_KID_LENGTH:
            raise InvalidToken("the token has no key id (kid) in its header")
        key = await self.keys.key(kid)
        declared = key.data.get("alg")
        if declared is not None and declared != alg:
            raise InvalidToken(f"the token's key ({kid}) is for {declared}, not {alg}")
        try:
            payload = _JWS.decode(token, key.jwk.key, algorithms=[alg])
        except jwt.InvalidSignatureError:
            raise InvalidToken("the token's signature is not valid") from None
        except (jwt.PyJWTError, ValueError, TypeError, RecursionError):
            # InvalidKeyError among them: an RSA key under an ES256 header.
            raise InvalidToken(f"the token's key ({kid}) does not fit {alg}") from None
        return check_claims(payload, self._rules), key
