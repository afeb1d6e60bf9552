"""Bearer tokens: whatever a token holds, :func:`verify` answers an Identity or InvalidToken.

The tokens are signed with the right secret, so PyJWT's signature check
passes and every claim reaches Chorus's own checks: claims of any JSON type
(and JSON Python's parser allows beyond the standard: NaN, Infinity), headers
of any shape, payload bytes that are not JSON or not UTF-8.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chorus.auth import (
    _BEARER,
    MAX_NUMERIC_DATE,
    MAX_TOKEN_LENGTH,
    Identity,
    InvalidToken,
    bearer_token,
    mint_token,
    verify,
)
from chorus.domain.validation import is_user_id

SECRET = "unit-secret-" + "s" * 40
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
HEADER = {"alg": "HS256", "typ": "JWT"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def signed(header: bytes, payload: bytes, secret: str = SECRET) -> str:
    """A compact JWS of raw header and payload bytes, HMAC-SHA256 signed by hand."""
    signing_input = f"{_b64(header)}.{_b64(payload)}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def signed_claims(claims: Any, header: Any = HEADER) -> str:
    return signed(json.dumps(header).encode(), json.dumps(claims).encode())


def outcome(token: str) -> Identity | str:
    """The identity, or the InvalidToken's message; anything else raised fails the test."""
    try:
        return verify(SECRET, token, now=NOW)
    except InvalidToken as error:
        return str(error)


def assert_sound(result: Identity | str) -> None:
    """An identity is a valid user id and a future expiry; a refusal says why."""
    if isinstance(result, Identity):
        assert is_user_id(result.user_id)
        assert result.expires_at > NOW
    else:
        assert result.startswith("the token")


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
numeric_dates = (
    st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | json_values
)
claim_names = st.sampled_from(["sub", "exp", "nbf", "iat", "aud", "iss", "jti"]) | st.text()
claim_dicts = st.fixed_dictionaries(
    {},
    optional={
        "sub": st.text(max_size=200) | json_values,
        "exp": numeric_dates,
        "nbf": numeric_dates,
        "iat": numeric_dates,
    },
).flatmap(
    lambda known: st.dictionaries(claim_names, json_values, max_size=4).map(
        lambda extra: {**extra, **known}
    )
)


@given(claim_dicts)
def test_any_claims_signed_with_the_secret_are_an_identity_or_invalid(claims: Any) -> None:
    assert_sound(outcome(signed_claims(claims)))


@given(
    st.text(min_size=1, max_size=20).filter(lambda s: is_user_id(s)),
    st.floats(min_value=NOW.timestamp() + 1, max_value=MAX_NUMERIC_DATE)
    | st.integers(min_value=int(NOW.timestamp()) + 1, max_value=MAX_NUMERIC_DATE),
)
def test_a_valid_sub_and_a_future_exp_are_an_identity(user: str, exp: float) -> None:
    result = outcome(signed_claims({"sub": user, "exp": exp, "iat": NOW.timestamp()}))
    assert isinstance(result, Identity), result
    assert result.user_id == user
    assert math.isclose(result.expires_at.timestamp(), exp, abs_tol=1e-3)


@given(json_values)
def test_any_header_is_an_identity_or_invalid(header: Any) -> None:
    claims = {"sub": "alice", "exp": NOW.timestamp() + 60}
    result = outcome(signed_claims(claims, header))
    assert_sound(result)
    if isinstance(result, Identity):  # only a header that asks for HS256 passes
        assert isinstance(header, dict)
        assert header.get("alg") == "HS256"


@given(st.binary(max_size=64), st.binary(max_size=64))
def test_any_header_and_payload_bytes_are_an_identity_or_invalid(
    header: bytes, payload: bytes
) -> None:
    assert_sound(outcome(signed(header, payload)))


@given(st.text(max_size=300))
def test_any_string_is_invalid(token: str) -> None:
    assert isinstance(outcome(token), str)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"sub": "alice", "exp": "9999999999"}, "exp must be a number of seconds since 1970"),
        ({"sub": "alice", "exp": [1]}, "exp must be a number"),
        ({"sub": "alice", "exp": True}, "exp must be a number"),
        ({"sub": "alice", "exp": math.inf}, "exp must be a number"),
        ({"sub": "alice", "exp": math.nan}, "exp must be a number"),
        ({"sub": "alice", "exp": 10**400}, "exp must be a number"),
        ({"sub": "alice", "exp": MAX_NUMERIC_DATE + 1}, "exp must be a number"),
        ({"sub": "alice", "exp": NOW.timestamp() + 60, "nbf": "now"}, "nbf must be a number"),
        ({"sub": "alice", "exp": NOW.timestamp() + 60, "iat": {"a": 1}}, "iat must be"),
        ({"sub": "alice", "exp": NOW.timestamp()}, "the token has expired"),
        ({"sub": "alice", "exp": 0}, "the token has expired"),
        ({"sub": "alice", "exp": NOW.timestamp() + 60, "nbf": NOW.timestamp() + 1}, "not valid"),
        ({"sub": "alice", "exp": NOW.timestamp() + 60, "iat": NOW.timestamp() + 1}, "not valid"),
        ({"sub": "alice"}, "the token has no expiry (exp)"),
        ({"sub": 7, "exp": NOW.timestamp() + 60}, "subject (sub) is not a valid user id"),
        ({"sub": ["alice"], "exp": NOW.timestamp() + 60}, "subject (sub)"),
        ({"sub": "", "exp": NOW.timestamp() + 60}, "subject (sub)"),
        ({"sub": "alice smith", "exp": NOW.timestamp() + 60}, "subject (sub)"),
        ({"sub": "a" * 129, "exp": NOW.timestamp() + 60}, "subject (sub)"),
        ({"exp": NOW.timestamp() + 60}, "subject (sub)"),
        ({"sub": "alice", "exp": NOW.timestamp() + 60, "aud": "other"}, "names an audience"),
        ([{"sub": "alice"}], "not a JSON object"),
        ("alice", "not a JSON object"),
    ],
)
def test_each_bad_claim_says_what_is_wrong(claims: Any, message: str) -> None:
    result = outcome(signed_claims(claims))
    assert isinstance(result, str)
    assert message in result


