"""A JWKS document served by the test itself, and tokens signed with its keys.

:class:`JWKSServer` is a tiny HTTP server on 127.0.0.1 (a thread) that
serves whatever :attr:`JWKSServer.keys` holds at ``url`` and counts the
requests; :class:`ProviderKey` is one RSA or EC key pair with its kid.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.http_stub import QuietHandler

ISSUER = "https://idp.example.test/"
AUDIENCE = "chorus-api"


@dataclass(frozen=True)
class ProviderKey:
    """A signing key of the provider: ``alg`` RS256 or ES256."""

    kid: str
    alg: str
    private: Any

    @classmethod
    def make(cls, kid: str, alg: str = "RS256") -> ProviderKey:
        if alg == "RS256":
            return cls(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))
        return cls(kid, alg, ec.generate_private_key(ec.SECP256R1()))

    def jwk(self) -> dict[str, Any]:
        algorithm = (
            jwt.algorithms.RSAAlgorithm if self.alg == "RS256" else jwt.algorithms.ECAlgorithm
        )
        data: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**data, "kid": self.kid, "use": "sig", "alg": self.alg}

    def public_pem(self) -> bytes:
        pem: bytes = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem

    def token(self, user: str = "alice", ttl_s: float = 600, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": user, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + ttl_s}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.private, algorithm=self.alg, headers={"kid": self.kid})


class JWKSServer:
    """Serves ``{"keys": [...]}`` of :attr:`keys` at :attr:`url`; :attr:`fetches` counts GETs."""

    def __init__(self, *keys: ProviderKey) -> None:
        self.keys: list[ProviderKey] = list(keys)
        self.fetches = 0
        server = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                server.fetches += 1
                self.reply(json.dumps({"keys": [k.jwk() for k in server.keys]}).encode())

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/.well-known/jwks.json"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop answering: the port refuses connections from now on."""
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()
