"""The packaged Chinook catalogue through EmbeddedCatalog, without a database.

Expectations come from the raw JSON file, read here independently of the
catalog's own loader and matching code.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from chorus.catalog import EmbeddedCatalog, Media, chinook_playlists
from chorus.catalog.chinook import load_chinook


def _raw() -> Any:
    path = resources.files("chorus.catalog").joinpath("data", "chinook-music.json")
    return json.loads(path.read_text(encoding="utf-8"))


RAW = _raw()
ALBUMS = {a["id"]: a for a in RAW["albums"]}
ARTISTS = {a["id"]: a["name"] for a in RAW["artists"]}


def _fields(track: dict[str, Any]) -> list[str]:
    album = ALBUMS[track["album_id"]]
    return [track["name"], ARTISTS[album["artist_id"]], album["title"]]


def expected_ids(query: str) -> list[str]:
    """Chinook ids matching ``query`` in track id order: the oracle."""
    q = query.strip().casefold()
    return [
        f"chinook:track:{t['id']}"
        for t in sorted(RAW["tracks"], key=lambda t: t["id"])
        if any(q in f.casefold() for f in _fields(t))
    ]


async def all_pages(catalog: EmbeddedCatalog, query: str, size: int) -> list[str]:
    ids: list[str] = []
    offset = 0
    while True:
        page = await catalog.search(query, offset=offset, limit=size)
        assert page.offset == offset
        assert len(page.items) <= size
        ids.extend(m.id for m in page.items)
        if not page.has_next:
            return ids
        assert len(page.items) == size
        offset += size


@pytest.fixture
def catalog() -> EmbeddedCatalog:
    return EmbeddedCatalog()


async def test_the_catalogue_has_every_chinook_track(catalog: EmbeddedCatalog) -> None:
    page = await catalog.search("", offset=0, limit=5)
    assert page.total == len(RAW["tracks"]) == 3_503
    assert [m.id for m in page.items] == [f"chinook:track:{i}" for i in range(1, 6)]
    every = [f"chinook:track:{t['id']}" for t in RAW["tracks"]]
    assert set(await catalog.get_many(every)) == set(every)


async def test_get_many_returns_known_ids_and_omits_unknown_ones(
    catalog: EmbeddedCatalog,
) -> None:
    found = await catalog.get_many(
        ["chinook:track:1", "chinook:track:3503", "chinook:track:3504", "spotify:track:x", ""]
    )
    assert set(found) == {"chinook:track:1", "chinook:track:3503"}
    assert found["chinook:track:1"] == Media(
        id="chinook:track:1",
        title="For Those About To Rock (We Salute You)",
        artists=("AC/DC",),
        album="For Those About To Rock We Salute You",
        duration_ms=343_719,
        available=True,
    )
    assert await catalog.get_many([]) == {}


async def test_get_many_accepts_repeated_ids(catalog: EmbeddedCatalog) -> None:
    found = await catalog.get_many(["chinook:track:2"] * 3)
    assert list(found) == ["chinook:track:2"]


@pytest.mark.parametrize(
    "query",
    [
        "ac/dc",  # artist only
        "BALLS TO THE WALL",  # title and album
        "for those about",  # title and album, different spelling of each
        "vocÊ",  # non-ASCII case folding
        "Lost, Season",  # album of TV episodes
        "iron maiden",
        "love",
    ],
)
async def test_search_matches_title_artist_or_album_ignoring_case(
    catalog: EmbeddedCatalog, query: str
) -> None:
    expected = expected_ids(query)
    assert expected, "the oracle must find something for this query"
    page = await catalog.search(query, offset=0, limit=100)
    assert page.total == len(expected)
    assert [m.id for m in page.items] == expected[:100]


async def test_search_finds_a_track_by_its_album_only(catalog: EmbeddedCatalog) -> None:
    # "Restless and Wild" is an album of Accept whose tracks have other names.
    page = await catalog.search("restless and wild", offset=0, limit=10)
    titles = {m.title for m in page.items}
    assert page.total == 3
    assert "Fast As a Shark" in titles
    assert all(m.album == "Restless and Wild" for m in page.items)


async def test_search_pages_cover_every_match_exactly_once(catalog: EmbeddedCatalog) -> None:
    expected = expected_ids("the")
    assert len(expected) > 500
    pages = await all_pages(catalog, "the", size=97)
    assert pages == expected
    assert len(set(pages)) == len(pages)


async def test_a_page_past_the_end_is_empty(catalog: EmbeddedCatalog) -> None:
    page = await catalog.search("ac/dc", offset=1_000, limit=10)
    assert page.items == ()
    assert page.total == len(expected_ids("ac/dc"))
    assert not page.has_next


async def test_blank_query_matches_everything(catalog: EmbeddedCatalog) -> None:
    assert (await catalog.search("  \t ", offset=0, limit=1)).total == 3_503


async def test_wildcards_match_literally(catalog: EmbeddedCatalog) -> None:
    percent = await catalog.search("%", offset=0, limit=10)
    assert [m.title for m in percent.items] == ["100% HardCore", ".07%"]
    assert (await catalog.search("_", offset=0, limit=10)).total == 0
    assert (await catalog.search("100%", offset=0, limit=10)).total == 1


async def test_a_query_cannot_match_across_two_fields(catalog: EmbeddedCatalog) -> None:
    # Title "Balls to the Wall" then artist "Accept": no field holds both.
    assert (await catalog.search("wall accept", offset=0, limit=10)).total == 0
    assert (await catalog.search("wall\naccept", offset=0, limit=10)).total == 0


async def test_search_refuses_a_negative_offset_or_an_empty_page(
    catalog: EmbeddedCatalog,
) -> None:
    with pytest.raises(ValueError, match="offset"):
        await catalog.search("a", offset=-1, limit=10)
    with pytest.raises(ValueError, match="limit"):
        await catalog.search("a", offset=0, limit=0)


async def test_without_a_database_nothing_can_be_imported(catalog: EmbeddedCatalog) -> None:
    with pytest.raises(RuntimeError, match="no database"):
        await catalog.add_many([Media("spotify:track:1", "t", (), None, None)])


def test_chinook_playlists_keep_the_source_order() -> None:
    playlists = chinook_playlists()
    assert [name for name, _ in playlists] == [p["name"] for p in RAW["playlists"]]
    assert len(playlists) == 18
    name, music = playlists[0]
    assert name == "Music"
    assert len(music) == 3_290
    assert music == [f"chinook:track:{t}" for t in RAW["playlists"][0]["track_ids"]]
    assert playlists[1] == ("Movies", [])


def test_the_catalogue_is_read_once_and_kept() -> None:
    # Once per process, not per request: what keeps catalogue lookups cheap. (It was a
    # wall-clock bound, which a loaded CI machine broke: 0.70 s against 0.5.)
    load_chinook.cache_clear()
    chinook = load_chinook()
    assert len(chinook.media) == 3_503
    assert load_chinook() is chinook
    assert load_chinook.cache_info().misses == 1


def test_nothing_is_loaded_at_import_time() -> None:
    code = (
        "import chorus.catalog, chorus.importers\n"
        "from chorus.catalog.chinook import load_chinook\n"
        "assert load_chinook.cache_info().currsize == 0\n"
        "chorus.catalog.chinook_playlists()\n"
        "assert load_chinook.cache_info().currsize == 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_data_and_its_licence_are_package_data() -> None:
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["chorus"]
    for name in ("chinook-music.json", "chinook-LICENSE.md"):
        assert any(fnmatch.fnmatch(f"catalog/data/{name}", p) for p in patterns), name
    licence = resources.files("chorus.catalog").joinpath("data", "chinook-LICENSE.md")
    assert "Permission is hereby granted" in licence.read_text(encoding="utf-8")
