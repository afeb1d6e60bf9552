"""The rules of DESIGN §4 and §7, through the command handlers and MemoryPlaylist."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from chorus.domain.access import authorize
from chorus.domain.changes import (
    WIRE_VERSION,
    Change,
    Details,
    DetailsUpdated,
    EntriesAdded,
    EntriesMoved,
    EntriesRemoved,
    MembersChanged,
    Move,
    PlaylistCreated,
    PlaylistDeleted,
    PlaylistEvent,
    decode_change,
    encode_change,
)
from chorus.domain.commands import (
    UNSET,
    AddEntries,
    CreatePlaylist,
    DeletePlaylist,
    MoveEntries,
    Placement,
    PlaylistCommand,
    RemoveEntries,
    RemoveMember,
    RevertPlaylist,
    SetMemberRole,
    UpdatePlaylist,
    request_hash,
)
from chorus.domain.committed import CommittedVersion
from chorus.domain.decisions import Context, Decision
from chorus.domain.errors import (
    AnchorNotFound,
    DomainError,
    ErrorCode,
    Forbidden,
    InvalidInput,
    LimitExceeded,
    NotFound,
    VersionConflict,
)
from chorus.domain.fold import PlaylistState
from chorus.domain.handlers import create_playlist
from chorus.domain.model import Entry, Role, Visibility
from tests.unit.fakes import PLAYLIST_ID, MemoryPlaylist

OWNER, EDITOR, VIEWER, STRANGER = "owner", "ed", "vi", "zed"
P = PLAYLIST_ID


# --- helpers ----------------------------------------------------------------


def placement(after: str | None = None, before: str | None = None) -> Placement:
    return Placement(after=after, before=before)


def add_cmd(
    pl: MemoryPlaylist,
    *media: str,
    after: str | None = None,
    before: str | None = None,
    base: int | None = None,
    strict: bool = False,
) -> AddEntries:
    base = pl.version if base is None else base
    return AddEntries(P, pl.op(), base, media, placement(after, before), strict)


def move_cmd(
    pl: MemoryPlaylist,
    *ids: str,
    after: str | None = None,
    before: str | None = None,
    base: int | None = None,
    strict: bool = False,
) -> MoveEntries:
    base = pl.version if base is None else base
    return MoveEntries(P, pl.op(), base, ids, placement(after, before), strict)


def remove_cmd(
    pl: MemoryPlaylist, *ids: str, base: int | None = None, strict: bool = False
) -> RemoveEntries:
    base = pl.version if base is None else base
    return RemoveEntries(P, pl.op(), base, ids, strict)


async def add(pl: MemoryPlaylist, *media: str, actor: str = OWNER, **kw: Any) -> list[str]:
    decision = await pl.execute(add_cmd(pl, *media, **kw), actor)
    return [e.entry_id for e in decision.outcome.entries]


async def playlist(
    *,
    visibility: Visibility = Visibility.PRIVATE,
    collaborative: bool = True,
    media: tuple[str, ...] = ("m1", "m2", "m3"),
) -> tuple[MemoryPlaylist, list[str]]:
    """A playlist with an editor, a viewer and a few entries."""
    pl = MemoryPlaylist(OWNER, visibility=visibility, collaborative=collaborative)
    await pl.grant(EDITOR, Role.EDITOR)
    await pl.grant(VIEWER, Role.VIEWER)
    ids = await add(pl, *media) if media else []
    return pl, ids


@contextmanager
def refused(
    pl: MemoryPlaylist, error: type[DomainError], field: tuple[str, ...] | None = None
) -> Iterator[pytest.ExceptionInfo[DomainError]]:
    """The block raises ``error`` (with ``field``, if given) and commits nothing."""
    version, log, entries = pl.version, len(pl.log), dict(pl.state.entries)
    header, members = pl.state.playlist, dict(pl.state.members)
    with pytest.raises(error) as info:
        yield info
    assert info.value.code is error.code
    if field is not None:
        assert info.value.field == field
    assert (pl.version, len(pl.log), pl.state.playlist) == (version, log, header)
    assert pl.state.entries == entries
    assert pl.state.members == members


def details_of(pl: MemoryPlaylist) -> Details:
    p = pl.state.playlist
    return Details(p.title, p.description, p.visibility, p.collaborative)


# --- versions ---------------------------------------------------------------


async def test_a_new_playlist_is_at_version_zero() -> None:
    ctx = Context(OWNER, datetime(2026, 1, 1, tzinfo=UTC), lambda: "unused")
    decision = create_playlist(CreatePlaylist("op", "  Road trip  "), "p9", ctx)
    assert decision.outcome.version == 0
    assert decision.playlist.version == 0
    assert decision.playlist.entry_count == 0
    assert decision.playlist.title == "Road trip"
    assert decision.playlist.owner_id == OWNER
    assert decision.playlist.visibility is Visibility.PRIVATE
    assert not decision.playlist.collaborative
    (change,) = decision.changes
    assert isinstance(change, PlaylistCreated)
    assert change.owner_id == OWNER
    state = PlaylistState.create("p9", change)
    assert state.members == {OWNER: Role.OWNER}

    pl = MemoryPlaylist()
    assert pl.version == 0
    assert [v for v, _ in pl.log] == [0]


async def test_every_accepted_command_adds_exactly_one_version() -> None:
    pl = MemoryPlaylist(OWNER)
    a, b, c = await add(pl, "m1", "m2", "m3")
    commands: list[PlaylistCommand] = [
        SetMemberRole(P, pl.op(), 1, EDITOR, Role.EDITOR),
        add_cmd(pl, "m4", after=a),
        move_cmd(pl, c, before=a),
        remove_cmd(pl, b),
        UpdatePlaylist(P, pl.op(), 0, title="Renamed", description="words"),
        UpdatePlaylist(P, pl.op(), 0, visibility=Visibility.PUBLIC, collaborative=True),
        RemoveMember(P, pl.op(), 0, EDITOR),
        RevertPlaylist(P, pl.op(), 0, to_version=1),
        DeletePlaylist(P, pl.op(), 0),
    ]
    for command in commands:
        before = pl.version
        decision = await pl.execute(command)
        assert decision.outcome.version == before + 1
        assert decision.playlist.version == before + 1
        assert pl.version == before + 1
    assert [v for v, _ in pl.log] == list(range(len(commands) + 2))
    assert pl.state.playlist.deleted


async def test_commands_that_change_nothing_still_commit_a_version() -> None:
    pl, (a, b, _) = await playlist()
    await pl.execute(remove_cmd(pl, b))
    no_ops: list[PlaylistCommand] = [
        remove_cmd(pl, b),
        move_cmd(pl, b, after=a),
        SetMemberRole(P, pl.op(), pl.version, EDITOR, Role.EDITOR),
        RemoveMember(P, pl.op(), pl.version, "never-a-member"),
        UpdatePlaylist(P, pl.op(), pl.version, title="Mix"),
        RevertPlaylist(P, pl.op(), pl.version, to_version=pl.version),
    ]
    for command in no_ops:
        before, live = pl.version, pl.live()
        decision = await pl.execute(command)
        assert decision.changes == ()
        assert decision.outcome.version == before + 1 == pl.version
        assert pl.live() == live


async def test_an_add_places_new_entries_in_the_order_given() -> None:
    pl, (a, b, c) = await playlist()
    decision = await pl.execute(add_cmd(pl, "x", "y", "x", after=a), EDITOR)
    placed = decision.outcome.entries
    assert [e.media_id for e in placed] == ["x", "y", "x"]
    assert all(e.added_by == EDITOR and e.live for e in placed)
    assert len({e.entry_id for e in placed}) == 3
    new = [e.entry_id for e in placed]
    assert pl.live_ids() == [a, *new, b, c]
    assert decision.changes == (EntriesAdded(placed),)
    assert pl.state.playlist.entry_count == 6


async def test_a_move_places_entries_contiguously_in_the_order_given() -> None:
    pl, ids = await playlist(media=tuple(f"m{i}" for i in range(6)))
    e0, e1, e2, e3, e4, e5 = ids
    decision = await pl.execute(move_cmd(pl, e5, e1, e3, after=e0))
    assert [e.entry_id for e in decision.outcome.entries] == [e5, e1, e3]
    assert pl.live_ids() == [e0, e5, e1, e3, e2, e4]
    await pl.execute(move_cmd(pl, e0, e2, before=e4))
    assert pl.live_ids() == [e5, e1, e3, e0, e2, e4]
    await pl.execute(move_cmd(pl, e5))
    assert pl.live_ids() == [e1, e3, e0, e2, e4, e5]
    (change,) = (await pl.execute(move_cmd(pl, e4, before=e1))).changes
    assert isinstance(change, EntriesMoved)
    (m,) = change.moves
    assert m.entry.entry_id == e4
    assert m.previous_position_key != m.entry.position_key
    assert pl.live_ids() == [e4, e1, e3, e0, e2, e5]


# --- base version -----------------------------------------------------------


def stale_commands(pl: MemoryPlaylist, ids: list[str], base: int) -> list[PlaylistCommand]:
    a, b, c = ids
    return [
        add_cmd(pl, "m", base=base, strict=True),
        move_cmd(pl, c, before=a, base=base, strict=True),
        remove_cmd(pl, b, base=base, strict=True),
        UpdatePlaylist(P, pl.op(), base, title="T", strict=True),
        SetMemberRole(P, pl.op(), base, "x", Role.VIEWER, strict=True),
        RemoveMember(P, pl.op(), base, VIEWER, strict=True),
        RevertPlaylist(P, pl.op(), base, to_version=0, strict=True),
        DeletePlaylist(P, pl.op(), base, strict=True),
    ]


@pytest.mark.parametrize("kind", range(8))
async def test_a_strict_command_on_a_stale_base_is_a_version_conflict(kind: int) -> None:
    pl, ids = await playlist()
    current = pl.version
    assert current == 3
    for base in (0, current - 1):
        command = stale_commands(pl, ids, base)[kind]
        with refused(pl, VersionConflict, ("baseVersion",)) as info:
            await pl.execute(command)
        assert isinstance(info.value, VersionConflict)
        assert info.value.current_version == current
        assert info.value.code is ErrorCode.VERSION_CONFLICT
    decision = await pl.execute(stale_commands(pl, ids, current)[kind])
    assert decision.outcome.version == current + 1
    assert decision.outcome.rebased is False


@pytest.mark.parametrize("kind", range(8))
@pytest.mark.parametrize("strict", [False, True])
async def test_a_base_version_out_of_range_is_invalid(kind: int, strict: bool) -> None:
    pl, ids = await playlist()
    for base in (pl.version + 1, pl.version + 100, -1):
        command = dataclasses.replace(stale_commands(pl, ids, base)[kind], strict=strict)
        with refused(pl, InvalidInput, ("baseVersion",)):
            await pl.execute(command)


async def test_rebased_says_whether_the_base_was_stale() -> None:
    pl, (a, _, c) = await playlist()
    v = pl.version
    assert (await pl.execute(add_cmd(pl, "m", base=v))).outcome.rebased is False
    assert (await pl.execute(add_cmd(pl, "m", base=v))).outcome.rebased is True
    assert (await pl.execute(move_cmd(pl, c, base=0))).outcome.rebased is True
    assert (await pl.execute(remove_cmd(pl, a, base=pl.version))).outcome.rebased is False
    update = UpdatePlaylist(P, pl.op(), pl.version - 1, title="T")
    assert (await pl.execute(update)).outcome.rebased is True


# --- rebase -----------------------------------------------------------------


@pytest.mark.parametrize("side", ["after", "before"])
async def test_an_anchor_removed_since_the_base_resolves_to_its_tombstone(side: str) -> None:
    pl, (a, b, c) = await playlist()
    base = pl.version
    await pl.execute(remove_cmd(pl, b))
    decision = await pl.execute(add_cmd(pl, "x", base=base, **{side: b}))
    assert decision.outcome.rebased is True
    (x,) = [e.entry_id for e in decision.outcome.entries]
    assert pl.live_ids() == [a, x, c]


@pytest.mark.parametrize("side", ["after", "before"])
async def test_a_move_to_an_anchor_removed_since_the_base_goes_to_its_tombstone(
    side: str,
) -> None:
    pl, (a, b, c, d) = await playlist(media=("m1", "m2", "m3", "m4"))
    base = pl.version
    await pl.execute(remove_cmd(pl, b))
    decision = await pl.execute(move_cmd(pl, d, base=base, **{side: b}))
    assert decision.outcome.rebased is True
    assert decision.outcome.skipped_entry_ids == ()
    assert pl.live_ids() == [a, d, c]


async def test_a_tombstone_anchor_keeps_its_place_when_its_neighbours_move() -> None:
    pl, (a, b, c, d) = await playlist(media=("m1", "m2", "m3", "m4"))
    base = pl.version
    await pl.execute(remove_cmd(pl, b))
    await pl.execute(move_cmd(pl, a))  # a goes to the end: [c, d, a]
    (x,) = await add(pl, "x", after=b, base=base)
    # b's tombstone stood before c's key, and nothing live is before it now.
    assert pl.live_ids() == [x, c, d, a]
    await pl.execute(remove_cmd(pl, c, d))
    (y,) = await add(pl, "y", before=c, base=base)
    assert pl.live_ids() == [x, y, a]


async def test_a_removed_anchor_at_the_ends_of_the_list() -> None:
    pl, (a, b, c) = await playlist()
    await pl.execute(remove_cmd(pl, a, c))
    (x,) = await add(pl, "x", before=a, base=0)
    (y,) = await add(pl, "y", after=c, base=0)
    assert pl.live_ids() == [x, b, y]
    await pl.execute(remove_cmd(pl, x, b, y))
    (z,) = await add(pl, "z", after=b)
    assert pl.live_ids() == [z]


async def test_a_moved_target_already_removed_is_skipped_and_reported() -> None:
    pl, (a, b, c) = await playlist()
    base = pl.version
    await pl.execute(remove_cmd(pl, b))
    decision = await pl.execute(move_cmd(pl, b, c, before=a, base=base))
    assert decision.outcome.skipped_entry_ids == (b,)
    assert [e.entry_id for e in decision.outcome.entries] == [c]
    assert pl.live_ids() == [c, a]
    assert decision.outcome.version == pl.version == base + 2
    # Nothing left to move: the command still commits, with no change.
    decision = await pl.execute(move_cmd(pl, b, after=c, base=base))
    assert decision.changes == ()
    assert decision.outcome.skipped_entry_ids == (b,)
    assert decision.outcome.version == pl.version == base + 3


async def test_a_removed_target_already_removed_is_skipped_and_reported() -> None:
    pl, (a, b, c) = await playlist()
    base = pl.version
    await pl.execute(remove_cmd(pl, b))
    decision = await pl.execute(remove_cmd(pl, a, b, base=base))
    assert decision.outcome.skipped_entry_ids == (b,)
    (change,) = decision.changes
    assert isinstance(change, EntriesRemoved)
    assert [e.entry_id for e in change.entries] == [a]
    assert pl.live_ids() == [c]
    assert pl.state.playlist.entry_count == 1


async def test_removing_a_removed_entry_is_a_no_op() -> None:
    pl, (a, b, c) = await playlist()
    await pl.execute(remove_cmd(pl, b))
    tomb = pl.state.entries[b]
    decision = await pl.execute(remove_cmd(pl, b))
    assert decision.changes == ()
    assert decision.outcome.skipped_entry_ids == (b,)
    assert pl.state.entries[b] == tomb
    assert pl.live_ids() == [a, c]
    assert pl.state.playlist.entry_count == 2


# --- malformed commands -----------------------------------------------------


@pytest.mark.parametrize("side", ["after", "before"])
async def test_an_anchor_that_never_existed_is_anchor_not_found(side: str) -> None:
    pl, (a, _, c) = await playlist()
    with refused(pl, AnchorNotFound, (side,)):
        await pl.execute(add_cmd(pl, "m", **{side: "nope"}))
    with refused(pl, AnchorNotFound, (side,)):
        await pl.execute(move_cmd(pl, a, **{side: "nope"}))
    with refused(pl, AnchorNotFound, (side,)):
        await pl.execute(move_cmd(pl, c, **{side: c + "0"}))


async def test_a_target_that_never_existed_is_not_found() -> None:
    pl, (a, _, c) = await playlist()
    with refused(pl, NotFound, ("entryIds", "1")):
        await pl.execute(move_cmd(pl, a, "nope", after=c))
    with refused(pl, NotFound, ("entryIds", "0")):
        await pl.execute(remove_cmd(pl, "nope", a))


@pytest.mark.parametrize("make", ["add", "move"])
async def test_after_and_before_together_are_invalid(make: str) -> None:
    pl, (a, b, c) = await playlist()
    command = (
        add_cmd(pl, "m", after=a, before=b) if make == "add" else move_cmd(pl, c, after=a, before=b)
    )
    with refused(pl, InvalidInput):
        await pl.execute(command)


@pytest.mark.parametrize("side", ["after", "before"])
async def test_an_anchor_among_the_moved_entries_is_invalid(side: str) -> None:
    pl, (a, b, _) = await playlist()
    with refused(pl, InvalidInput, (side,)):
        await pl.execute(move_cmd(pl, a, b, **{side: b}))


async def test_repeated_entry_ids_are_invalid() -> None:
    pl, (a, b, c) = await playlist()
    with refused(pl, InvalidInput, ("entryIds",)):
        await pl.execute(move_cmd(pl, a, b, a, after=c))
    with refused(pl, InvalidInput, ("entryIds",)):
        await pl.execute(remove_cmd(pl, c, c))


async def test_empty_lists_are_invalid() -> None:
    pl, _ = await playlist()
    with refused(pl, InvalidInput, ("mediaIds",)):
        await pl.execute(add_cmd(pl))
    with refused(pl, InvalidInput, ("entryIds",)):
        await pl.execute(move_cmd(pl))
    with refused(pl, InvalidInput, ("entryIds",)):
        await pl.execute(remove_cmd(pl))
    with refused(pl, InvalidInput):
        await pl.execute(UpdatePlaylist(P, pl.op(), pl.version))


@pytest.mark.parametrize("bad", ["", "x" * 129, "a\x00b", "a\nb"])
async def test_malformed_ids_are_invalid(bad: str) -> None:
    pl, (a, _, c) = await playlist()
    with refused(pl, InvalidInput, ("mediaIds", "1")):
        await pl.execute(add_cmd(pl, "ok", bad))
    with refused(pl, InvalidInput, ("entryIds", "1")):
        await pl.execute(move_cmd(pl, a, bad))
    with refused(pl, InvalidInput, ("after",)):
        await pl.execute(add_cmd(pl, "ok", after=bad))
    with refused(pl, InvalidInput, ("userId",)):
        await pl.execute(SetMemberRole(P, pl.op(), pl.version, bad, Role.EDITOR))
    assert (await add(pl, "x" * 128, after=c)) != []


# --- limits -----------------------------------------------------------------


async def test_at_most_a_hundred_media_per_add() -> None:
    pl, _ = await playlist(media=())
    with refused(pl, LimitExceeded, ("mediaIds",)):
        await pl.execute(add_cmd(pl, *(f"m{i}" for i in range(101))))
    assert len(await add(pl, *(f"m{i}" for i in range(100)))) == 100


async def test_at_most_a_hundred_entries_per_move_or_remove() -> None:
    pl, _ = await playlist(media=())
    ids = await add(pl, *(f"m{i}" for i in range(100)))
    ids += await add(pl, "last")
    with refused(pl, LimitExceeded, ("entryIds",)):
        await pl.execute(move_cmd(pl, *ids))
    with refused(pl, LimitExceeded, ("entryIds",)):
        await pl.execute(remove_cmd(pl, *ids))
    await pl.execute(move_cmd(pl, *ids[:100], after=ids[100]))
    assert pl.live_ids() == [ids[100], *ids[:100]]
    await pl.execute(remove_cmd(pl, *ids[1:]))
    assert pl.live_ids() == [ids[0]]


async def test_a_playlist_holds_at_most_ten_thousand_live_entries() -> None:
    pl, _ = await playlist(media=())
    for _ in range(99):
        await add(pl, *(f"m{i}" for i in range(100)))
    await add(pl, *(f"m{i}" for i in range(99)))
    assert pl.state.playlist.entry_count == 9_999
    with refused(pl, LimitExceeded, ("mediaIds",)):
        await pl.execute(add_cmd(pl, "a", "b"))
    (last,) = await add(pl, "a")
    assert pl.state.playlist.entry_count == 10_000
    with refused(pl, LimitExceeded, ("mediaIds",)):
        await pl.execute(add_cmd(pl, "b", before=last))
    await pl.execute(remove_cmd(pl, last))
    await add(pl, "b")
    assert pl.state.playlist.entry_count == 10_000


def create(title: str, description: str | None = None, operation_id: str = "op") -> Decision:
    ctx = Context(OWNER, datetime(2026, 1, 1, tzinfo=UTC), lambda: "unused")
    return create_playlist(CreatePlaylist(operation_id, title, description), "p9", ctx)


@pytest.mark.parametrize(
    ("title", "error"),
    [
        ("", InvalidInput),
        ("   ", InvalidInput),
        ("\n\t", InvalidInput),
        ("a\x00b", InvalidInput),
        ("a\nb", InvalidInput),
        ("a\x1bb", InvalidInput),
        ("a\ud800b", InvalidInput),  # a lone surrogate cannot be stored as UTF-8
        ("x" * 201, LimitExceeded),
        ("🎵" * 201, LimitExceeded),
    ],
)
async def test_bad_titles_are_refused(title: str, error: type[DomainError]) -> None:
    with pytest.raises(error) as info:
        create(title)
    assert info.value.field == ("title",)
    pl, _ = await playlist()
    with refused(pl, error, ("title",)):
        await pl.execute(UpdatePlaylist(P, pl.op(), pl.version, title=title))


@pytest.mark.parametrize(
    "title",
    [
        "x",
        "x" * 200,
        "🎧 Late night 🌙",
        "👨‍👩‍👧‍👦 family road trip",
        "🇫🇷🇯🇵",
        "🎵" * 200,
        "é" * 200,
        "日本語のプレイリスト",
        "  padded  ",
    ],
)
async def test_good_titles_are_accepted_and_trimmed(title: str) -> None:
    assert create(title).playlist.title == title.strip()
    pl, _ = await playlist()
    await pl.execute(UpdatePlaylist(P, pl.op(), pl.version, title=title), EDITOR)
    assert pl.state.playlist.title == title.strip()


@pytest.mark.parametrize(
    ("description", "stored"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("  two\nlines\tand a tab  ", "two\nlines\tand a tab"),
        ("d" * 1_000, "d" * 1_000),
        ("🎵" * 1_000, "🎵" * 1_000),
    ],
)
async def test_good_descriptions_are_accepted(description: str | None, stored: str | None) -> None:
    assert create("T", description).playlist.description == stored
    pl, _ = await playlist()
    await pl.execute(UpdatePlaylist(P, pl.op(), pl.version, description="old"))
    await pl.execute(UpdatePlaylist(P, pl.op(), pl.version, description=description))
    assert pl.state.playlist.description == stored


@pytest.mark.parametrize(
    ("description", "error"),
    [
        ("d" * 1_001, LimitExceeded),
        ("a\x00b", InvalidInput),
        ("a\rb", InvalidInput),
        ("a\udfffb", InvalidInput),
    ],
)
async def test_bad_descriptions_are_refused(description: str, error: type[DomainError]) -> None:
    with pytest.raises(error) as info:
        create("T", description)
    assert info.value.field == ("description",)
    pl, _ = await playlist()
    with refused(pl, error, ("description",)):
        await pl.execute(UpdatePlaylist(P, pl.op(), pl.version, description=description))


@pytest.mark.parametrize("operation_id", ["", "o" * 65, "a\x00b", "a\nb"])
async def test_bad_operation_ids_are_invalid(operation_id: str) -> None:
    with pytest.raises(InvalidInput) as info:
        create("T", operation_id=operation_id)
    assert info.value.field == ("operationId",)
    pl, _ = await playlist()
    with refused(pl, InvalidInput, ("operationId",)):
        await pl.execute(AddEntries(P, operation_id, pl.version, ("m",)))
    with refused(pl, InvalidInput, ("operationId",)):
        await pl.execute(RemoveMember(P, operation_id, pl.version, VIEWER), VIEWER)


async def test_an_operation_id_of_sixty_four_characters_is_fine() -> None:
    assert create("T", operation_id="o" * 64).outcome.version == 0
    pl, _ = await playlist()
    decision = await pl.execute(AddEntries(P, "é" * 64, pl.version, ("m",)))
    assert decision.outcome.version == 4


# --- access -----------------------------------------------------------------

EDITS = ["add", "move", "remove", "title", "description", "revert"]
OWNER_ONLY = ["visibility", "collaborative", "grant", "remove_other", "delete"]


def access_command(kind: str, pl: MemoryPlaylist, ids: list[str]) -> PlaylistCommand:
    a, b, c = ids
    v = pl.version
    p = pl.state.playlist
    flip = Visibility.PUBLIC if p.visibility is Visibility.PRIVATE else Visibility.PRIVATE
    commands: dict[str, PlaylistCommand] = {
        "add": add_cmd(pl, "m", after=a),
        "move": move_cmd(pl, c, before=a),
        "remove": remove_cmd(pl, b),
        "title": UpdatePlaylist(P, pl.op(), v, title="New"),
        "description": UpdatePlaylist(P, pl.op(), v, description="New"),
        "revert": RevertPlaylist(P, pl.op(), v, to_version=1),
        "visibility": UpdatePlaylist(P, pl.op(), v, visibility=flip),
        "collaborative": UpdatePlaylist(P, pl.op(), v, collaborative=not p.collaborative),
        "grant": SetMemberRole(P, pl.op(), v, "newbie", Role.EDITOR),
        "remove_other": RemoveMember(P, pl.op(), v, "other"),
        "delete": DeletePlaylist(P, pl.op(), v),
    }
    return commands[kind]


@pytest.mark.parametrize("kind", EDITS + OWNER_ONLY)
@pytest.mark.parametrize("actor", [OWNER, EDITOR, VIEWER, STRANGER])
@pytest.mark.parametrize("visibility", [Visibility.PUBLIC, Visibility.PRIVATE])
@pytest.mark.parametrize("collaborative", [True, False])
async def test_access(kind: str, actor: str, visibility: Visibility, collaborative: bool) -> None:
    pl, ids = await playlist(visibility=visibility, collaborative=collaborative)
    await pl.grant("other", Role.VIEWER)
    command = access_command(kind, pl, ids)
    if actor == STRANGER and visibility is Visibility.PRIVATE:
        expected: type[DomainError] | None = NotFound  # never Forbidden: no existence leak
    elif kind in EDITS:
        may = actor == OWNER or (actor == EDITOR and collaborative)
        expected = None if may else Forbidden
    else:
        expected = None if actor == OWNER else Forbidden
    if expected is None:
        before = pl.version
        decision = await pl.execute(command, actor)
        assert decision.outcome.version == before + 1
        assert decision.changes != ()
    else:
        with refused(pl, expected):
            await pl.execute(command, actor)


@pytest.mark.parametrize("role", [Role.EDITOR, Role.VIEWER])
@pytest.mark.parametrize("collaborative", [True, False])
async def test_a_member_may_leave(role: Role, collaborative: bool) -> None:
    pl, (a, _, _) = await playlist(collaborative=collaborative)
    user = EDITOR if role is Role.EDITOR else VIEWER
    epoch = pl.state.playlist.membership_epoch
    decision = await pl.execute(RemoveMember(P, pl.op(), pl.version, user), user)
    assert decision.changes == (MembersChanged(user, None, role),)
    assert user not in pl.state.members
    assert pl.state.playlist.membership_epoch == epoch + 1
    # Gone from a private playlist: it is invisible now.
    with refused(pl, NotFound):
        await pl.execute(RemoveMember(P, pl.op(), pl.version, user), user)
    with refused(pl, NotFound):
        await pl.execute(add_cmd(pl, "m", after=a), user)


async def test_a_member_cannot_remove_another_member() -> None:
    pl, _ = await playlist()
    with refused(pl, Forbidden):
        await pl.execute(RemoveMember(P, pl.op(), pl.version, VIEWER), EDITOR)
    with refused(pl, Forbidden):
        await pl.execute(RemoveMember(P, pl.op(), pl.version, EDITOR), VIEWER)


async def test_a_stranger_cannot_leave_a_playlist_they_are_not_in() -> None:
    """Leaving is for members: a stranger must not commit versions to a public playlist."""
    pl, _ = await playlist(visibility=Visibility.PUBLIC)
    with refused(pl, Forbidden):
        await pl.execute(RemoveMember(P, pl.op(), pl.version, STRANGER), STRANGER)
    private, _ = await playlist()
    with refused(private, NotFound):
        await private.execute(RemoveMember(P, private.op(), private.version, STRANGER), STRANGER)


async def test_the_owner_cannot_be_removed() -> None:
    pl, _ = await playlist()
    with refused(pl, InvalidInput, ("userId",)):
        await pl.execute(RemoveMember(P, pl.op(), pl.version, OWNER), OWNER)
    with refused(pl, Forbidden):
        await pl.execute(RemoveMember(P, pl.op(), pl.version, OWNER), EDITOR)
    assert pl.state.members[OWNER] is Role.OWNER


async def test_the_owner_role_cannot_be_granted_or_changed() -> None:
    pl, _ = await playlist()
    with refused(pl, InvalidInput, ("role",)):
        await pl.execute(SetMemberRole(P, pl.op(), pl.version, EDITOR, Role.OWNER))
    with refused(pl, InvalidInput, ("role",)):
        await pl.execute(SetMemberRole(P, pl.op(), pl.version, "newbie", Role.OWNER))
    with refused(pl, InvalidInput, ("userId",)):
        await pl.execute(SetMemberRole(P, pl.op(), pl.version, OWNER, Role.VIEWER))
    with refused(pl, Forbidden):
        await pl.execute(SetMemberRole(P, pl.op(), pl.version, EDITOR, Role.OWNER), EDITOR)


async def test_the_owner_changes_roles() -> None:
    pl, (a, _, _) = await playlist()
    epoch = pl.state.playlist.membership_epoch
    decision = await pl.execute(SetMemberRole(P, pl.op(), pl.version, VIEWER, Role.EDITOR))
    assert decision.changes == (MembersChanged(VIEWER, Role.EDITOR, Role.VIEWER),)
    assert pl.state.playlist.membership_epoch == epoch + 1
    await add(pl, "m", after=a, actor=VIEWER)
    decision = await pl.execute(SetMemberRole(P, pl.op(), pl.version, "new", Role.VIEWER))
    assert decision.changes == (MembersChanged("new", Role.VIEWER, None),)
    with refused(pl, Forbidden):
        await pl.execute(add_cmd(pl, "m"), "new")
    decision = await pl.execute(RemoveMember(P, pl.op(), pl.version, "new"))
    assert decision.changes == (MembersChanged("new", None, Role.VIEWER),)


async def test_only_the_owner_changes_visibility_even_to_the_same_value() -> None:
    pl, _ = await playlist()
    with refused(pl, Forbidden):
        await pl.execute(
            UpdatePlaylist(P, pl.op(), pl.version, visibility=Visibility.PRIVATE), EDITOR
        )
    with refused(pl, Forbidden):
        await pl.execute(
            UpdatePlaylist(P, pl.op(), pl.version, title="T", collaborative=True), EDITOR
        )


@pytest.mark.parametrize("kind", EDITS + OWNER_ONLY)
@pytest.mark.parametrize("actor", [OWNER, EDITOR, VIEWER, STRANGER])
async def test_a_deleted_playlist_is_not_found(kind: str, actor: str) -> None:
    pl, ids = await playlist(visibility=Visibility.PUBLIC)
    await pl.grant("other", Role.VIEWER)
    decision = await pl.execute(DeletePlaylist(P, pl.op(), pl.version))
    (change,) = decision.changes
    assert isinstance(change, PlaylistDeleted)
    assert pl.state.playlist.deleted
    with refused(pl, NotFound, ("playlistId",)):
        await pl.execute(access_command(kind, pl, ids), actor)
    with refused(pl, NotFound, ("playlistId",)):
        await pl.execute(RemoveMember(P, pl.op(), pl.version, actor), actor)


@dataclasses.dataclass(frozen=True, slots=True)
class ShuffleEntries:
    """Shaped like a playlist command, but not one :func:`authorize` has a rule for."""

    playlist_id: str
    operation_id: str
    base_version: int


@pytest.mark.parametrize("actor", [OWNER, EDITOR, VIEWER, STRANGER])
async def test_a_command_without_an_access_rule_is_refused(actor: str) -> None:
    """Unknown is refused, not allowed: not even the owner gets past ``authorize``."""
    pl, _ = await playlist(visibility=Visibility.PUBLIC)
    unknown = ShuffleEntries(P, pl.op(), pl.version)
    role = pl.state.members.get(actor)
    with pytest.raises(Forbidden, match="no access rule for ShuffleEntries"):
        authorize(unknown, pl.state.playlist, role, actor)  # type: ignore[arg-type]
    with refused(pl, Forbidden):
        await pl.execute(unknown, actor)  # type: ignore[arg-type]


# --- revert -----------------------------------------------------------------

Snapshot = tuple[tuple[Entry, ...], str, str | None]


def snapshot(pl: MemoryPlaylist) -> Snapshot:
    p = pl.state.playlist
    return tuple(pl.live()), p.title, p.description


async def build_history(pl: MemoryPlaylist) -> dict[int, Snapshot]:
    """A varied history, rebalances included; the snapshot of every version."""
    snaps = {pl.version: snapshot(pl)}

    async def run(command: PlaylistCommand, actor: str = OWNER) -> Decision:
        decision = await pl.execute(command, actor)
        snaps[pl.version] = snapshot(pl)
        return decision

    await run(SetMemberRole(P, pl.op(), pl.version, EDITOR, Role.EDITOR))
    a, b, c, d, e = (x.entry_id for x in (await run(add_cmd(pl, *"abcde"))).outcome.entries)
    await run(UpdatePlaylist(P, pl.op(), pl.version, title="Second", description="about"))
    await run(move_cmd(pl, e, c, before=a), EDITOR)
    await run(remove_cmd(pl, b, d))
    await run(add_cmd(pl, "f", "g", after=b, base=pl.version - 1), EDITOR)
    await run(UpdatePlaylist(P, pl.op(), pl.version, description=None), EDITOR)
    rebalanced = 0
    for _ in range(150):
        decision = await run(add_cmd(pl, "h", after=a))
        (new,) = decision.outcome.entries
        rebalanced += sum(
            1
            for ch in decision.changes
            if isinstance(ch, EntriesMoved)
            for m in ch.moves
            if m.entry.entry_id != new.entry_id
        )
    assert rebalanced > 0, "the history must include rebalances"
    live = pl.live_ids()
    await run(move_cmd(pl, *live[10:20], after=live[-1]))
    await run(remove_cmd(pl, *live[30:60:3]))
    await run(RevertPlaylist(P, pl.op(), pl.version, to_version=12))
    await run(move_cmd(pl, a, c, after=live[5]))
    await run(UpdatePlaylist(P, pl.op(), pl.version, title="Third"))
    await run(remove_cmd(pl, e))
    return snaps


async def test_revert_restores_exactly_the_entries_and_details_of_a_version() -> None:
    pl = MemoryPlaylist(OWNER, collaborative=True)
    snaps = await build_history(pl)
    await pl.execute(UpdatePlaylist(P, pl.op(), pl.version, visibility=Visibility.PUBLIC))
    snaps[pl.version] = snapshot(pl)
    await pl.grant(VIEWER, Role.VIEWER)
    snaps[pl.version] = snapshot(pl)
    members = dict(pl.state.members)
    last = pl.version
    targets = [0, 1, 2, 5, 7, 8, 9, 40, 120, 161, 3, last, 163, last - 1, 6, last]
    for target in targets:
        decision = await pl.execute(
            RevertPlaylist(P, pl.op(), pl.version, to_version=target), EDITOR
        )
        assert snapshot(pl) == snaps[target], target
        snaps[pl.version] = snapshot(pl)
        # Ordinary changes only; members and access settings stay.
        assert {type(c) for c in decision.changes} <= {
            EntriesAdded,
            EntriesRemoved,
            EntriesMoved,
            DetailsUpdated,
        }
        assert pl.state.members == members
        assert pl.state.playlist.visibility is Visibility.PUBLIC
        assert pl.state.playlist.collaborative is True
        for change in decision.changes:
            if isinstance(change, DetailsUpdated):
                assert change.details.visibility is Visibility.PUBLIC
                assert change.details.collaborative is True
    # A revert to a revert's version works like any other.
    revert_version = pl.version - 3
    await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=revert_version))
    assert snapshot(pl) == snaps[revert_version]
    rebuilt = pl.fold_log()
    assert rebuilt.entries == pl.state.entries
    assert rebuilt.playlist == pl.state.playlist


async def test_revert_emits_the_ordinary_changes() -> None:
    pl, (a, b, c) = await playlist()
    v = pl.version
    then = {i: pl.state.entries[i] for i in (a, b, c)}
    await pl.execute(UpdatePlaylist(P, pl.op(), pl.version, title="New", description="d"))
    await pl.execute(move_cmd(pl, c, before=a))
    await pl.execute(remove_cmd(pl, b))
    (x,) = await add(pl, "x")
    now = {i: pl.state.entries[i] for i in (c, x)}
    decision = await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=v))
    removed, moved, added, details = decision.changes
    assert removed == EntriesRemoved((now[x],))
    assert moved == EntriesMoved((Move(then[c], now[c].position_key),))
    assert added == EntriesAdded((then[b],))
    assert details == DetailsUpdated(
        Details("Mix", None, Visibility.PRIVATE, True),
        Details("New", "d", Visibility.PRIVATE, True),
    )
    assert pl.live_ids() == [a, b, c]


async def test_revert_keeps_members_and_access_settings() -> None:
    pl, (a, _, _) = await playlist()
    v = pl.version
    await pl.execute(
        UpdatePlaylist(P, pl.op(), pl.version, visibility=Visibility.PUBLIC, collaborative=False)
    )
    await pl.execute(RemoveMember(P, pl.op(), pl.version, VIEWER))
    await pl.grant("new", Role.EDITOR)
    await pl.execute(remove_cmd(pl, a))
    members = dict(pl.state.members)
    decision = await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=v))
    assert [type(c) for c in decision.changes] == [EntriesAdded]
    assert pl.state.members == members
    assert pl.state.playlist.visibility is Visibility.PUBLIC
    assert pl.state.playlist.collaborative is False
    assert a in pl.live_ids()


async def test_revert_past_the_retention_floor_is_invalid() -> None:
    pl, _ = await playlist()
    for _ in range(5):
        await add(pl, "m")
    pl.floor = 5  # versions 0–4 are gone from the log
    with refused(pl, InvalidInput, ("toVersion",)):
        await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=3))
    with refused(pl, InvalidInput, ("toVersion",)):
        await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=0))
    # Version 4 is still reachable: undoing needs versions 5 onwards only.
    await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=4))
    assert len(pl.live_ids()) == 4


async def test_a_revert_changes_no_more_entries_than_a_batch_and_goes_in_steps() -> None:
    pl, _ = await playlist(media=())
    pl.limits = dataclasses.replace(pl.limits, max_batch_entries=4)
    empty = pl.version
    for n in range(3):
        await add(pl, f"a{n}", f"b{n}")  # three versions, two entries each
    with refused(pl, LimitExceeded, ("toVersion",)) as info:
        await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=empty))
    assert "6 entries" in info.value.message
    assert "at most 4" in info.value.message
    # Two entries removed, then four: each step within the limit.
    await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=empty + 2))
    assert len(pl.live_ids()) == 4
    await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=empty))
    assert pl.live_ids() == []


async def test_a_revert_undoes_no_more_than_twenty_batches_before_it_is_weighed() -> None:
    pl, _ = await playlist(media=())
    pl.limits = dataclasses.replace(pl.limits, max_batch_entries=4)
    await add(pl, "a", "b")
    start = pl.version
    first, second = pl.live_ids()
    for _ in range(41):  # 82 moves; the result at the end is only an order
        await pl.execute(move_cmd(pl, first, after=second))
        await pl.execute(move_cmd(pl, second, after=first))
    with refused(pl, LimitExceeded, ("toVersion",)) as info:
        await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=start))
    assert "undo 82 entries" in info.value.message
    assert "at most 80" in info.value.message
    # Twenty versions back (20 moves) is within it.
    await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=pl.version - 20))


@pytest.mark.parametrize("offset", [1, 50])
async def test_revert_to_a_version_that_does_not_exist_is_invalid(offset: int) -> None:
    pl, _ = await playlist()
    with refused(pl, InvalidInput, ("toVersion",)):
        await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=pl.version + offset))
    with refused(pl, InvalidInput, ("toVersion",)):
        await pl.execute(RevertPlaylist(P, pl.op(), pl.version, to_version=-offset))


# --- request hash -----------------------------------------------------------


def sample_commands() -> list[Any]:
    return [
        CreatePlaylist("op", "T", "d", Visibility.PUBLIC, True),
        AddEntries(P, "op", 3, ("m1", "m2"), Placement(after="e1")),
        MoveEntries(P, "op", 3, ("e1", "e2"), Placement(before="e3")),
        RemoveEntries(P, "op", 3, ("e1", "e2")),
        UpdatePlaylist(P, "op", 3, title="T"),
        SetMemberRole(P, "op", 3, "u", Role.EDITOR),
        RemoveMember(P, "op", 3, "u"),
        RevertPlaylist(P, "op", 3, 1),
        DeletePlaylist(P, "op", 3),
    ]


# For every field of every command, values that differ from the sample's.
OTHER_VALUES: dict[str, list[Any]] = {
    "operation_id": ["op2", "OP"],
    "playlist_id": ["p2"],
    "base_version": [0, 4],
    "title": ["T2", "t", UNSET, "UNSET"],
    "description": ["d2", None, UNSET, "UNSET", "None"],
    "visibility": [Visibility.PRIVATE, UNSET],
    "collaborative": [False, UNSET],
    "media_ids": [("m2", "m1"), ("m1",), ("m1", "m2", "m2"), ()],
    "entry_ids": [("e2", "e1"), ("e1",), ("e1", "e2", "e3")],
    "placement": [Placement(), Placement(before="e1"), Placement(after="e9")],
    "strict": [True],
    "user_id": ["v", "U"],
    "role": [Role.VIEWER],
    "to_version": [0, 2],
}


@pytest.mark.parametrize("command", sample_commands(), ids=lambda c: type(c).__name__)
def test_request_hash_is_equal_for_equal_commands(command: Any) -> None:
    twin = type(command)(**{f.name: getattr(command, f.name) for f in dataclasses.fields(command)})
    assert twin is not command
    assert request_hash(twin) == request_hash(command)
    digest = request_hash(command)
    assert len(digest) == 64
    assert int(digest, 16) >= 0


@pytest.mark.parametrize("command", sample_commands(), ids=lambda c: type(c).__name__)
def test_request_hash_differs_when_any_argument_differs(command: Any) -> None:
    seen = {request_hash(command): repr(command)}
    for f in dataclasses.fields(command):
        values = OTHER_VALUES[f.name]
        for value in values:
            if value is getattr(command, f.name) or (
                type(value) is type(getattr(command, f.name)) and value == getattr(command, f.name)
            ):
                continue
            variant = dataclasses.replace(command, **{f.name: value})
            digest = request_hash(variant)
            assert digest not in seen, f"{variant!r} hashes like {seen[digest]}"
            seen[digest] = repr(variant)
    assert len(seen) > len(dataclasses.fields(command))


def test_request_hash_of_text_that_is_not_valid_utf_8_does_not_crash() -> None:
    """It is computed before validation, on whatever the client sent."""
    lone = request_hash(CreatePlaylist("op", "a\ud800"))
    other = request_hash(CreatePlaylist("op", "a\ud801"))
    assert len(lone) == len(other) == 64
    assert lone != other
    assert request_hash(AddEntries(P, "op", 0, ("\udc00",))) != request_hash(
        AddEntries(P, "op", 0, ("\udc01",))
    )


def test_request_hash_differs_between_command_types() -> None:
    digests = {request_hash(c) for c in sample_commands()}
    assert len(digests) == len(sample_commands())
    # Same fields, different type.
    assert request_hash(RemoveEntries(P, "op", 3, ("e1",))) != request_hash(
        MoveEntries(P, "op", 3, ("e1",))
    )


# --- wire format ------------------------------------------------------------

T0 = datetime(2026, 3, 4, 5, 6, 7, 890_123, tzinfo=UTC)
ENTRY = Entry("e1", "V", "m1", "u1", T0)
OTHER = Entry("e2", "V1z", "m1", "u2", T0 + timedelta(days=1))


def every_change() -> list[Change]:
    public = Details("Trip 🚗", "two\nlines", Visibility.PUBLIC, True)
    private = Details("Trip", None, Visibility.PRIVATE, False)
    plus_two = timezone(timedelta(hours=2))
    return [
        PlaylistCreated("u1", public, T0),
        PlaylistCreated("u1", private, T0.astimezone(plus_two)),
        EntriesAdded((ENTRY, OTHER)),
        EntriesAdded(()),
        EntriesMoved((Move(ENTRY, "W"), Move(OTHER, "0001"))),
        EntriesRemoved((OTHER,)),
        DetailsUpdated(public, private),
        DetailsUpdated(private, public),
        MembersChanged("u2", Role.EDITOR, None),
        MembersChanged("u2", None, Role.VIEWER),
        MembersChanged("u2", Role.VIEWER, Role.EDITOR),
        PlaylistDeleted(T0),
    ]


@pytest.mark.parametrize("change", every_change(), ids=lambda c: type(c).__name__)
def test_encode_decode_round_trip(change: Change) -> None:
    wire = encode_change(change)
    assert wire["type"] == type(change).__name__
    assert decode_change(wire) == change
    # Through JSON text, as the log and the outbox store it.
    text = json.dumps(wire, ensure_ascii=False)
    again = decode_change(json.loads(text))
    assert again == change
    assert encode_change(again) == wire


def test_every_change_type_has_a_round_trip_case() -> None:
    assert {type(c) for c in every_change()} == set(typing.get_args(Change))


def test_decoding_an_unknown_change_type_fails() -> None:
    with pytest.raises(ValueError, match="unknown change type"):
        decode_change({"type": "EntriesShuffled"})  # type: ignore[arg-type, typeddict-item]


def test_a_committed_version_is_what_its_event_carries() -> None:
    changes = every_change()
    event: PlaylistEvent = {
        "v": WIRE_VERSION,
        "type": "PlaylistChanged",
        "playlist_id": P,
        "version": 7,
        "operation_id": "op-7",
        "actor_id": "u1",
        "committed_at": T0.isoformat(),
        "changes": [encode_change(c) for c in changes],
    }
    # Through JSON text, as the outbox, Kafka and Redis carry it.
    version = CommittedVersion.from_event(json.loads(json.dumps(event)))
    assert version == CommittedVersion(P, 7, "op-7", "u1", T0, tuple(changes))
    # What the hub counts as undecodable: it reads such a version from SQL instead.
    with pytest.raises(KeyError):
        CommittedVersion.from_event({**event, "changes": [{"type": "EntriesAdded"}]})  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown change type"):
        CommittedVersion.from_event({**event, "changes": [{"type": "EntriesShuffled"}]})  # type: ignore[list-item]
    with pytest.raises(ValueError, match="isoformat"):
        CommittedVersion.from_event({**event, "committed_at": "yesterday"})


def test_folding_refuses_a_version_out_of_order() -> None:
    pl = MemoryPlaylist()
    state = pl.fold_log()
    with pytest.raises(ValueError, match="does not follow"):
        state.apply(2, [], T0)
    with pytest.raises(ValueError, match="does not follow"):
        state.apply(0, [], T0)
    state.apply(1, [], T0)
    assert state.playlist.version == 1
