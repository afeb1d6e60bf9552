"""CHORUS_JWKS_URL and CHORUS_JWT_* settings, ``chorus token --ttl``, HS256 with iss and aud."""

from __future__ import annotations

import time
from collections.abc import Callable

import jwt
import pytest

from chorus.auth import ClaimRules, InvalidToken, mint_token, verify
from chorus.cli import main

SECRET = "s" * 40
PROVIDER = {
    "CHORUS_JWKS_URL": "https://idp.example/.well-known/jwks.json",
    "CHORUS_JWT_ISSUER": "https://idp.example/",
    "CHORUS_JWT_AUDIENCE": "chorus",
}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    code = exited.value.code
    assert isinstance(code, int)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"CHORUS_JWKS_URL": PROVIDER["CHORUS_JWKS_URL"]}, "needs CHORUS_JWT_ISSUER"),
        ({**PROVIDER, "CHORUS_JWT_AUDIENCE": ""}, "CHORUS_JWT_AUDIENCE"),
        ({**PROVIDER, "CHORUS_JWKS_URL": "ftp://idp"}, "CHORUS_JWKS_URL"),
        ({**PROVIDER, "CHORUS_JWKS_URL": "idp.example/jwks"}, "CHORUS_JWKS_URL"),
        ({**PROVIDER, "CHORUS_JWT_ALGORITHMS": "HS256"}, "not HS256"),
        ({**PROVIDER, "CHORUS_JWT_ALGORITHMS": "none,RS256"}, "not none"),
        ({**PROVIDER, "CHORUS_JWT_ALGORITHMS": " , "}, "CHORUS_JWT_ALGORITHMS"),
        ({"CHORUS_JWT_USER_CLAIM": "user id"}, "CHORUS_JWT_USER_CLAIM"),
        ({"CHORUS_JWT_USER_CLAIM": ""}, "CHORUS_JWT_USER_CLAIM"),
        ({"CHORUS_JWT_ISSUER": " https://idp/"}, "CHORUS_JWT_ISSUER"),
        ({**PROVIDER, "CHORUS_JWKS_REFETCH_INTERVAL_S": "0"}, "CHORUS_JWKS_REFETCH_INTERVAL_S"),
        ({**PROVIDER, "CHORUS_JWKS_CACHE_S": "0"}, "CHORUS_JWKS_CACHE_S"),
        ({**PROVIDER, "CHORUS_JWKS_TIMEOUT_MS": "0"}, "CHORUS_JWKS_TIMEOUT_MS"),
    ],
)
def test_bad_identity_settings_exit_2_naming_the_variable(
    refused_settings: Callable[..., str], env: dict[str, str], said: str
) -> None:
    assert said in refused_settings(env, "serve")


@pytest.mark.parametrize(
    # 0.5 would mint a token expired at once; 1.5 would be cut to 1 without a word.
    "ttl",
    ["0", "-5", "abc", "nan", "inf", "31622401", "", "0.5", "1.5", "1e3"],
)
def test_token_ttl_must_be_whole_bounded_seconds(
    capsys: pytest.CaptureFixture[str], ttl: str
) -> None:
    code, out, err = _run(capsys, "token", "alice", "--ttl", ttl)
    assert code == 2
    assert not out
    assert "--ttl: must be a whole number of seconds from 1 to 31622400 (366 days)" in err


@pytest.mark.parametrize("ttl", ["1", "31622400"])
def test_token_ttl_takes_its_bounds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ttl: str
) -> None:
    monkeypatch.setenv("CHORUS_JWT_SECRET", SECRET)
    assert main(["token", "alice", "--ttl", ttl]) == 0
    claims = jwt.decode(capsys.readouterr().out.strip(), SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == int(ttl)


def test_token_ttl_sets_the_expiry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHORUS_JWT_SECRET", SECRET)
    assert main(["token", "alice", "--ttl", "90"]) == 0
    token = capsys.readouterr().out.strip()
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["sub"] == "alice"
    assert 85 <= claims["exp"] - time.time() <= 91


def test_token_carries_the_configured_issuer_audience_and_user_claim(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHORUS_JWT_SECRET", SECRET)
    monkeypatch.setenv("CHORUS_JWT_ISSUER", "local")
    monkeypatch.setenv("CHORUS_JWT_AUDIENCE", "chorus")
    monkeypatch.setenv("CHORUS_JWT_USER_CLAIM", "uid")
    assert main(["token", "bob"]) == 0
    token = capsys.readouterr().out.strip()
    identity = verify(SECRET, token, rules=ClaimRules("uid", "local", "chorus"))
    assert identity.user_id == "bob"


def test_token_is_refused_when_an_identity_provider_is_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in PROVIDER.items():
        monkeypatch.setenv(key, value)
    code, out, err = _run(capsys, "token", "alice")
    assert code == 2
    assert out == ""
    assert "CHORUS_JWKS_URL is set" in err


def test_hs256_with_an_issuer_and_audience_requires_both() -> None:
    rules = ClaimRules("sub", "local", "chorus")
    assert verify(SECRET, mint_token(SECRET, "alice", rules=rules), rules=rules).user_id == "alice"
    with pytest.raises(InvalidToken, match=r"issuer \(iss\) must be local"):
        verify(SECRET, mint_token(SECRET, "alice"), rules=rules)
    other = mint_token(SECRET, "alice", rules=ClaimRules("sub", "local", "billing"))
    with pytest.raises(InvalidToken, match=r"audience \(aud\) must include chorus"):
        verify(SECRET, other, rules=rules)
