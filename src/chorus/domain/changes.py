"""Canonical changes: what an accepted command did, fully resolved.

A version of a playlist is a list of changes with every entry id and position
key as assigned, so replaying the changes from version 0 rebuilds the exact
list, and undoing them (they carry the previous values) gives an older state
for a revert. The same changes go into the mutation log and, as a
:class:`PlaylistEvent`, into the outbox (DESIGN §3).

Wire shapes are ``TypedDict`` with a ``Literal`` ``type`` field; the event
carries ``"v": 1`` (:data:`WIRE_VERSION`) so consumers can refuse a format
they do not know.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict, assert_never

from chorus.domain.model import Entry, PlaylistKind, Role, Visibility

WIRE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Details:
    """The user-visible settings of a playlist."""

    title: str
    description: str | None
    visibility: Visibility
    collaborative: bool


@dataclass(frozen=True, slots=True)
class PlaylistCreated:
    """Version 0 of every playlist."""

    owner_id: str
    details: Details
    created_at: datetime
    kind: PlaylistKind = PlaylistKind.PLAYLIST


@dataclass(frozen=True, slots=True)
class EntriesAdded:
    """New live entries, in list order; a revert re-adds old ids here too."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Move:
    entry: Entry
    previous_position_key: str


@dataclass(frozen=True, slots=True)
class EntriesMoved:
    """Entries with a new position key (a user's move or a rebalance)."""

    moves: tuple[Move, ...]


