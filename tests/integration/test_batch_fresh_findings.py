"""What a fresh user found in ``applyOperations``: a stranger learns nothing, a retry is answered.

* A stranger's batch on a PRIVATE playlist must answer as for a playlist that
  does not exist: ``version: null`` (it said the playlist's version).
* A retry of a batch that committed is answered even when the rate limit's
  minute is spent (it was ``RATE_LIMITED`` whole), like a single edit's.
"""

from __future__ import annotations

from typing import Any

from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import Visibility
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services
from chorus.resolvers.ratelimit import RateLimiter
from tests.integration.test_graphql_execute import CountingCatalog

schema = build_schema()
APPLY = """mutation($input: ApplyOperationsInput!) { applyOperations(input: $input) {
  version userErrors { code } results { version replayed userErrors { code } } } }"""


async def run(services: Services, user: str, **input: Any) -> dict[str, Any]:
    result = await schema.execute(
        APPLY, variable_values={"input": input}, context_value=RequestContext(services, user)
    )
    assert result.errors is None, result.errors
    payload: dict[str, Any] = result.data["applyOperations"]
    return payload


def adds(n: int) -> list[dict[str, Any]]:
    return [{"addEntries": {"operationId": f"o{i}", "mediaIds": [f"m{i}"]}} for i in range(n)]


async def test_a_strangers_batch_learns_nothing_of_a_private_playlist(
    database: Database, store: PlaylistStore
) -> None:
    created = await store.create(
        CreatePlaylist("c", "Secret", visibility=Visibility.PRIVATE), "alice"
    )
    pid = created.outcome.playlist_id
    await store.execute(AddEntries(pid, "a", 0, ("m1",)), "alice")
    services = Services(database, store, CountingCatalog(), DEFAULT_LIMITS)
    gid = ids.playlist_global_id(pid)
    payload = await run(services, "carol", playlistId=gid, baseVersion=0, operations=adds(1))
    assert payload["version"] is None
    assert [r["userErrors"][0]["code"] for r in payload["results"]] == ["NOT_FOUND"]
    # alice, who may read it, is told where it is
    mine = await run(services, "alice", playlistId=gid, baseVersion=1, operations=adds(1))
    assert mine["version"] == 2


async def _ten_edits_a_minute(database: Database, store: PlaylistStore) -> tuple[Services, str]:
    """Services allowing each user 10 edits a minute, and a new playlist of alice's (its id)."""
    created = await store.create(CreatePlaylist("c", "Mix"), "alice")
    gid = ids.playlist_global_id(created.outcome.playlist_id)
    limiter = RateLimiter(10)
    services = Services(database, store, CountingCatalog(), DEFAULT_LIMITS, rate_limiter=limiter)
    return services, gid


async def test_a_retry_of_a_committed_batch_is_answered_past_the_rate_limit(
    database: Database, store: PlaylistStore
) -> None:
    services, gid = await _ten_edits_a_minute(database, store)
    first = await run(services, "alice", playlistId=gid, baseVersion=0, operations=adds(8))
    assert [r["version"] for r in first["results"]] == list(range(1, 9))
    again = await run(services, "alice", playlistId=gid, baseVersion=0, operations=adds(8))
    assert again["userErrors"] == []
    assert [(r["version"], r["replayed"]) for r in again["results"]] == [
        (v, True) for v in range(1, 9)
    ]
    # A batch with new operations past the limit is still refused.
    more = await run(services, "alice", playlistId=gid, baseVersion=8, operations=adds(12)[8:])
    assert [e["code"] for e in more["userErrors"]] == ["RATE_LIMITED"]


async def test_a_batch_of_more_operations_than_a_minute_s_tokens_commits_from_a_full_bucket(
    database: Database, store: PlaylistStore
) -> None:
    # 12 operations at 10 a minute: refused forever before ("retry later with the
    # same operationIds" could never come true); now taken into debt.
    services, gid = await _ten_edits_a_minute(database, store)
    first = await run(services, "alice", playlistId=gid, baseVersion=0, operations=adds(12))
    assert first["userErrors"] == []
    assert [r["version"] for r in first["results"]] == list(range(1, 13))
    # In debt: the next edit waits until the bucket refills.
    more = await run(services, "alice", playlistId=gid, baseVersion=12, operations=adds(13)[12:])
    assert [e["code"] for e in more["userErrors"]] == ["RATE_LIMITED"]


async def test_a_retry_of_an_atomic_or_temporary_id_batch_is_answered_past_the_rate_limit(
    database: Database, store: PlaylistStore
) -> None:
    # A second fresh user: an atomic batch's operations are kept under the batch's hash
    # (and its later ids beside it), and an operation naming a temporary id under its
    # resolved command's hash; none of them matched its raw command at admission, so
    # their retry was counted as new and refused RATE_LIMITED past the budget.
    services, gid = await _ten_edits_a_minute(database, store)
    atomic = await run(
        services, "alice", playlistId=gid, baseVersion=0, atomic=True, operations=adds(4)
    )
    assert [r["version"] for r in atomic["results"]] == [1] * 4
    temporary = [
        {"addEntries": {"operationId": "t0", "mediaIds": ["m-x"], "clientEntryIds": ["x"]}},
        *(
            {"moveEntries": {"operationId": f"t{i}", "entryIds": ["x"], "after": None}}
            for i in range(1, 5)
        ),
    ]
    moved = await run(services, "alice", playlistId=gid, baseVersion=1, operations=temporary)
    assert [r["version"] for r in moved["results"]] == [2, 3, 4, 5, 6]
    spent = await run(services, "alice", playlistId=gid, baseVersion=6, operations=adds(12)[6:])
    assert [e["code"] for e in spent["userErrors"]] == ["RATE_LIMITED"]  # the minute is spent

    again = await run(
        services, "alice", playlistId=gid, baseVersion=0, atomic=True, operations=adds(4)
    )
    assert again["userErrors"] == []
    assert [(r["version"], r["replayed"]) for r in again["results"]] == [(1, True)] * 4
    moved_again = await run(services, "alice", playlistId=gid, baseVersion=1, operations=temporary)
    assert moved_again["userErrors"] == []
    assert [(r["version"], r["replayed"]) for r in moved_again["results"]] == [
        (v, True) for v in range(2, 7)
    ]
