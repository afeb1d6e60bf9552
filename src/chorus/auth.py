"""Bearer tokens: JWTs whose ``sub`` (or the claim ``CHORUS_JWT_USER_CLAIM`` names) is the user id.

Two kinds of key, never both (docs/identity.md): HS256 with the
local secret when ``CHORUS_JWKS_URL`` is unset, else only the identity
provider's RS256/ES256 keys (:mod:`chorus.jwks`). Here: HS256 and the claim
checks both kinds share (:class:`ClaimRules`, :func:`check_claims`).

Tokens must carry the user claim and ``exp``; expired tokens, a wrong signature and
any algorithm other than HS256 (``alg: none`` included) are rejected. Any
valid ``sub`` is a user: there is no user table. PyJWT checks the signature;
:func:`verify` checks every claim itself, so that a token holding anything at
all (claims of the wrong type, a header that is not an object, bytes that are
not UTF-8) is an :class:`InvalidToken` and never a server error.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt

from chorus.domain.limits import MAX_ID_LENGTH
from chorus.domain.validation import is_user_id

ALGORITHM = "HS256"
MIN_SECRET_LENGTH = 32
DEFAULT_TTL = timedelta(days=30)
MAX_TOKEN_LENGTH = 4096
"""Longest bearer token accepted (characters); a Chorus token is under 200."""
MAX_TTL = timedelta(days=366)
"""Longest lifetime ``chorus token --ttl`` mints."""
MAX_NUMERIC_DATE = 253_402_300_799
"""The last second of year 9999 (seconds since 1970), the latest ``exp``, ``nbf`` or ``iat``."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"[ \t]*([A-Za-z]+)[ \t]+([^ \t]+)[ \t]*")
_JWS = jwt.PyJWS()


class InvalidToken(Exception):
    """The bearer token cannot be trusted; ``str(error)`` says why, for the client."""


class KeysUnavailable(InvalidToken):
    """The identity provider's keys cannot be fetched: the token may be fine, try again later.

    Answered ``SERVICE_UNAVAILABLE`` (a socket: close 1013), never ``UNAUTHENTICATED``:
    a client must not sign its user out for the provider's outage.
    """


class Unavailable(str):
    """A refusal reason (:meth:`ChorusGraphQL.identify`) that is an outage, not a bad token."""


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """What a token's claims must hold, besides times (settings: docs/settings.md, Identity).

    Attributes:
        user_claim: the claim that holds the user id (``CHORUS_JWT_USER_CLAIM``).
        issuer: the ``iss`` every token must carry; ``None``: ``iss`` is ignored.
        audience: a value ``aud`` must be or hold; ``None``: a token with any ``aud``
            is refused (it was made for another service).
    """

    user_claim: str = "sub"
    issuer: str | None = None
    audience: str | None = None


def check_user_id(user_id: str) -> str:
    """``user_id`` if it is 1–``MAX_ID_LENGTH`` printable characters without white space, NFKC.

    Raises:
        ValueError: otherwise.
    """
    if not is_user_id(user_id, MAX_ID_LENGTH):
        raise ValueError(
            f"a user id is 1–{MAX_ID_LENGTH} printable characters without spaces (Unicode NFKC)"
        )
    return user_id


