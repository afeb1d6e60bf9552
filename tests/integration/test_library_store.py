"""Liked Songs in storage (issue 14), on SQLite and PostgreSQL.

Version 0 is committed on first use, once, even when first uses race; likes
are ordinary versions with a log row and an outbox event each, and folding the
log gives the table.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event, select

from chorus.db import pages
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import outbox, playlist_mutation
from chorus.domain.commands import AddEntries, CreatePlaylist, LikeMedia, UnlikeMedia
from chorus.domain.library import CREATE_OPERATION_ID, LIKED_SONGS_TITLE
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.domain.model import PlaylistKind, Visibility
from chorus.graphql.schema.build import build_schema
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import RequestContext, Services
from tests.integration.store_helpers import ALICE, BOB, fold_log, header, media_order, new_op
from tests.integration.test_graphql_execute import CountingCatalog

SECRET = b"library-secret-for-tests-0123456789"


def library_store(database: Database) -> PlaylistStore:
    return PlaylistStore(database, library_secret=SECRET)


async def test_first_use_commits_version_0_once_even_when_racing(database: Database) -> None:
    store = library_store(database)
    ids = await asyncio.gather(*(store.ensure_liked_songs(ALICE) for _ in range(5)))
    assert set(ids) == {store.liked_songs_id(ALICE)}
    p = await header(database, ids[0])
    assert (p.title, p.visibility, p.kind, p.version) == (
        LIKED_SONGS_TITLE,
        Visibility.PRIVATE,
        PlaylistKind.LIKED_SONGS,
        0,
    )
    async with database.read() as conn:
        ops = (
            await conn.execute(
                select(playlist_mutation.c.operation_id).where(
                    playlist_mutation.c.playlist_id == ids[0]
                )
            )
        ).all()
    assert [r.operation_id for r in ops] == [CREATE_OPERATION_ID]


async def test_likes_are_versions_in_the_log_and_the_outbox(database: Database) -> None:
    store = library_store(database)
    pid = store.liked_songs_id(ALICE)
    seen: list[tuple[str, int]] = []
    store = PlaylistStore(
        database, library_secret=SECRET, on_commit=lambda p, v: seen.append((p, v))
    )
    first = await store.execute(LikeMedia(pid, new_op(), "m1"), ALICE)  # creates v0 too
    assert first.outcome.version == 1
    await store.execute(LikeMedia(pid, new_op(), "m2"), ALICE)
    again = await store.execute(LikeMedia(pid, new_op(), "m1"), ALICE)
    assert again.outcome.version == 3
    op = new_op()
    await store.execute(UnlikeMedia(pid, op, "m2"), ALICE)
    retry = await store.execute(UnlikeMedia(pid, op, "m2"), ALICE)
    assert (retry.replayed, retry.outcome.version) == (True, 4)
    assert seen == [(pid, v) for v in range(5)]
    assert await media_order(database, pid) == ["m1"]
    state = await fold_log(database, pid)  # log, outbox and tables agree
    assert state.playlist.version == 4
    async with database.read() as conn:
        versions = [
            r.version
            for r in await conn.execute(
                select(outbox.c.version)
                .where(outbox.c.playlist_id == pid)
                .order_by(outbox.c.version)
            )
        ]
    assert versions == [0, 1, 2, 3, 4]
    assert await pages.media_in(database, pid, ["m1", "m2", "m3"]) == {"m1"}


async def test_users_have_their_own_liked_songs(database: Database) -> None:
    store = library_store(database)
    await store.execute(LikeMedia(store.liked_songs_id(ALICE), new_op(), "m1"), ALICE)
    await store.execute(LikeMedia(store.liked_songs_id(BOB), new_op(), "m2"), BOB)
    assert await media_order(database, store.liked_songs_id(ALICE)) == ["m1"]
    assert await media_order(database, store.liked_songs_id(BOB)) == ["m2"]


LIKED_PAGE = """query($id: ID!) { playlist(id: $id) { entries(first: 100) {
  edges { node { mediaId media { viewerHasLiked } } } } } }"""


async def test_viewer_has_liked_is_one_query_for_a_page(database: Database) -> None:
    store = library_store(database)
    created = await store.create(CreatePlaylist(new_op(), "Mix"), ALICE)
    pid = created.outcome.playlist_id
    media = tuple(f"m{i}" for i in range(100))
    await store.execute(AddEntries(pid, new_op(), 0, media), ALICE)
    liked = store.liked_songs_id(ALICE)
    for m in ("m3", "m50"):
        await store.execute(LikeMedia(liked, new_op(), m), ALICE)
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    services = Services(database, store, CountingCatalog(), DEFAULT_LIMITS)
    event.listen(database.read_engine.sync_engine, "before_cursor_execute", count)
    try:
        result = await build_schema().execute(
            LIKED_PAGE,
            variable_values={"id": ids.to_global_id("Playlist", pid)},
            context_value=RequestContext(services, ALICE),
        )
    finally:
        event.remove(database.read_engine.sync_engine, "before_cursor_execute", count)
    assert result.errors is None, result.errors
    edges = result.data["playlist"]["entries"]["edges"]  # type: ignore[index]
    assert [e["node"]["mediaId"] for e in edges if e["node"]["media"]["viewerHasLiked"]] == [
        "m3",
        "m50",
    ]
    assert sum("media_id IN" in s for s in statements) == 1, statements
