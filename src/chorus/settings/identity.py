"""Settings of identity: which tokens are trusted (docs/identity.md).

Part of :class:`chorus.settings.Settings`. Unset ``jwks_url``: HS256 tokens
signed with ``CHORUS_JWT_SECRET`` (local use). Set: only the identity
provider's tokens (``jwt_algorithms``), which must carry ``jwt_issuer`` and
``jwt_audience``; HS256 tokens are then refused.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from chorus.jwks import ASYMMETRIC_ALGORITHMS

_CLAIM_NAME = re.compile(r"[A-Za-z0-9_:./-]{1,64}")


class IdentitySettings(BaseModel):
    """The identity provider's JWKS and the claims every token must hold."""

    model_config = ConfigDict(frozen=True)

    jwks_url: str | None = Field(
        None,
        description="The identity provider's JWKS URL (http or https); set: only its "
        "tokens are accepted (needs jwt_issuer and jwt_audience); unset: HS256.",
    )
    jwt_issuer: str | None = Field(None, description="The iss every token must carry.")
    jwt_audience: str | None = Field(
        None, description="A value the aud of every token must be or hold."
    )
    jwt_user_claim: str = Field("sub", description="The claim that holds the user id.")
    jwt_algorithms: str = Field(
        "RS256,ES256", description="Comma-separated algorithms accepted with jwks_url."
    )
    jwks_cache_s: float = Field(
        300.0, gt=0, le=86_400, description="How long a fetched key set is used (seconds)."
    )
    jwks_refetch_interval_s: float = Field(
        30.0,
        ge=1,
        le=3_600,
        description="Least time between two JWKS fetches, an unknown kid's included (seconds).",
    )
    jwks_timeout_ms: int = Field(5_000, ge=1, le=60_000, description="One JWKS fetch (ms).")

    @field_validator("jwks_url")
    @classmethod
    def _jwks_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme, _, rest = value.partition("://")
        if scheme.lower() not in ("http", "https") or not rest.split("/", 1)[0]:
            raise ValueError("use https://host/path (the identity provider's JWKS document)")
        return value

    @field_validator("jwt_issuer", "jwt_audience")
    @classmethod
    def _claim_value(cls, value: str | None) -> str | None:
        if value is not None and (not value or value != value.strip() or not value.isprintable()):
            raise ValueError("must be non-empty printable text without blanks around it")
        return value

    @field_validator("jwt_user_claim")
    @classmethod
    def _user_claim(cls, value: str) -> str:
        if not _CLAIM_NAME.fullmatch(value):
            raise ValueError("a claim name is 1–64 letters, digits or _:./-")
        return value

    @field_validator("jwt_algorithms")
    @classmethod
    def _algorithms(cls, value: str) -> str:
        names = [name.strip() for name in value.split(",") if name.strip()]
        unknown = sorted(set(names) - ASYMMETRIC_ALGORITHMS)
        if not names or unknown:
            raise ValueError(
                f"name some of {', '.join(sorted(ASYMMETRIC_ALGORITHMS))}"
                + (f" (not {', '.join(unknown)})" if unknown else "")
            )
        return ",".join(names)

    @property
    def jwt_algorithm_set(self) -> frozenset[str]:
        return frozenset(self.jwt_algorithms.split(","))
