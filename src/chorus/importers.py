"""Importers: real playlists into Chorus, through the ordinary domain commands.

Two sources:

* :func:`import_chinook` — the 18 playlists of the packaged Chinook sample
  ("Music" has 3,290 tracks);
* :func:`import_mpd` — a slice file of the Million Playlist Dataset
  (Spotify, ``mpd.slice.*.json``): its tracks go into the embedded catalog,
  its playlists into the store.

Each playlist is a ``CreatePlaylist`` followed by ``AddEntries`` of at most
``limits.max_media_per_add`` media, appended in source order, each with the
version the previous command committed as its base version. Operation ids
come from the source (``import:chinook:{id}:create``, ``import:chinook:{id}:
{chunk}``; ``import:mpd:{pid}:…``) and are scoped to the owner, so running an
import again — or after it was interrupted — replays what was committed and
commits only what is missing: nothing is duplicated.

A source that cannot be read raises :class:`ImportFailed` naming the file and
the offending field; an MPD file is checked completely before anything is
stored.
"""

from __future__ import annotations

import json
import stat
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chorus.catalog.chinook import load_chinook
from chorus.catalog.embedded import EmbeddedCatalog
from chorus.catalog.protocol import CatalogUnavailable, Media
from chorus.db.store import PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.errors import DomainError
from chorus.domain.model import Visibility
from chorus.domain.validation import check_id, clean_title


class ImportFailed(Exception):
    """An import could not be done; the message says which file and field, and why."""


@dataclass(frozen=True, slots=True)
class ImportedPlaylist:
    """One playlist an import created (or found already imported).

    Attributes:
        playlist_id: the Chorus playlist id.
        name: its title.
        entries: how many entries the import appended.
        replayed: ``True`` when every command of it had been committed by an
            earlier run, so this run changed nothing.
        warnings: what was not imported as is (e.g. tracks past the entry limit).
    """

    playlist_id: str
    name: str
    entries: int
    replayed: bool = False
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Source:
    key: str
    """Unique within the source kind, e.g. ``"chinook:1"``; names the operation ids."""
    name: str
    media_ids: tuple[str, ...]
    collaborative: bool = False


async def _import_playlist(
    store: PlaylistStore, owner_id: str, source: _Source, visibility: Visibility
) -> ImportedPlaylist:
    limits = store.limits
    media_ids = source.media_ids
    warnings: list[str] = []
    if len(media_ids) > limits.max_entries:
        warnings.append(
            f"{source.name!r} has {len(media_ids)} tracks; only the first "
            f"{limits.max_entries} were imported (the entry limit of a playlist)"
        )
        media_ids = media_ids[: limits.max_entries]
    try:
        created = await store.create(
            CreatePlaylist(
                operation_id=f"import:{source.key}:create",
                title=source.name,
                visibility=visibility,
                collaborative=source.collaborative,
            ),
            owner_id,
        )
        playlist_id, version = created.outcome.playlist_id, created.outcome.version
        replayed = created.replayed
        step = limits.max_media_per_add
        for chunk, start in enumerate(range(0, len(media_ids), step)):
            added = await store.execute(
                AddEntries(
                    playlist_id=playlist_id,
                    operation_id=f"import:{source.key}:{chunk}",
                    base_version=version,
                    media_ids=media_ids[start : start + step],
                ),
                owner_id,
            )
            version, replayed = added.outcome.version, replayed and added.replayed
    except DomainError as exc:
        raise ImportFailed(
            f"playlist {source.name!r} ({source.key}) could not be imported: {exc.message}"
            " (imported before with other settings or content, or changed since?)"
        ) from exc
    return ImportedPlaylist(playlist_id, source.name, len(media_ids), replayed, tuple(warnings))


async def import_chinook(
    store: PlaylistStore, owner_id: str, *, visibility: Visibility = Visibility.PUBLIC
) -> list[ImportedPlaylist]:
    """Create the 18 Chinook sample playlists for ``owner_id``, empty ones included.

    Args:
        store: where the playlists go.
        owner_id: the user who owns (and authors) them.
        visibility: of every playlist; they are not collaborative.

    Returns:
        One :class:`ImportedPlaylist` per Chinook playlist, in Chinook id order.

    Raises:
        ImportFailed: a playlist was imported before by this owner with other
            settings (e.g. another ``visibility``), or was changed in a way
            that stops the import from completing it.
    """
    return [
        await _import_playlist(
            store, owner_id, _Source(f"chinook:{p.source_id}", p.name, p.media_ids), visibility
        )
        for p in load_chinook().playlists
    ]


# --- Million Playlist Dataset ------------------------------------------------


_JSON_NAMES: dict[type, str] = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}


MAX_MPD_FILE_BYTES = 256 * 2**20
"""The largest slice file ``import mpd`` reads (it reads a file whole)."""

MAX_DURATION_MS = 2**31 - 1
"""The longest track duration: ``Media.durationMs`` is a GraphQL Int (32-bit signed)."""


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


