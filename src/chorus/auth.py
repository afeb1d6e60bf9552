"""Bearer tokens: HS256 JWTs whose ``sub`` is the user id (docs/semantics.md, Members and roles).

Tokens must carry ``sub`` and ``exp``; expired tokens, a wrong signature and
any algorithm other than HS256 (``alg: none`` included) are rejected. Any
valid ``sub`` is a user: there is no user table.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt

from chorus.domain.limits import MAX_ID_LENGTH
from chorus.domain.validation import is_user_id

ALGORITHM = "HS256"
MIN_SECRET_LENGTH = 32
DEFAULT_TTL = timedelta(days=30)


class InvalidToken(Exception):
    """The bearer token cannot be trusted; ``str(error)`` says why, for the client."""


def check_user_id(user_id: str) -> str:
    """``user_id`` if it is 1–``MAX_ID_LENGTH`` printable characters without white space.

    Raises:
        ValueError: otherwise.
    """
    if not is_user_id(user_id, MAX_ID_LENGTH):
        raise ValueError(f"a user id is 1–{MAX_ID_LENGTH} printable characters without spaces")
    return user_id


def mint_token(secret: str, user_id: str, *, ttl: timedelta = DEFAULT_TTL) -> str:
    """A signed token for ``user_id`` valid for ``ttl``.

    Raises:
        ValueError: a malformed user id.
    """
    now = datetime.now(UTC)
    claims = {"sub": check_user_id(user_id), "iat": now, "exp": now + ttl}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a valid token speaks for, and until when (UTC)."""

    user_id: str
    expires_at: datetime


def verify_token(secret: str, token: str) -> str:
    """The user id of a valid token; see :func:`verify`."""
    return verify(secret, token).user_id


def verify(secret: str, token: str) -> Identity:
    """The identity of a valid token.

    Raises:
        InvalidToken: expired, not yet valid, badly signed, wrong algorithm,
            malformed, or without a usable ``sub``.
    """
    try:
        claims = jwt.decode(
            token, secret, algorithms=[ALGORITHM], options={"require": ["sub", "exp"]}
        )
    except jwt.ExpiredSignatureError:
        raise InvalidToken("the token has expired") from None
    except jwt.ImmatureSignatureError:
        raise InvalidToken("the token is not valid yet (nbf/iat in the future)") from None
    except jwt.InvalidSignatureError:
        raise InvalidToken("the token's signature is not valid") from None
    except jwt.InvalidAlgorithmError:
        raise InvalidToken(f"the token must be signed with {ALGORITHM}") from None
    except jwt.PyJWTError:
        raise InvalidToken("the token is malformed") from None
    sub = claims.get("sub")
    try:
        user_id = check_user_id(sub) if isinstance(sub, str) else check_user_id("")
    except ValueError:
        raise InvalidToken("the token's subject is not a valid user id") from None
    try:  # PyJWT checked that exp is a number in the future, not that it is a date
        expires_at = datetime.fromtimestamp(claims["exp"], UTC)
    except (ValueError, OverflowError, OSError):
        raise InvalidToken("the token is malformed (exp is not a date)") from None
    return Identity(user_id, expires_at)


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, if any.

    Raises:
        InvalidToken: the header is present but not a bearer token.
    """
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidToken("use 'Authorization: Bearer <token>'")
    return token.strip()


def load_or_create_secret(data_dir: Path, name: str = "jwt-secret") -> str:
    """The secret kept in ``data_dir/name``, generated (mode 600) on first use."""
    path = data_dir / name
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(48)
    path.touch(mode=0o600)
    path.write_text(secret + "\n")
    return secret
