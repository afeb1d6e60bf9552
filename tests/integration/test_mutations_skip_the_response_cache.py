"""A mutation is never looked up in the response cache, nor put in its single flight.

Through the whole ASGI app on an embedded database: once a mutation's document
is kept (validated once), the view skips the cache's keys and flight for it; a
query still goes the cache's way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chorus.auth import mint_token
from chorus.graphql.schema.common import ids
from chorus.resolvers import cached_answers
from tests.integration.test_raced_reads import (
    SECRET,
    _public_playlist,
    migrated,
    running,
    settings_for,
)

__all__ = ["migrated"]  # the fixture, used by name

ADD = """mutation Add($input: AddEntriesInput!) { addEntries(input: $input) {
  version replayed userErrors { code } } }"""
MEDIA = "chinook:track:1"
READ = "query Read($id: ID!) { playlist(id: $id) { version } }"


async def test_a_kept_mutation_skips_the_cache_and_a_query_does_not(
    migrated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(settings_for(migrated, tmp_path)) as (client, s):
        assert cached_answers.enabled(s)
        pid = ids.playlist_global_id(await _public_playlist(s))
        looked: list[str] = []
        real_lookup = cached_answers.lookup

        async def lookup(services: Any, asked: Any) -> Any:
            looked.append("lookup")
            return await real_lookup(services, asked)

        monkeypatch.setattr(cached_answers, "lookup", lookup)
        headers = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}

        async def add(n: int) -> dict[str, Any]:
            variables = {
                "input": {
                    "playlistId": pid,
                    "operationId": f"op{n}",
                    "baseVersion": 0,
                    "mediaIds": [MEDIA],
                }
            }
            answer = await client.post(
                "/graphql", json={"query": ADD, "variables": variables}, headers=headers
            )
            assert answer.status_code == 200, answer.text
            data: dict[str, Any] = answer.json()["data"]["addEntries"]
            return data

        first = await add(1)  # not kept yet: the cache's way (it declines a mutation)
        assert looked == ["lookup"]
        second, again = await add(2), await add(2)
        assert looked == ["lookup"]  # kept: neither looked up
        assert (first["version"], second["version"]) == (2, 3)
        assert again == {**second, "replayed": True}

        for _ in range(2):
            read = await client.post(
                "/graphql", json={"query": READ, "variables": {"id": pid}}, headers=headers
            )
            assert read.json()["data"]["playlist"]["version"] == 3
        assert looked == ["lookup"] * 3
