from __future__ import annotations

from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist


async def test_create_and_add(store: PlaylistStore, database: Database) -> None:
    created = await store.create(CreatePlaylist("op-1", "Mix"), "alice")
    pid = created.outcome.playlist_id
    added = await store.execute(AddEntries(pid, "op-2", 0, ("m1", "m2")), "alice")
    assert added.outcome.version == 1
    async with database.read() as conn:
        page = await repository.entries_page(conn, pid, limit=10)
    assert [e.media_id for e in page] == ["m1", "m2"]
