"""The mutation rate limit and idempotent retries, through ``schema.execute`` on both databases.

A retry of a committed edit (same operation id, same input) is answered
with its stored result and costs no token, even when the bucket is empty,
and also when it races its own first attempt. The limiter's clock is frozen,
so no token comes back with time during a test.
"""

from __future__ import annotations

import asyncio
from typing import Any

from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import CreatePlaylist
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services
from chorus.resolvers.ratelimit import RateLimiter
from tests.integration.test_graphql_execute import CountingCatalog

schema = build_schema()

ADD = """mutation($id: ID!, $op: ID!, $media: [String!]!) {
  addEntries(input: {playlistId: $id, operationId: $op, baseVersion: 0, mediaIds: $media}) {
    version replayed userErrors { code } entries { id positionKey } } }"""
CREATE = """mutation($op: ID!, $title: String!) {
  createPlaylist(input: {operationId: $op, title: $title}) {
    version replayed userErrors { code } playlist { id } } }"""


class Client:
    """Alice's mutations against one store, rate limited at ``per_minute`` with a frozen clock."""

    def __init__(self, database: Database, store: PlaylistStore, per_minute: int) -> None:
        self.limiter = RateLimiter(per_minute, clock=lambda: 0.0)
        self.services = Services(
            database, store, CountingCatalog(), DEFAULT_LIMITS, rate_limiter=self.limiter
        )

    async def run(self, document: str, name: str, **variables: Any) -> dict[str, Any]:
        result = await schema.execute(
            document,
            variable_values=variables,
            context_value=RequestContext(self.services, "alice"),
        )
        assert result.errors is None, result.errors
        assert result.data is not None
        payload: dict[str, Any] = result.data[name]
        return payload

    async def add(self, playlist: str, op: str, media: tuple[str, ...] = ("m1",)) -> dict[str, Any]:
        return await self.run(ADD, "addEntries", id=playlist, op=op, media=list(media))

    def tokens(self) -> float:
        return self.limiter.available("alice")


async def _playlist(store: PlaylistStore) -> str:
    created = await store.create(CreatePlaylist("setup", "Mix"), "alice")
    return ids.to_global_id("Playlist", created.outcome.playlist_id)


def _codes(payload: dict[str, Any]) -> list[str]:
    return [e["code"] for e in payload["userErrors"]]


async def test_a_committed_edit_is_replayed_free_with_the_budget_exhausted(
    database: Database, store: PlaylistStore
) -> None:
    client = Client(database, store, 3)
    playlist = await _playlist(store)
    first = await client.add(playlist, "edit")
    assert (first["version"], first["replayed"]) == (1, False)
    created = await client.run(CREATE, "createPlaylist", op="new", title="Other")
    assert created["version"] == 0
    assert client.tokens() == 1
    retry = await client.add(playlist, "edit")  # a token left: taken, then given back
    assert retry == {**first, "replayed": True}
    assert client.tokens() == 1
    assert _codes(await client.add(playlist, "spend", ("m2",))) == []
    assert client.tokens() == 0
    # The bucket is empty: a new edit is refused, the retries still answered.
    assert _codes(await client.add(playlist, "refused", ("m3",))) == ["RATE_LIMITED"]
    for _ in range(3):
        assert await client.add(playlist, "edit") == {**first, "replayed": True}
    again = await client.run(CREATE, "createPlaylist", op="new", title="Other")
    assert again == {**created, "replayed": True}
    # The same operation id with another input keeps its own error.
    reused = await client.add(playlist, "edit", ("m9",))
    assert _codes(reused) == ["OPERATION_ID_REUSED"]
    reused = await client.run(CREATE, "createPlaylist", op="new", title="Changed")
    assert _codes(reused) == ["OPERATION_ID_REUSED"]
    # A malformed operation id is still a clear input error, not a rate limit.
    assert _codes(await client.add(playlist, "")) == ["INVALID_INPUT"]
    assert client.tokens() == 0


async def test_duplicates_racing_their_first_attempt_cost_one_token(
    database: Database, store: PlaylistStore
) -> None:
    client = Client(database, store, 20)
    playlist = await _playlist(store)
    answers = await asyncio.gather(*(client.add(playlist, "raced", ("m1", "m2")) for _ in range(8)))
    first = [a for a in answers if not a["replayed"]]
    assert len(first) == 1, answers
    assert first[0]["version"] == 1
    assert all(a == {**first[0], "replayed": True} for a in answers if a["replayed"])
    assert client.tokens() == 19  # seven took a token, waited for the commit, gave it back


async def test_duplicates_racing_for_the_last_token_commit_once(
    database: Database, store: PlaylistStore
) -> None:
    client = Client(database, store, 1)
    playlist = await _playlist(store)
    answers = await asyncio.gather(*(client.add(playlist, "last", ("m1",)) for _ in range(8)))
    first = [a for a in answers if a["version"] is not None and not a["replayed"]]
    assert len(first) == 1, answers
    for answer in answers:
        # Refused ones looked before the first committed: they committed nothing either.
        assert answer in (first[0], {**first[0], "replayed": True}) or _codes(answer) == [
            "RATE_LIMITED"
        ], answer
    assert await client.add(playlist, "last", ("m1",)) == {**first[0], "replayed": True}
    assert client.tokens() == 0
