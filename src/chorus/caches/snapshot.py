"""The snapshot of a PUBLIC playlist: what it holds and its JSON format.

A snapshot is the playlist header and its first page of live entries, read in
one SQL transaction at ``version`` (docs/full-profile.md). Under
:func:`~chorus.caches.keys.snapshot_key` it is compact JSON::

    {"v": 1, "version": 7, "playlist": {header fields}, "entries": [entry wire], "has_more": true}

``"v"`` (:data:`SNAPSHOT_FORMAT`) and ``"version"`` always come first: the
Lua scripts (:mod:`chorus.caches.scripts`) read the stored version with a
pattern instead of decoding the whole document.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Final, Literal, NotRequired, TypedDict, cast

from chorus.domain.changes import EntryWire, entry_from_wire, entry_to_wire
from chorus.domain.model import Entry, Playlist, PlaylistKind, Visibility

SNAPSHOT_FORMAT: Final = 1
"""The ``"v"`` of the snapshot JSON; bump it (and :data:`~chorus.caches.keys.KEY_PREFIX`)
on any format change. :mod:`chorus.caches.scripts` matches it too."""

SNAPSHOT_PAGE_SIZE = 50
"""Live entries a snapshot holds by default (``CHORUS_SNAPSHOT_PAGE_SIZE``): the
API's default first page."""


class PlaylistHeaderWire(TypedDict):
    """Every field of :class:`~chorus.domain.model.Playlist`; times are ISO 8601."""

    id: str
    owner_id: str
    title: str
    description: str | None
    visibility: str
    collaborative: bool
    version: int
    membership_epoch: int
    entry_count: int
    created_at: str
    updated_at: str
    deleted_at: str | None
    kind: NotRequired[str]
    """Absent from snapshots written before system playlists: ``PLAYLIST``."""


class SnapshotWire(TypedDict):
    v: Literal[1]  # SNAPSHOT_FORMAT
    version: int
    playlist: PlaylistHeaderWire
    entries: list[EntryWire]
    has_more: bool


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A playlist's header and its first live entries, as of ``version``.

    Attributes:
        version: the playlist version everything here was read at.
        playlist: the header (``playlist.version == version``).
        entries: the first live entries in list order.
        has_more: live entries follow the last of ``entries``.
    """

    version: int
    playlist: Playlist
    entries: tuple[Entry, ...]
    has_more: bool

    @classmethod
    def read(cls, playlist: Playlist, first_entries: Sequence[Entry], page_size: int) -> Snapshot:
        """The snapshot of a header and the first ``page_size + 1`` live entries read with it."""
        return cls(
            version=playlist.version,
            playlist=playlist,
            entries=tuple(first_entries[:page_size]),
            has_more=len(first_entries) > page_size,
        )

    def first_page(self, size: int) -> tuple[Sequence[Entry], bool] | None:
        """The first ``size`` live entries and whether more follow, or ``None``.

        ``None`` when the snapshot does not hold that many entries and more exist.
        """
        if size > len(self.entries) and self.has_more:
            return None
        return self.entries[:size], len(self.entries) > size or self.has_more

    def to_json(self) -> bytes:
        wire: SnapshotWire = {
            "v": SNAPSHOT_FORMAT,
            "version": self.version,
            "playlist": _header_to_wire(self.playlist),
            "entries": [entry_to_wire(e) for e in self.entries],
            "has_more": self.has_more,
        }
        return json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Snapshot:
        """The snapshot :meth:`to_json` wrote.

        Raises:
            ValueError: not a version-1 snapshot.
        """
        try:
            wire = cast(SnapshotWire, json.loads(data))
            if wire["v"] != SNAPSHOT_FORMAT:
                raise ValueError(f"snapshot format {wire['v']!r}")
            playlist = _header_from_wire(wire["playlist"])
            entries = tuple(entry_from_wire(e) for e in wire["entries"])
            snapshot = cls(wire["version"], playlist, entries, bool(wire["has_more"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a snapshot: {exc!r}") from None
        if snapshot.version != playlist.version:
            raise ValueError("snapshot and header versions differ")
        return snapshot


_TIMES = ("created_at", "updated_at", "deleted_at")


def _header_to_wire(playlist: Playlist) -> PlaylistHeaderWire:
    """Every field of the header, in field order; times as ISO 8601."""
    wire: dict[str, Any] = {f.name: getattr(playlist, f.name) for f in fields(playlist)}
    wire["visibility"] = playlist.visibility.value
    wire["kind"] = playlist.kind.value
    for name in _TIMES:
        wire[name] = wire[name].isoformat() if wire[name] is not None else None
    return cast(PlaylistHeaderWire, wire)


def _header_from_wire(wire: PlaylistHeaderWire) -> Playlist:
    """The header :func:`_header_to_wire` wrote.

    Raises:
        KeyError, TypeError, ValueError: a field is missing or malformed.
    """
    values: dict[str, Any] = {
        f.name: wire[f.name]  # type: ignore[literal-required]
        for f in fields(Playlist)
        if f.name != "kind"
    }
    values["visibility"] = Visibility(values["visibility"])
    values["kind"] = PlaylistKind(wire.get("kind", PlaylistKind.PLAYLIST.value))
    for name in _TIMES:
        values[name] = datetime.fromisoformat(values[name]) if values[name] is not None else None
    return Playlist(**values)
