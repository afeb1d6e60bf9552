"""A remove's answer names the entries it removed, on every commit path and on a retry.

``RemoveEntriesPayload.removedEntryIds`` (what Relay's ``@deleteRecord`` reads)
comes from the command's stored result, so a retry names the same entries even
after someone else has removed or restored them since; a result stored before
results kept the ids is completed from the same log row's changes.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import playlist_mutation
from chorus.domain.commands import RemoveEntries, RevertPlaylist
from tests.integration.store_helpers import ALICE, new_playlist


@pytest.fixture(params=[True, False], ids=["group", "plain"])
def any_store(request: pytest.FixtureRequest, database: Database) -> PlaylistStore:
    return PlaylistStore(database, group_commit=request.param)


async def test_a_remove_names_what_it_removed_and_its_retry_the_same(
    any_store: PlaylistStore,
) -> None:
    ed = await new_playlist(any_store)
    e1, e2, e3, e4 = (e.entry_id for e in (await ed.add("m1", "m2", "m3", "m4")).entries)
    await ed.remove(e2)
    remove = ed.command(RemoveEntries, entry_ids=(e3, e2, e1))
    first = await any_store.execute(remove, ALICE)
    assert first.outcome.removed_entry_ids == (e3, e1)
    assert first.outcome.skipped_entry_ids == (e2,)
    ed.version = first.outcome.version

    # Bring e1 back and remove e4: the retry still answers what the remove did then.
    await ed.run(RevertPlaylist, to_version=2)
    await ed.remove(e4)
    again = await any_store.execute(remove, ALICE)
    assert again.replayed
    assert again.outcome == first.outcome


async def test_other_commands_remove_nothing(any_store: PlaylistStore) -> None:
    ed = await new_playlist(any_store)
    (e1,) = (e.entry_id for e in (await ed.add("m1")).entries)
    assert (await ed.move(e1)).removed_entry_ids == ()
    assert (await ed.remove(e1)).removed_entry_ids == (e1,)
    assert (await ed.remove(e1)).removed_entry_ids == ()


async def test_a_result_stored_before_the_ids_were_kept_is_completed_from_its_changes(
    any_store: PlaylistStore, database: Database
) -> None:
    ed = await new_playlist(any_store)
    e1, e2 = (e.entry_id for e in (await ed.add("m1", "m2")).entries)
    remove = ed.command(RemoveEntries, entry_ids=(e2, e1))
    first = await any_store.execute(remove, ALICE)
    assert first.outcome.removed_entry_ids == (e2, e1)
    where = (
        playlist_mutation.c.playlist_id == ed.playlist_id,
        playlist_mutation.c.version == first.outcome.version,
    )
    async with database.write() as conn:
        result = await conn.scalar(select(playlist_mutation.c.result).where(*where))
        del result["removed_entry_ids"]
        await conn.execute(update(playlist_mutation).where(*where).values(result=result))

    again = await any_store.execute(remove, ALICE)
    assert again.replayed
    assert again.outcome == first.outcome
