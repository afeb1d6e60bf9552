"""Importers on SQLite and PostgreSQL: Chinook playlists and an MPD slice."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from chorus.catalog import EmbeddedCatalog, chinook_playlists
from chorus.db import repository
from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.db.tables import catalog_media, playlist, playlist_entry, playlist_mutation
from chorus.domain.limits import Limits
from chorus.domain.model import Visibility
from chorus.importers import ImportFailed, import_chinook, import_mpd

MPD_SLICE = Path(__file__).parents[1] / "data" / "mpd-slice.json"
OWNER = "importer"


async def media_ids(database: Database, playlist_id: str) -> list[str]:
    async with database.read() as conn:
        entries = await repository.entries_page(conn, playlist_id, limit=20_000)
    return [e.media_id for e in entries]


async def counts(database: Database) -> tuple[int, ...]:
    async with database.read() as conn:
        return tuple(
            [
                int(await conn.scalar(select(func.count()).select_from(table)) or 0)
                for table in (playlist, playlist_entry, playlist_mutation, catalog_media)
            ]
        )


# --- Chinook -----------------------------------------------------------------


async def test_import_chinook_creates_the_18_playlists_in_source_order(
    store: PlaylistStore, database: Database
) -> None:
    imported = await import_chinook(store, OWNER)
    source = chinook_playlists()
    assert len(imported) == 18
    assert [p.name for p in imported] == [name for name, _ in source]
    assert len({p.playlist_id for p in imported}) == 18
    music = imported[0]
    assert (music.name, music.entries, music.replayed) == ("Music", 3_290, False)
    assert await media_ids(database, music.playlist_id) == source[0][1]
    for result, (_, expected) in zip(imported, source, strict=True):
        assert result.entries == len(expected)
    async with database.read() as conn:
        header = await repository.get_playlist(conn, music.playlist_id)
        empty = await repository.get_playlist(conn, imported[1].playlist_id)
    assert header is not None
    assert empty is not None
    assert (header.owner_id, header.visibility, header.collaborative) == (
        OWNER,
        Visibility.PUBLIC,
        False,
    )
    assert header.entry_count == 3_290
    assert header.version == 33  # creation, then 33 adds of ≤ 100 media
    assert (imported[1].name, empty.entry_count, empty.version) == ("Movies", 0, 0)


async def test_import_chinook_again_imports_nothing_new(
    store: PlaylistStore, database: Database
) -> None:
    first = await import_chinook(store, OWNER)
    before = await counts(database)
    again = await import_chinook(store, OWNER)
    assert await counts(database) == before
    assert [p.playlist_id for p in again] == [p.playlist_id for p in first]
    assert all(p.replayed for p in again)
    assert [p.entries for p in again] == [p.entries for p in first]


async def test_an_interrupted_import_is_completed_by_the_next_run(
    store: PlaylistStore, database: Database
) -> None:
    # A store whose adds fail after the first few, as if the process died mid-import.
    class Dying(PlaylistStore):
        budget = 5

        async def execute(self, command: Any, actor_id: str) -> Any:
            if self.budget == 0:
                raise RuntimeError("killed")
            self.budget -= 1
            return await super().execute(command, actor_id)

    with pytest.raises(RuntimeError, match="killed"):
        await import_chinook(Dying(database), OWNER)
    imported = await import_chinook(store, OWNER)
    assert not imported[0].replayed
    assert await media_ids(database, imported[0].playlist_id) == chinook_playlists()[0][1]
    async with database.read() as conn:
        assert await conn.scalar(select(func.count()).select_from(playlist)) == 18


async def test_another_visibility_for_an_imported_owner_is_a_clear_failure(
    store: PlaylistStore,
) -> None:
    await import_chinook(store, OWNER)
    with pytest.raises(ImportFailed, match="'Music' \\(chinook:1\\) could not be imported"):
        await import_chinook(store, OWNER, visibility=Visibility.PRIVATE)


# --- Million Playlist Dataset --------------------------------------------------


def mpd_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(MPD_SLICE.read_text(encoding="utf-8"))
    return document


async def test_import_mpd_creates_playlists_and_catalog_media(
    store: PlaylistStore, database: Database
) -> None:
    catalog = EmbeddedCatalog(database)
    document = mpd_document()
    imported = await import_mpd(MPD_SLICE, store, catalog, OWNER)
    assert [(p.name, p.entries) for p in imported] == [
        (p["name"], len(p["tracks"])) for p in document["playlists"]
    ]
    for result, source in zip(imported, document["playlists"], strict=True):
        by_pos = sorted(source["tracks"], key=lambda t: t["pos"])
        assert await media_ids(database, result.playlist_id) == [t["track_uri"] for t in by_pos]
        async with database.read() as conn:
            header = await repository.get_playlist(conn, result.playlist_id)
        assert header is not None
        assert header.collaborative is (source["collaborative"] == "true")
    # The third playlist lists its tracks out of order in the file.
    assert [t["pos"] for t in document["playlists"][2]["tracks"]] != list(range(6))
    tracks = {t["track_uri"]: t for p in document["playlists"] for t in p["tracks"]}
    found = await catalog.get_many(list(tracks))
    assert set(found) == set(tracks)
    humble = next(m for m in found.values() if m.title == "HUMBLE.")
    assert (humble.artists, humble.album, humble.duration_ms) == (
        ("Kendrick Lamar",),
        "DAMN.",
        177_000,
    )
    page = await catalog.search("THE KILLERS", offset=0, limit=10)
    assert {m.title for m in page.items} == {"Mr. Brightside", "Somebody Told Me"}
    percent = await catalog.search("100%", offset=0, limit=10)
    assert [m.title for m in percent.items] == ["100% HardCore", "100% Pure Love"]


async def test_import_mpd_again_imports_nothing_new(
    store: PlaylistStore, database: Database
) -> None:
    catalog = EmbeddedCatalog(database)
    first = await import_mpd(MPD_SLICE, store, catalog, OWNER)
    before = await counts(database)
    again = await import_mpd(MPD_SLICE, store, catalog, OWNER)
    assert await counts(database) == before
    assert before[3] == 20  # distinct tracks in the slice
    assert [p.playlist_id for p in again] == [p.playlist_id for p in first]
    assert all(p.replayed for p in again)


async def test_import_mpd_limit_takes_the_first_playlists(
    store: PlaylistStore, database: Database
) -> None:
    imported = await import_mpd(MPD_SLICE, store, EmbeddedCatalog(database), OWNER, limit=1)
    assert [p.name for p in imported] == ["Throwbacks"]
    assert (await counts(database))[3] == 8


async def test_long_playlists_are_cut_at_the_entry_limit_with_a_warning(
    database: Database,
) -> None:
    store = PlaylistStore(database, limits=Limits(max_entries=5, max_media_per_add=2))
    imported = await import_mpd(MPD_SLICE, store, EmbeddedCatalog(database), OWNER)
    throwbacks = imported[0]
    assert throwbacks.entries == 5
    assert throwbacks.warnings == (
        "'Throwbacks' has 8 tracks; only the first 5 were imported (the entry limit of a playlist)",
    )
    assert len(await media_ids(database, throwbacks.playlist_id)) == 5
    gym_rap = imported[2]
    assert (gym_rap.name, gym_rap.entries, len(gym_rap.warnings)) == ("Gym rap", 5, 1)
    assert len(await media_ids(database, gym_rap.playlist_id)) == 5


def _broken(edit: str) -> Any:
    document = mpd_document()
    playlists = document["playlists"]
    track = playlists[1]["tracks"][3]
    match edit:
        case "top level list":
            return [document]
        case "no playlists":
            return {"info": document["info"]}
        case "playlists not a list":
            document["playlists"] = {"0": playlists[0]}
        case "playlist not an object":
            playlists[2] = "Gym rap"
        case "missing name":
            del playlists[1]["name"]
        case "blank name":
            playlists[1]["name"] = "   "
        case "pid a string":
            playlists[1]["pid"] = "1"
        case "duplicate pid":
            playlists[2]["pid"] = playlists[0]["pid"]
        case "collaborative maybe":
            playlists[1]["collaborative"] = "maybe"
        case "tracks missing":
            del playlists[1]["tracks"]
        case "track_uri a number":
            track["track_uri"] = 42
        case "track_uri too long":
            track["track_uri"] = "spotify:track:" + "x" * 200
        case "track_name null":
            track["track_name"] = None
        case "duration a string":
            track["duration_ms"] = "3:45"
        case "duration true":
            track["duration_ms"] = True
        case "duration past a GraphQL Int":
            track["duration_ms"] = 3_000_000_000
        case "duration negative":
            track["duration_ms"] = -1
        case "track_name with an escape":
            track["track_name"] = "Song\u001b[31m"
        case "album_name with a lone surrogate":
            track["album_name"] = "\ud800"
        case "pos missing":
            del track["pos"]
        case "pos repeated":
            track["pos"] = 0
    return document


MALFORMED = [
    ("top level list", "expected a JSON object, got an array"),
    ("no playlists", "missing field 'playlists'"),
    ("playlists not a list", "playlists: expected an array, got an object"),
    ("playlist not an object", "playlists[2]: expected an object, got a string"),
    ("missing name", "playlists[1]: missing field 'name'"),
    ("blank name", "playlists[1].name: title must not be empty"),
    ("pid a string", "playlists[1].pid: expected an integer, got a string"),
    ("duplicate pid", "playlists[2].pid: pid 0 appears twice"),
    (
        "collaborative maybe",
        'playlists[1].collaborative: expected "true" or "false", got \'maybe\'',
    ),
    ("tracks missing", "playlists[1]: missing field 'tracks'"),
    ("track_uri a number", "playlists[1].tracks[3].track_uri: expected a string, got an integer"),
    ("track_uri too long", "playlists[1].tracks[3].track_uri: track_uri must be 1–128"),
    ("track_name null", "playlists[1].tracks[3].track_name: expected a string, got null"),
    ("duration a string", "playlists[1].tracks[3].duration_ms: expected an integer, got a string"),
    ("duration true", "playlists[1].tracks[3].duration_ms: expected an integer, got a boolean"),
    (
        "duration past a GraphQL Int",
        "playlists[1].tracks[3].duration_ms: must be between 0 and 2147483647",
    ),
    ("duration negative", "playlists[1].tracks[3].duration_ms: must be between 0 and"),
    ("track_name with an escape", "playlists[1].tracks[3].track_name: must not contain control"),
    (
        "album_name with a lone surrogate",
        "playlists[1].tracks[3].album_name: must not contain control",
    ),
    ("pos missing", "playlists[1].tracks[3]: missing field 'pos'"),
    ("pos repeated", "playlists[1].tracks[3].pos: position 0 appears twice"),
]


@pytest.mark.parametrize(("edit", "message"), MALFORMED, ids=[e for e, _ in MALFORMED])
async def test_a_malformed_mpd_file_fails_clearly_and_stores_nothing(
    store: PlaylistStore, database: Database, tmp_path: Path, edit: str, message: str
) -> None:
    path = tmp_path / "mpd.slice.0-999.json"
    path.write_text(json.dumps(_broken(edit)), encoding="utf-8")
    with pytest.raises(ImportFailed) as raised:
        await import_mpd(path, store, EmbeddedCatalog(database), OWNER)
    assert str(raised.value).startswith(f"{path}: {message}")
    assert await counts(database) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"playlists": [', "not a JSON file"),
        (b"\xff\xfe not utf-8", "not a JSON file"),
        (b"", "not a JSON file"),
        (b"[" * 100_000, "arrays or objects nested too deep"),
    ],
)
async def test_a_file_that_is_not_json_fails_clearly(
    store: PlaylistStore, database: Database, tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ImportFailed, match=message):
        await import_mpd(path, store, EmbeddedCatalog(database), OWNER)
    assert await counts(database) == (0, 0, 0, 0)


async def test_a_file_that_is_not_a_regular_file_is_not_read(
    store: PlaylistStore, database: Database
) -> None:
    with pytest.raises(ImportFailed, match="not a regular file"):  # it would never end
        await import_mpd(Path("/dev/zero"), store, EmbeddedCatalog(database), OWNER)


async def test_a_missing_file_fails_clearly(store: PlaylistStore, database: Database) -> None:
    with pytest.raises(ImportFailed, match="cannot be read"):
        await import_mpd(Path("/nonexistent/mpd.json"), store, EmbeddedCatalog(database), OWNER)


async def test_collaborative_may_be_a_boolean(
    store: PlaylistStore, database: Database, tmp_path: Path
) -> None:
    document = copy.deepcopy(mpd_document())
    document["playlists"][0]["collaborative"] = True
    path = tmp_path / "bools.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    imported = await import_mpd(path, store, EmbeddedCatalog(database), OWNER, limit=1)
    async with database.read() as conn:
        header = await repository.get_playlist(conn, imported[0].playlist_id)
    assert header is not None
    assert header.collaborative is True