def test_extra_and_nested_claims_are_ignored() -> None:
    claims = {
        "sub": "alice",
        "exp": NOW.timestamp() + 60.5,
        "nbf": NOW.timestamp(),
        "iss": [1, {"a": None}],
        "jti": {"deep": [[[[]]]]},
        "roles": {"admin": True},
    }
    header = {"alg": "HS256", "typ": {"odd": 1}, "kid_note": [1]}
    result = outcome(signed_claims(claims, header))
    assert result == Identity("alice", NOW + timedelta(seconds=60.5))


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (signed(b'{"alg": "HS256"}', b'{"sub": "\xff", "exp": 9999999999}'), "not JSON"),
        (signed(b'{"alg": "HS256"}', b"[" * 2000), "not JSON"),
        (signed(b"[" * 2000, b"{}"), "malformed"),
        (signed(b'{"alg": "\xff"}', b"{}"), "malformed"),
        (signed(b'{"alg": "HS256", "kid": {}}', b"{}"), "malformed"),
        (signed(b'{"alg": "HS256", "crit": [{}]}', b"{}"), "malformed"),
        (signed(b'{"alg": ["HS256"]}', b"{}"), "must be signed with HS256"),
        (signed(b'{"alg": "none"}', b"{}"), "must be signed with HS256"),
        (signed(b'{"alg": "HS256"}', b'{"sub": "a", "exp": 9999999999}', "x" * 40), "signature"),
        (
            signed(b'{"alg": "HS256"}', b'{"sub": "bob", "sub": "alice", "exp": 9999999999}'),
            "a key appears twice in its claims",
        ),
        (
            signed(b'{"alg": "HS256"}', b'{"sub": "a", "exp": 9999999999, "x": {"k": 1, "k": 2}}'),
            "a key appears twice in its claims",
        ),
        (
            signed(b'{"alg": "none", "alg": "HS256"}', b'{"sub": "a", "exp": 9999999999}'),
            "a key appears twice in its header",
        ),
        ("é.é.é", "not three base64url parts"),
        ("\udcff.a.b", "not three base64url parts"),
        ("a.b.c.d", "not three base64url parts"),
        ("a" * (MAX_TOKEN_LENGTH + 1), f"longer than {MAX_TOKEN_LENGTH} characters"),
    ],
)
def test_malformed_tokens_say_what_is_wrong(token: str, message: str) -> None:
    result = outcome(token)
    assert isinstance(result, str)
    assert message in result


def test_a_minted_token_verifies() -> None:
    identity = verify(SECRET, mint_token(SECRET, "alice"))
    assert identity.user_id == "alice"


@pytest.mark.parametrize("user", ["", "a b", "a\tb", "\x00", "\u200b", "\udcff", "a" * 129])
def test_minting_refuses_a_malformed_user_id(user: str) -> None:
    with pytest.raises(ValueError, match="printable characters without spaces"):
        mint_token(SECRET, user)


@pytest.mark.parametrize(
    ("look_alike", "user"),
    [
        ("\uff41\uff4c\uff49\uff43\uff45", "alice"),  # fullwidth ａｌｉｃｅ
        ("rene\u0301", "ren\u00e9"),  # a decomposed é
        ("\ufb01ona", "fiona"),  # the ﬁ ligature
    ],
)
def test_a_signed_token_whose_sub_only_looks_like_a_user_is_refused(
    look_alike: str, user: str
) -> None:
    exp = NOW.timestamp() + 60
    assert isinstance(outcome(signed_claims({"sub": user, "exp": exp})), Identity)
    refused = outcome(signed_claims({"sub": look_alike, "exp": exp}))
    assert refused == "the token's subject (sub) is not a valid user id"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),  # two spaces, trailing space: still the token
        (" Bearer abc", "abc"),
        ("BEARER\tabc", "abc"),
        ("bEaReR \t \tabc\t", "abc"),
        ("\tBearer  abc", "abc"),
    ],
)
def test_bearer_header_forms(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@given(st.text(alphabet=st.sampled_from("Bearer \tab.\x0b-"), max_size=14))
def test_the_usual_spelling_is_read_as_the_pattern_reads_it(header: str) -> None:
    # bearer_token reads "Bearer <token>" without its pattern: the same answer.
    match = _BEARER.fullmatch(header)
    expected = match[2] if match is not None and match[1].lower() == "bearer" else None
    try:
        found = bearer_token(header)
    except InvalidToken:
        found = None
    assert found == expected


@pytest.mark.parametrize(
    "header",
    ["", " ", "Bearer", "Bearer ", "Bearer\t", "Basic abc", "abc", "Bearerabc", "Bearer a b"],
)
def test_headers_that_are_not_bearer_tokens_are_invalid(header: str) -> None:
    with pytest.raises(InvalidToken, match="use 'Authorization: Bearer <token>'"):
        bearer_token(header)
