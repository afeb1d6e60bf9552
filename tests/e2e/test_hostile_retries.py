"""Retries against a running, rate-limited ``chorus serve``: a committed edit is always answered.

With ``CHORUS_RATE_LIMIT_PER_MINUTE`` set, a retry of an edit that already
committed (same operation id, same input) gets its stored result with
``replayed: true`` and costs no budget, even when the budget is spent; a new
edit is ``RATE_LIMITED``; the same operation id with another input stays
``OPERATION_ID_REUSED``. Duplicates racing their first attempt commit once.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.conftest import Api, running_server
from tests.e2e.helpers import committed, mutate, refused, track, version

PER_MINUTE = 2
"""Small enough that no token comes back during a test (one every 30 s)."""


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def limited(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    settings = {"CHORUS_RATE_LIMIT_PER_MINUTE": str(PER_MINUTE)}
    with running_server(request.param, tmp_path_factory, **settings) as server:
        client = Api(server)
        yield client
        client.http.close()


def _exhaust(api: Api, user: str, playlist_id: str) -> None:
    """Spend what is left of ``user``'s budget on new edits, until one is RATE_LIMITED."""
    for n in range(PER_MINUTE + 1):
        payload = mutate(
            api,
            "addEntries",
            user,
            playlistId=playlist_id,
            baseVersion=0,
            mediaIds=[track(100 + n)],
        )
        if payload["userErrors"]:
            refused(payload, "RATE_LIMITED")
            return
    raise AssertionError(f"{user} was never rate limited")


def test_a_retry_of_a_committed_edit_is_answered_when_the_budget_is_spent(limited: Api) -> None:
    user = "retrier"
    create_op, add_op = limited.op(), limited.op()
    created = committed(mutate(limited, "createPlaylist", user, operationId=create_op, title="Mix"))
    playlist_id = created["playlist"]["id"]
    add_input = {"playlistId": playlist_id, "baseVersion": 0, "mediaIds": [track(1), track(2)]}
    first = committed(mutate(limited, "addEntries", user, operationId=add_op, **add_input))
    assert not first["replayed"]
    _exhaust(limited, user, playlist_id)
    before = version(limited, playlist_id, user)

    for _ in range(3):  # retried as often as the client likes, never charged
        retry = mutate(limited, "addEntries", user, operationId=add_op, **add_input)
        assert retry == {**first, "replayed": True, "playlist": retry["playlist"]}
        assert [e["id"] for e in retry["entries"]] == [e["id"] for e in first["entries"]]
    again = mutate(limited, "createPlaylist", user, operationId=create_op, title="Mix")
    assert again["replayed"] is True
    assert (again["version"], again["playlist"]["id"]) == (0, playlist_id)

    # The same operation id with another input keeps its own error.
    other = {**add_input, "mediaIds": [track(3)]}
    refused(mutate(limited, "addEntries", user, operationId=add_op, **other), "OPERATION_ID_REUSED")
    # And a new edit is still refused: the retries gave no budget back either.
    new = mutate(limited, "addEntries", user, **{**add_input, "mediaIds": [track(4)]})
    assert "more than 2 mutations a minute" in refused(new, "RATE_LIMITED")["message"]
    assert version(limited, playlist_id, user) == before
    # The refusal says when the bucket holds a token again (2 a minute: within 30 s).
    hinted = limited.data(
        "mutation Add($input: AddEntriesInput!) { addEntries(input: $input) "
        "{ userErrors { code message retryAfterMs } } }",
        user,
        input={**add_input, "operationId": limited.op(), "mediaIds": [track(5)]},
    )["addEntries"]["userErrors"]
    assert [e["code"] for e in hinted] == ["RATE_LIMITED"]
    assert 0 < hinted[0]["retryAfterMs"] <= 30_000
    assert f"retry in about {hinted[0]['retryAfterMs']} ms" in hinted[0]["message"]


def test_duplicates_racing_for_the_last_token_commit_once(limited: Api) -> None:
    user = "racer"
    playlist_id = committed(mutate(limited, "createPlaylist", user, title="Race"))["playlist"]["id"]
    op = limited.op()
    fields: dict[str, Any] = {
        "operationId": op,
        "playlistId": playlist_id,
        "baseVersion": 0,
        "mediaIds": [track(7)],
    }
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: mutate(limited, "addEntries", user, **fields), range(8)))
    firsts = [a for a in answers if a["version"] is not None and not a["replayed"]]
    assert len(firsts) == 1, answers
    first = firsts[0]
    for answer in answers:
        if answer["version"] is None:  # looked before the first committed: nothing committed
            refused(answer, "RATE_LIMITED")
        else:
            assert answer["entries"] == first["entries"]
            assert answer["version"] == first["version"] == 1
    retry = mutate(limited, "addEntries", user, **fields)
    assert (retry["replayed"], retry["version"], retry["entries"]) == (True, 1, first["entries"])
    assert version(limited, playlist_id, user) == 1


FOLLOW = """mutation($input: FollowInput!) { follow(input: $input) {
  following changed userErrors { code } } }"""


def test_follows_spend_the_same_budget_as_other_mutations(limited: Api) -> None:
    """A follow has no operation id and no stored result: over the budget it is refused."""
    user = "follower"
    answers = [
        limited.data(FOLLOW, user, input={"kind": "USER", "targetId": f"star{n}"})["follow"]
        for n in range(PER_MINUTE + 1)
    ]
    assert [a["changed"] for a in answers[:PER_MINUTE]] == [True] * PER_MINUTE
    assert [e["code"] for e in answers[-1]["userErrors"]] == ["RATE_LIMITED"]
    following = limited.data("{ viewer { following { totalCount } } }", user)
    assert following["viewer"]["following"]["totalCount"] == PER_MINUTE