class _Reader:
    """Typed access to decoded JSON, failing with the path of the bad field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> ImportFailed:
        return ImportFailed(
            f"{self.path}: {where}: {problem}" if where else f"{self.path}: {problem}"
        )

    def get(
        self, obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str
    ) -> Any:
        """``obj[key]``, which must be of ``kind`` (a JSON true is not an integer)."""
        if key not in obj:
            raise self.fail(where, f"missing field {key!r}")
        value = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            expected = " or ".join(_JSON_NAMES[k] for k in kinds)
            field = f"{where}.{key}" if where else key
            raise self.fail(field, f"expected {expected}, got {_json_type(value)}")
        return value


def _parse_collaborative(reader: _Reader, value: bool | str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise reader.fail(where, f'expected "true" or "false", got {value!r}')


def _read_mpd(
    path: Path, store: PlaylistStore, limit: int | None
) -> tuple[list[_Source], list[Media]]:
    """The playlists (tracks in ``pos`` order) and the distinct tracks of a slice file."""
    reader = _Reader(path)
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):  # /dev/zero, a FIFO: never read whole
            raise ImportFailed(f"{path}: not a regular file")
        if status.st_size > MAX_MPD_FILE_BYTES:
            raise ImportFailed(
                f"{path}: larger than {MAX_MPD_FILE_BYTES // 2**20} MiB; "
                "a Million Playlist Dataset slice is about 33 MiB"
            )
        document = json.loads(path.read_bytes())
    except OSError as exc:
        raise ImportFailed(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise ImportFailed(f"{path}: not a JSON file ({exc})") from None
    except RecursionError:
        raise ImportFailed(f"{path}: not a slice (arrays or objects nested too deep)") from None
    if not isinstance(document, dict):
        raise reader.fail("", f"expected a JSON object, got {_json_type(document)}")
    raw_playlists = reader.get(document, "playlists", list, "")
    if limit is not None:
        raw_playlists = raw_playlists[:limit]
    sources: list[_Source] = []
    media: dict[str, Media] = {}
    seen_pids: set[int] = set()
    for i, raw in enumerate(raw_playlists):
        where = f"playlists[{i}]"
        if not isinstance(raw, dict):
            raise reader.fail(where, f"expected an object, got {_json_type(raw)}")
        pid = reader.get(raw, "pid", int, where)
        if pid in seen_pids:
            raise reader.fail(f"{where}.pid", f"pid {pid} appears twice")
        seen_pids.add(pid)
        try:
            name = clean_title(reader.get(raw, "name", str, where), store.limits)
        except DomainError as exc:
            raise reader.fail(f"{where}.name", exc.message) from None
        collaborative = _parse_collaborative(
            reader, reader.get(raw, "collaborative", (bool, str), where), f"{where}.collaborative"
        )
        tracks: dict[int, str] = {}
        for j, track in enumerate(reader.get(raw, "tracks", list, where)):
            twhere = f"{where}.tracks[{j}]"
            if not isinstance(track, dict):
                raise reader.fail(twhere, f"expected an object, got {_json_type(track)}")
            item = _read_track(reader, track, twhere, store)
            pos = reader.get(track, "pos", int, twhere)
            if pos in tracks:
                raise reader.fail(f"{twhere}.pos", f"position {pos} appears twice")
            tracks[pos] = item.id
            media.setdefault(item.id, item)  # the first description of a track wins
        ordered = tuple(tracks[p] for p in sorted(tracks))
        sources.append(_Source(f"mpd:{pid}", name, ordered, collaborative))
    return sources, list(media.values())


def _read_track(
    reader: _Reader, track: Mapping[str, Any], where: str, store: PlaylistStore
) -> Media:
    uri = reader.get(track, "track_uri", str, where)
    try:
        check_id(uri, ("track_uri",), store.limits, "track_uri")
    except DomainError as exc:
        raise reader.fail(f"{where}.track_uri", exc.message) from None
    if uri.startswith("chinook:"):
        raise reader.fail(f"{where}.track_uri", "the chinook: prefix is reserved")
    duration_ms = reader.get(track, "duration_ms", int, where)
    if not 0 <= duration_ms <= MAX_DURATION_MS:
        raise reader.fail(
            f"{where}.duration_ms", f"must be between 0 and {MAX_DURATION_MS} (a GraphQL Int)"
        )
    return Media(
        id=uri,
        title=_text(reader, track, "track_name", where),
        artists=(_text(reader, track, "artist_name", where),),
        album=_text(reader, track, "album_name", where),
        duration_ms=duration_ms,
    )


def _text(reader: _Reader, track: Mapping[str, Any], key: str, where: str) -> str:
    """A track's text field, without control characters or lone surrogates."""
    value: str = reader.get(track, key, str, where)
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in value):
        raise reader.fail(f"{where}.{key}", "must not contain control characters")
    return value


async def import_mpd(
    path: Path,
    store: PlaylistStore,
    catalog: EmbeddedCatalog,
    owner_id: str,
    *,
    limit: int | None = None,
    visibility: Visibility = Visibility.PUBLIC,
) -> list[ImportedPlaylist]:
    """Import a Million Playlist Dataset slice: tracks into ``catalog``, playlists into ``store``.

    The file is a JSON object ``{"playlists": [{"name", "collaborative"
    ("true"/"false", or a boolean), "pid", "tracks": [{"track_uri",
    "track_name", "artist_name", "album_name", "duration_ms", "pos"}, …]},
    …]}``; other fields (``info``, ``num_followers``, …) are ignored. A
    track's media id is its ``track_uri``; entries follow ``pos``.

    Args:
        path: the slice file (``mpd.slice.0-999.json`` or alike).
        store: where the playlists go.
        catalog: the embedded catalog that gets the tracks.
        owner_id: the user who owns the playlists.
        limit: import only the first ``limit`` playlists of the file.
        visibility: of every playlist.

    Returns:
        One :class:`ImportedPlaylist` per playlist, in file order; a playlist
        longer than the entry limit is cut there, with a warning.

    Raises:
        ImportFailed: the file cannot be read, is not JSON, or a field is
            missing or has the wrong type (nothing was stored); or a playlist
            with the same ``pid`` was imported before by this owner with other
            content.
        ValueError: ``limit`` is negative.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative")
    sources, media = _read_mpd(path, store, limit)
    try:
        await catalog.add_many(media)
    except CatalogUnavailable as exc:
        raise ImportFailed(f"{path}: the tracks could not be stored in the catalog") from exc
    return [await _import_playlist(store, owner_id, source, visibility) for source in sources]
