"""``Playlist.atVersion`` in the full profile: PostgreSQL, Kafka, Redis snapshots and the cache.

A PUBLIC playlist's header and first page may come from its Redis snapshot;
history is read from SQL all the same and equals what ``entries`` returned
at each version, and an answer holding it is never kept in the response cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tests.e2e.helpers import add, committed, create_playlist, mutate, track
from tests.e2e.test_history import AT, NOW
from tests.e2e.test_response_cache import cache_counts, delta
from tests.full.helpers import full_api
from tests.servers import TansuServer


@pytest.fixture(scope="module")
def api(
    postgres_template: str, tansu: TansuServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    with full_api(tansu, tmp_path_factory.mktemp("history")) as client:
        yield client


def test_history_of_a_public_playlist_equals_entries_then_and_is_never_cached(api: Api) -> None:
    pid = create_playlist(api, visibility="PUBLIC")
    recorded: dict[int, dict[str, Any]] = {}
    version = 0
    for step in range(10):
        if step % 3 == 2:
            payload = committed(
                mutate(api, "updatePlaylist", playlistId=pid, baseVersion=version, title=f"t{step}")
            )
        else:
            payload = add(api, pid, [track(step + 1)], version)
        version = int(payload["version"])
        # Asked by another viewer too: a PUBLIC head read may be a snapshot.
        api.data(NOW, "bob", id=pid)
        recorded[version] = api.data(NOW, "bob", id=pid)["playlist"]
        assert recorded[version]["version"] == version
    for v, then in recorded.items():
        at = api.data(AT, "bob", id=pid, v=v, first=100)["playlist"]["atVersion"]
        assert (at["version"], at["title"], at["entries"]) == (v, then["title"], then["entries"])
    before = cache_counts(api.server)
    for _ in range(2):
        api.data(AT, "bob", id=pid, v=3, first=100)
    assert delta(before, cache_counts(api.server)).get("hit", 0) == 0
    # The cache is on: the head's page, asked twice, is a hit the second time.
    before = cache_counts(api.server)
    for _ in range(2):
        api.data(NOW, "bob", id=pid)
    assert delta(before, cache_counts(api.server)).get("hit", 0) >= 1