@dataclass(frozen=True, slots=True)
class EntriesRemoved:
    """Entries that became tombstones, as they were just before."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class DetailsUpdated:
    details: Details
    previous: Details


@dataclass(frozen=True, slots=True)
class MembersChanged:
    """``user_id`` now holds ``role`` (``None``: no longer a member)."""

    user_id: str
    role: Role | None
    previous_role: Role | None


@dataclass(frozen=True, slots=True)
class PlaylistDeleted:
    deleted_at: datetime


Change = (
    PlaylistCreated
    | EntriesAdded
    | EntriesMoved
    | EntriesRemoved
    | DetailsUpdated
    | MembersChanged
    | PlaylistDeleted
)


# --- wire format -----------------------------------------------------------


class EntryWire(TypedDict):
    entry_id: str
    position_key: str
    media_id: str
    added_by: str
    added_at: str


class MoveWire(EntryWire):
    previous_position_key: str


class DetailsWire(TypedDict):
    title: str
    description: str | None
    visibility: str
    collaborative: bool


class PlaylistCreatedWire(TypedDict):
    type: Literal["PlaylistCreated"]
    owner_id: str
    details: DetailsWire
    created_at: str
    kind: NotRequired[str]
    """Absent in versions written before system playlists: ``PLAYLIST``."""


class EntriesAddedWire(TypedDict):
    type: Literal["EntriesAdded"]
    entries: list[EntryWire]


class EntriesMovedWire(TypedDict):
    type: Literal["EntriesMoved"]
    moves: list[MoveWire]


class EntriesRemovedWire(TypedDict):
    type: Literal["EntriesRemoved"]
    entries: list[EntryWire]


class DetailsUpdatedWire(TypedDict):
    type: Literal["DetailsUpdated"]
    details: DetailsWire
    previous: DetailsWire


class MembersChangedWire(TypedDict):
    type: Literal["MembersChanged"]
    user_id: str
    role: str | None
    previous_role: str | None


class PlaylistDeletedWire(TypedDict):
    type: Literal["PlaylistDeleted"]
    deleted_at: str


ChangeWire = (
    PlaylistCreatedWire
    | EntriesAddedWire
    | EntriesMovedWire
    | EntriesRemovedWire
    | DetailsUpdatedWire
    | MembersChangedWire
    | PlaylistDeletedWire
)


class PlaylistEvent(TypedDict):
    """One committed version, as the outbox, Kafka and Redis carry it."""

    v: int
    type: Literal["PlaylistChanged"]
    playlist_id: str
    version: int
    operation_id: str
    actor_id: str
    committed_at: str
    changes: list[ChangeWire]


def entries_in(changes: Iterable[Change]) -> int:
    """Entries that ``changes`` add, remove or move (a version's weight in entries)."""
    total = 0
    for change in changes:
        if isinstance(change, EntriesAdded | EntriesRemoved):
            total += len(change.entries)
        elif isinstance(change, EntriesMoved):
            total += len(change.moves)
    return total


def entry_to_wire(entry: Entry) -> EntryWire:
    return {
        "entry_id": entry.entry_id,
        "position_key": entry.position_key,
        "media_id": entry.media_id,
        "added_by": entry.added_by,
        "added_at": entry.added_at.isoformat(),
    }


def entry_from_wire(wire: EntryWire) -> Entry:
    return Entry(
        entry_id=wire["entry_id"],
        position_key=wire["position_key"],
        media_id=wire["media_id"],
        added_by=wire["added_by"],
        added_at=datetime.fromisoformat(wire["added_at"]),
    )


def _details_wire(details: Details) -> DetailsWire:
    return {
        "title": details.title,
        "description": details.description,
        "visibility": details.visibility.value,
        "collaborative": details.collaborative,
    }


def _details(wire: DetailsWire) -> Details:
    return Details(
        title=wire["title"],
        description=wire["description"],
        visibility=Visibility(wire["visibility"]),
        collaborative=wire["collaborative"],
    )


def encode_change(change: Change) -> ChangeWire:
    """The JSON-ready form of ``change``."""
    match change:
        case PlaylistCreated():
            created: PlaylistCreatedWire = {
                "type": "PlaylistCreated",
                "owner_id": change.owner_id,
                "details": _details_wire(change.details),
                "created_at": change.created_at.isoformat(),
            }
            if change.kind is not PlaylistKind.PLAYLIST:
                created["kind"] = change.kind.value
            return created
        case EntriesAdded():
            return {"type": "EntriesAdded", "entries": [entry_to_wire(e) for e in change.entries]}
        case EntriesMoved():
            return {
                "type": "EntriesMoved",
                "moves": [
                    {**entry_to_wire(m.entry), "previous_position_key": m.previous_position_key}
                    for m in change.moves
                ],
            }
        case EntriesRemoved():
            return {"type": "EntriesRemoved", "entries": [entry_to_wire(e) for e in change.entries]}
        case DetailsUpdated():
            return {
                "type": "DetailsUpdated",
                "details": _details_wire(change.details),
                "previous": _details_wire(change.previous),
            }
        case MembersChanged():
            return {
                "type": "MembersChanged",
                "user_id": change.user_id,
                "role": change.role.value if change.role else None,
                "previous_role": change.previous_role.value if change.previous_role else None,
            }
        case PlaylistDeleted():
            return {"type": "PlaylistDeleted", "deleted_at": change.deleted_at.isoformat()}
        case _:
            assert_never(change)


def decode_change(wire: ChangeWire) -> Change:
    """The change that :func:`encode_change` turned into ``wire``.

    Raises:
        ValueError: ``wire`` has an unknown ``type``.
    """
    match wire["type"]:
        case "PlaylistCreated":
            return PlaylistCreated(
                owner_id=wire["owner_id"],
                details=_details(wire["details"]),
                created_at=datetime.fromisoformat(wire["created_at"]),
                kind=PlaylistKind(wire.get("kind", PlaylistKind.PLAYLIST.value)),
            )
        case "EntriesAdded":
            return EntriesAdded(tuple(entry_from_wire(e) for e in wire["entries"]))
        case "EntriesMoved":
            return EntriesMoved(
                tuple(Move(entry_from_wire(m), m["previous_position_key"]) for m in wire["moves"])
            )
        case "EntriesRemoved":
            return EntriesRemoved(tuple(entry_from_wire(e) for e in wire["entries"]))
        case "DetailsUpdated":
            return DetailsUpdated(_details(wire["details"]), _details(wire["previous"]))
        case "MembersChanged":
            return MembersChanged(
                user_id=wire["user_id"],
                role=Role(wire["role"]) if wire["role"] else None,
                previous_role=Role(wire["previous_role"]) if wire["previous_role"] else None,
            )
        case "PlaylistDeleted":
            return PlaylistDeleted(datetime.fromisoformat(wire["deleted_at"]))
        case unknown:
            if TYPE_CHECKING:
                assert_never(unknown)  # every ChangeWire has its case above
            raise ValueError(f"unknown change type {unknown!r}")