def mint_token(
    secret: str,
    user_id: str,
    *,
    ttl: timedelta = DEFAULT_TTL,
    rules: ClaimRules | None = None,
) -> str:
    """An HS256 token for ``user_id`` valid for ``ttl``, carrying what ``rules`` require.

    Raises:
        ValueError: a malformed user id.
    """
    rules = rules or ClaimRules()
    now = datetime.now(UTC)
    user = check_user_id(user_id)
    claims: dict[str, object] = {"sub": user, rules.user_claim: user, "iat": now, "exp": now + ttl}
    if rules.issuer is not None:
        claims["iss"] = rules.issuer
    if rules.audience is not None:
        claims["aud"] = rules.audience
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a valid token speaks for, and until when (UTC)."""

    user_id: str
    expires_at: datetime


def verify(
    secret: str, token: str, *, now: datetime | None = None, rules: ClaimRules | None = None
) -> Identity:
    """The identity of a valid token, whatever its header and claims hold.

    PyJWT checks only the form and the signature (HS256); every claim Chorus
    relies on is checked here, its type and its range, so that no value in a
    token raises anything but :class:`InvalidToken`:

    * the token: at most :data:`MAX_TOKEN_LENGTH` characters of base64url
      and two dots (a compact JWS);
    * ``sub`` (or ``rules.user_claim``): a user id (:func:`check_user_id`);
    * ``exp`` (required), ``nbf`` and ``iat`` (optional): NumericDates, JSON
      numbers (not booleans) of seconds since 1970 between 0 and the end of
      year 9999; ``exp`` must be after ``now``, ``nbf`` and ``iat`` not after it;
    * ``iss`` and ``aud``: as :class:`ClaimRules` says (by default ``aud``
      absent: a token naming an audience was made for another service);
    * the header and the claims: JSON whose objects name each key once (a
      signed ``{"sub": "bob", "sub": "alice"}`` must not be read as either;
      RFC 7515 §4 lets a parser refuse it).

    Other claims and header fields (``kid``, ``typ``, nested values) are ignored.

    Args:
        secret: the HS256 key.
        token: the compact token, without ``Bearer``.
        now: the time to check against (UTC; default: the clock).
        rules: the user claim, issuer and audience (default: ``sub``, neither).

    Raises:
        InvalidToken: expired, not yet valid, badly signed, wrong algorithm,
            malformed, or without a usable ``sub``; its message says which.
    """
    check_form(token)
    try:
        payload = _JWS.decode(token, secret, algorithms=[ALGORITHM])
    except jwt.InvalidSignatureError:
        raise InvalidToken("the token's signature is not valid") from None
    except jwt.InvalidAlgorithmError:
        raise InvalidToken(f"the token must be signed with {ALGORITHM}") from None
    except (jwt.PyJWTError, ValueError, TypeError, RecursionError):
        # PyJWT reads the header before it checks the signature: whatever an
        # unsigned header holds must end here, never as a server error.
        raise InvalidToken("the token is malformed") from None
    return check_claims(payload, rules or ClaimRules(), now)


def check_form(token: str) -> None:
    """Raise :class:`InvalidToken` unless ``token`` is a short compact JWS.

    Its header must not name a key twice (what else it holds is the
    signature check's to judge).
    """
    if len(token) > MAX_TOKEN_LENGTH:
        raise InvalidToken(f"the token is longer than {MAX_TOKEN_LENGTH} characters")
    if not _COMPACT_JWS.fullmatch(token):
        raise InvalidToken("the token is malformed (not three base64url parts)")
    _refuse_repeated_keys(_header_bytes(token), "header")


def _header_bytes(token: str) -> bytes:
    encoded = token.split(".", 1)[0]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except ValueError:  # binascii.Error: a length no base64 has
        raise InvalidToken("the token is malformed") from None


class _RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _RepeatedKey
    return found


def _refuse_repeated_keys(document: bytes, part: str) -> None:
    """Raises :class:`InvalidToken` when ``document`` is JSON naming a key twice in one object.

    Anything else (not JSON, too deep) is left to the checks that follow. The
    cost is bounded: the token is at most :data:`MAX_TOKEN_LENGTH` characters.
    """
    try:
        json.loads(document, object_pairs_hook=_unique_keys)
    except _RepeatedKey:
        raise InvalidToken(f"the token is malformed (a key appears twice in its {part})") from None
    except (ValueError, RecursionError):
        return


def check_claims(payload: bytes, rules: ClaimRules, now: datetime | None = None) -> Identity:
    """The identity in a verified token's ``payload`` (its JSON bytes), claims checked.

    Raises:
        InvalidToken: see :func:`verify`.
    """
    _refuse_repeated_keys(payload, "claims")
    try:
        claims = json.loads(payload)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise InvalidToken("the token is malformed (its claims are not JSON)") from None
    if not isinstance(claims, dict):
        raise InvalidToken("the token is malformed (its claims are not a JSON object)")
    _check_issuer_audience(claims, rules)
    user = _subject(claims, rules.user_claim)
    return Identity(user, _check_times(claims, now or datetime.now(UTC)))


def _check_issuer_audience(claims: dict[str, object], rules: ClaimRules) -> None:
    if rules.issuer is not None and claims.get("iss") != rules.issuer:
        raise InvalidToken(f"the token's issuer (iss) must be {rules.issuer}")
    aud = claims.get("aud")
    if rules.audience is None:
        if "aud" in claims:
            raise InvalidToken("the token names an audience: it was made for another service")
        return
    # RFC 7519 §4.1.3: one string, or an array of strings.
    audiences = aud if isinstance(aud, list) else [aud]
    if rules.audience not in [a for a in audiences if isinstance(a, str)]:
        raise InvalidToken(f"the token's audience (aud) must include {rules.audience}")


def _subject(claims: dict[str, object], name: str) -> str:
    sub = claims.get(name)
    try:
        return check_user_id(sub if isinstance(sub, str) else "")
    except ValueError:
        what = "subject" if name == "sub" else "user claim"
        raise InvalidToken(f"the token's {what} ({name}) is not a valid user id") from None


def _numeric_date(claims: dict[str, object], name: str) -> datetime | None:
    """Claim ``name`` as a UTC time, ``None`` when absent.

    Raises:
        InvalidToken: not a number (booleans are not), or outside 0 to
            :data:`MAX_NUMERIC_DATE` (NaN, infinities and huge integers included).
    """
    if name not in claims:
        return None
    value = claims[name]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_NUMERIC_DATE  # False for NaN
    ):
        raise InvalidToken(
            f"the token is malformed ({name} must be a number of seconds since 1970)"
        )
    return _EPOCH + timedelta(seconds=value)


def _check_times(claims: dict[str, object], now: datetime) -> datetime:
    """``exp`` as a UTC time, after checking ``exp``, ``nbf`` and ``iat`` against ``now``."""
    expires_at = _numeric_date(claims, "exp")
    not_before = _numeric_date(claims, "nbf")
    issued_at = _numeric_date(claims, "iat")
    if expires_at is None:
        raise InvalidToken("the token has no expiry (exp)")
    if expires_at <= now:
        raise InvalidToken("the token has expired")
    if (not_before is not None and not_before > now) or (issued_at is not None and issued_at > now):
        raise InvalidToken("the token is not valid yet (nbf/iat in the future)")
    return expires_at


class TokenVerifier:
    """:func:`verify` with the claims of valid tokens kept until they expire.

    A token is verified once (signature, algorithm, claims); later requests
    with the same token reuse its identity until its ``exp``. Invalid
    tokens are not kept: each is checked again.

    Args:
        secret: the HS256 secret.
        rules: the claims every token must hold.
        max_tokens: valid tokens remembered (least recently used forgotten).
    """

    def __init__(
        self, secret: str, *, rules: ClaimRules | None = None, max_tokens: int = 10_000
    ) -> None:
        self._secret = secret
        self._rules = rules or ClaimRules()
        self._max = max_tokens
        self._seen: OrderedDict[str, tuple[Identity, float]] = OrderedDict()

    def verify(self, token: str) -> Identity:
        """The identity of a valid token; see :func:`verify`.

        Raises:
            InvalidToken: as :func:`verify`, including a kept token that expired since.
        """
        seen = self._seen.get(token)
        if seen is not None:
            identity, expires = seen
            if time.time() < expires:
                self._seen.move_to_end(token)
                return identity
            del self._seen[token]
        identity = verify(self._secret, token, rules=self._rules)
        self._seen[token] = (identity, identity.expires_at.timestamp())
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return identity

    async def identify(self, token: str) -> Identity:
        """:meth:`verify`, awaitable like :meth:`chorus.jwks.JWKSVerifier.identify`."""
        return self.verify(token)


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, if any.

    The scheme in any case; any run of spaces and tabs between it and the
    token, and around both, is ignored (HTTP and the ``connection_init``
    payload alike).

    Raises:
        InvalidToken: the header is present but not a bearer token.
    """
    if header is None:
        return None
    if header.startswith("Bearer "):  # the usual spelling, read without the pattern
        token = header[7:]
        if token and " " not in token and "\t" not in token:
            return token
    match = _BEARER.fullmatch(header)
    if match is None or match[1].lower() != "bearer":
        raise InvalidToken("use 'Authorization: Bearer <token>'")
    return match[2]


class SecretUnusable(Exception):
    """The secret file or its directory cannot be used; ``str(error)`` says why, in one line."""


def load_or_create_secret(data_dir: Path, name: str = "jwt-secret") -> str:
    """The secret kept in ``data_dir/name``, generated (mode 600) on first use.

    A kept secret is held to the rule of ``CHORUS_JWT_SECRET``: at least
    :data:`MIN_SECRET_LENGTH` characters once surrounding white space is
    stripped (a 5-character key would sign tokens anyone can forge).

    Raises:
        SecretUnusable: the file is shorter than that (empty included), is not
            UTF-8 text, not a regular file of ≤ 4,096 bytes, or unreadable; or
            ``data_dir`` is not a directory, has no parent, or is not writable.
    """
    path = data_dir / name
    if data_dir.exists() and not data_dir.is_dir():
        raise SecretUnusable(f"the data directory {data_dir} is not a directory")
    try:
        if path.exists():
            if not path.is_file() or path.stat().st_size > 4096:  # a FIFO, /dev/zero: no end
                raise SecretUnusable(f"{path} is not a file of at most 4096 bytes")
            secret = path.read_text().strip()
        else:
            secret = secrets.token_urlsafe(48)
            data_dir.mkdir(exist_ok=True)  # no parents: a mistyped dir would get a new secret
            path.touch(mode=0o600)
            path.write_text(secret + "\n")
    except UnicodeDecodeError:
        hint = f"put a secret of at least {MIN_SECRET_LENGTH} characters in it, or delete it"
        raise SecretUnusable(f"{path} is not text: {hint}") from None
    except OSError as error:
        where = error.filename or path
        raise SecretUnusable(f"cannot use {where}: {error.strerror or error}") from None
    if len(secret) < MIN_SECRET_LENGTH:
        raise SecretUnusable(
            f"{path} is too short: {len(secret)} characters, a secret needs at least "
            f"{MIN_SECRET_LENGTH} (delete the file to have one generated)"
        )
    return secret
