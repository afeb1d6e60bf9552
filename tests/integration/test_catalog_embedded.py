"""EmbeddedCatalog with imported media in SQL, on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from chorus.catalog import CatalogUnavailable, EmbeddedCatalog, Media
from chorus.db.engine import Database
from chorus.db.tables import catalog_media

IMPORTED = [
    Media("spotify:track:0000000000000000000003", "100% Pure Love", ("Crystal Waters",), None, 1),
    Media("spotify:track:0000000000000000000001", "100X Pure", ("Nobody",), "Wild cards", 2),
    Media("spotify:track:0000000000000000000002", "snake_case blues", ("Guido",), "PEP 8", 3),
    Media("spotify:track:0000000000000000000004", "snakeXcase blues", ("Other",), None, None),
    Media("spotify:track:0000000000000000000005", "Halo", ("Beyoncé",), "I Am... Sasha Fierce", 4),
    Media("spotify:track:0000000000000000000006", r"back\slash", ("Esc",), None, 5, False),
]


@pytest.fixture
async def catalog(database: Database) -> EmbeddedCatalog:
    catalog = EmbeddedCatalog(database)
    assert await catalog.add_many(IMPORTED) == len(IMPORTED)
    return catalog


async def search_ids(catalog: EmbeddedCatalog, query: str) -> list[str]:
    page = await catalog.search(query, offset=0, limit=100)
    assert page.total == len(page.items)
    return [m.id for m in page.items]


async def test_imported_media_are_found_by_id(catalog: EmbeddedCatalog) -> None:
    wanted = ["chinook:track:1", IMPORTED[2].id, IMPORTED[5].id, "spotify:track:unknown"]
    found = await catalog.get_many(wanted)
    assert set(found) == {"chinook:track:1", IMPORTED[2].id, IMPORTED[5].id}
    assert found[IMPORTED[2].id] == IMPORTED[2]
    assert found[IMPORTED[5].id] == IMPORTED[5]  # available=False survives the round trip


async def test_get_many_looks_up_many_ids_at_once(catalog: EmbeddedCatalog) -> None:
    many = [Media(f"mpd:{i:05d}", f"Song {i}", ("Band",), None, i) for i in range(2_500)]
    assert await catalog.add_many(many) == 2_500
    found = await catalog.get_many([m.id for m in many] + ["chinook:track:5"])
    assert len(found) == 2_501


async def test_add_many_counts_new_media_and_updates_known_ones(
    catalog: EmbeddedCatalog, database: Database
) -> None:
    renamed = Media(IMPORTED[0].id, "100% Pure Love (Radio Edit)", ("Crystal Waters",), None, 9)
    new = Media("spotify:track:0000000000000000000007", "Brand New", (), None, None)
    assert await catalog.add_many([renamed, new, new]) == 1
    found = await catalog.get_many([IMPORTED[0].id])
    assert found[IMPORTED[0].id] == renamed
    async with database.read() as conn:
        assert await conn.scalar(select(func.count()).select_from(catalog_media)) == 7
    assert await catalog.add_many([]) == 0


async def test_search_covers_chinook_then_imported_media(catalog: EmbeddedCatalog) -> None:
    ids = await search_ids(catalog, "PURE")
    chinook = [i for i in ids if i.startswith("chinook:")]
    assert chinook, "Chinook has tracks named '… Pure …'"
    assert ids[: len(chinook)] == chinook
    assert sorted(chinook, key=lambda i: int(i.rsplit(":", 1)[1])) == chinook
    assert ids[len(chinook) :] == [IMPORTED[1].id, IMPORTED[0].id]  # ordered by id


async def test_search_ignores_case_in_every_field(catalog: EmbeddedCatalog) -> None:
    assert await search_ids(catalog, "BEYONCÉ") == [IMPORTED[4].id]  # artist, non-ASCII
    assert await search_ids(catalog, "sasha fierce") == [IMPORTED[4].id]  # album
    assert await search_ids(catalog, "wild CARDS") == [IMPORTED[1].id]  # album
    assert await search_ids(catalog, "guido") == [IMPORTED[2].id]  # artist


async def test_wildcards_in_the_query_match_literally(catalog: EmbeddedCatalog) -> None:
    # Unescaped, '%' would match "100X Pure" and '_' "snakeXcase".
    assert await search_ids(catalog, "100% pure") == [IMPORTED[0].id]
    assert await search_ids(catalog, "snake_case") == [IMPORTED[2].id]
    assert await search_ids(catalog, "_") == [IMPORTED[2].id]
    percent = await search_ids(catalog, "%")
    assert percent == ["chinook:track:2242", "chinook:track:3166", IMPORTED[0].id]
    backslash = await catalog.search("\\", offset=0, limit=100)
    assert backslash.items[-1] == IMPORTED[5]
    assert all("\\" in m.title or "\\" in (m.album or "") for m in backslash.items)
    assert await search_ids(catalog, r"k\s") == [IMPORTED[5].id]


async def test_pages_span_chinook_and_imported_media_exactly_once(
    catalog: EmbeddedCatalog,
) -> None:
    every = await catalog.search("", offset=0, limit=1)
    assert every.total == 3_503 + len(IMPORTED)
    seen: list[str] = []
    offset = 3_490  # the last Chinook pages and the imported media
    while True:
        page = await catalog.search("", offset=offset, limit=4)
        assert page.offset == offset
        seen.extend(m.id for m in page.items)
        offset += len(page.items)
        if not page.has_next:
            break
    chinook = [f"chinook:track:{i}" for i in range(3_491, 3_504)]
    assert seen == chinook + sorted(m.id for m in IMPORTED)
    past = await catalog.search("", offset=every.total, limit=10)
    assert past.items == ()
    assert past.total == every.total


async def test_reserved_and_malformed_ids_are_refused(catalog: EmbeddedCatalog) -> None:
    with pytest.raises(ValueError, match="reserved"):
        await catalog.add_many([Media("chinook:track:1", "Fake", (), None, None)])
    with pytest.raises(ValueError, match="1–128"):
        await catalog.add_many([Media("x" * 129, "Long", (), None, None)])
    with pytest.raises(ValueError, match="1–128"):
        await catalog.add_many([Media("", "Empty", (), None, None)])


async def test_a_database_that_fails_is_catalog_unavailable(
    database: Database, tmp_path: Path
) -> None:
    # SQLite: a file without the table; PostgreSQL: nothing listens on port 1.
    broken = Database(
        database.url.set(database=str(tmp_path / "unmigrated.db"))
        if database.dialect == "sqlite"
        else database.url.set(port=1)
    )
    down = EmbeddedCatalog(broken)
    try:
        with pytest.raises(CatalogUnavailable):
            await down.get_many(["spotify:track:x"])
        with pytest.raises(CatalogUnavailable):
            await down.search("x", offset=0, limit=10)
        # Chinook alone needs no database at all.
        assert set(await down.get_many(["chinook:track:1"])) == {"chinook:track:1"}
    finally:
        await broken.dispose()
