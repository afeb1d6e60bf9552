"""Command handlers: the rules that turn a command into a decision.

After the access rules (:mod:`chorus.domain.access`) and the base version
are checked, a handler gets the locked playlist header and a
:class:`~chorus.domain.ports.PlaylistView` for the few entries it touches, and
returns a :class:`Decision`: the canonical changes of the next version, the
header after them and the :class:`Outcome` the client sees. It writes
nothing; storage applies the decision in the command's transaction.

Rebase (DESIGN §4, after the operational-transformation approach of the
Spotify playlist service): anchors and targets are entry ids, so a command
made against an older ``base_version`` is applied to the current state as
is. An anchor removed since resolves to the place its tombstone holds; a
target already gone is skipped and reported; removing a removed entry is a
no-op. An anchor or target that never belonged to the playlist is an error.
``strict`` commands refuse any stale base version instead.

Every accepted command commits a version, even one whose changes turned out
empty, so its operation id has a durable result to replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import assert_never

from chorus.domain import library, revert
from chorus.domain.access import authorize, readable
from chorus.domain.changes import (
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
    entries_in,
)
from chorus.domain.commands import (
    UNSET,
    AddEntries,
    CreatePlaylist,
    DeletePlaylist,
    LikeMedia,
    MoveEntries,
    Placement,
    PlaylistCommand,
    RemoveEntries,
    RemoveMember,
    RevertPlaylist,
    SetMemberRole,
    UnlikeMedia,
    UpdatePlaylist,
    VersionedCommand,
)
from chorus.domain.decisions import Context, Decision, Outcome
from chorus.domain.errors import (
    BaseVersionOutOfRange,
    InvalidInput,
    LimitExceeded,
    NotFound,
    VersionConflict,
)
from chorus.domain.fold import advance, created
from chorus.domain.model import Entry, Playlist, PlaylistKind, Role
from chorus.domain.placement import find_anchor, gap, place
from chorus.domain.ports import PlaylistView
from chorus.domain.validation import (
    anchor_field,
    check_entry_ids,
    check_id,
    check_operation_id,
    check_placement,
    check_user_id,
    clean_description,
    clean_title,
)

# --- base version ----------------------------------------------------------


def _check_base_version(command: PlaylistCommand, playlist: Playlist) -> bool:
    """Whether the command must be rebased; raises when it may not be applied.

    Likes carry no base version: they commute with everything, so never rebase.
    """
    if isinstance(command, LikeMedia | UnlikeMedia):
        return False
    return _check_versioned(command, playlist)


def _check_versioned(command: VersionedCommand, playlist: Playlist) -> bool:
    base = command.base_version
    if base < 0 or base > playlist.version:
        raise BaseVersionOutOfRange(base, playlist.version)
    if command.strict and base != playlist.version:
        raise VersionConflict(base, playlist.version)
    return base < playlist.version


# --- handlers --------------------------------------------------------------


def create_playlist(command: CreatePlaylist, playlist_id: str, ctx: Context) -> Decision:
    """Version 0 of a new playlist owned by the actor.

    Raises:
        InvalidInput, LimitExceeded: a malformed operation id, title or description.
    """
    check_operation_id(command.operation_id, ctx.limits)
    details = Details(
        title=clean_title(command.title, ctx.limits),
        description=clean_description(command.description, ctx.limits),
        visibility=command.visibility,
        collaborative=command.collaborative,
    )
    change = PlaylistCreated(owner_id=ctx.actor_id, details=details, created_at=ctx.now)
    return Decision(created(playlist_id, change), (change,), Outcome(playlist_id, 0))


def create_liked_songs(playlist_id: str, ctx: Context) -> Decision:
    """Version 0 of the actor's Liked Songs (:mod:`chorus.domain.library`).

    The store commits it under :data:`~chorus.domain.library.CREATE_OPERATION_ID`,
    which no client can send, so it needs no operation-id check.
    """
    change = PlaylistCreated(
        owner_id=ctx.actor_id,
        details=library.LIKED_SONGS_DETAILS,
        created_at=ctx.now,
        kind=PlaylistKind.LIKED_SONGS,
    )
    return Decision(created(playlist_id, change), (change,), Outcome(playlist_id, 0))


async def decide(
    command: PlaylistCommand,
    playlist: Playlist | None,
    role: Role | None,
    view: PlaylistView,
    ctx: Context,
) -> Decision:
    """The next version of ``playlist`` made by ``command``.

    Args:
        command: any command on an existing playlist.
        playlist: the header, locked for this transaction; ``None`` if missing.
        role: the actor's role in it, ``None`` for a non-member.
        view: read access to its entries and log.
        ctx: actor, clock, id source and limits.

    Raises:
        DomainError: any subclass; nothing is to be committed.
    """
    check_operation_id(command.operation_id, ctx.limits)
    current = readable(playlist, role)
    authorize(command, current, role, ctx.actor_id)
    rebased = _check_base_version(command, current)
    changes, entries, skipped = await _handle(command, current, view, ctx)
    version = current.version + 1
    removed = tuple(e.entry_id for c in changes if isinstance(c, EntriesRemoved) for e in c.entries)
    outcome = Outcome(current.id, version, rebased, tuple(entries), tuple(skipped), removed)
    return Decision(advance(current, changes, ctx.now), tuple(changes), outcome)


Handled = tuple[list[Change], list[Entry], list[str]]
"""A handler's answer: the changes, the entries as placed, the skipped ids."""


async def _handle(
    command: PlaylistCommand, p: Playlist, view: PlaylistView, ctx: Context
) -> Handled:
    match command:
        case AddEntries():
            return await _add_entries(command, p, view, ctx)
        case MoveEntries():
            return await _move_entries(command, p, view, ctx)
        case RemoveEntries():
            return await _remove_entries(command, p, view, ctx)
        case UpdatePlaylist():
            return _update_playlist(command, p, ctx)
        case SetMemberRole():
            return await _set_member_role(command, p, view, ctx)
        case RemoveMember():
            return await _remove_member(command, p, view, ctx)
        case RevertPlaylist():
            return await _revert_playlist(command, p, view, ctx)
        case DeletePlaylist():
            return [PlaylistDeleted(ctx.now)], [], []
        case LikeMedia():
            return await _like_media(command, p, view, ctx)
        case UnlikeMedia():
            return await _unlike_media(command, view, ctx)
        case _:
            assert_never(command)


async def _like_media(cmd: LikeMedia, p: Playlist, view: PlaylistView, ctx: Context) -> Handled:
    """Newest like first: the media goes before the first entry, unless it is there."""
    check_id(cmd.media_id, ("mediaId",), ctx.limits, "a media id")
    if await view.live_with_media(cmd.media_id):
        return [], [], []
    first = await view.live_after(None, 1)
    placement = Placement(before=first[0].entry_id) if first else Placement()
    return await _place_media(p, view, ctx, (cmd.media_id,), placement, ("mediaId",))


async def _unlike_media(cmd: UnlikeMedia, view: PlaylistView, ctx: Context) -> Handled:
    check_id(cmd.media_id, ("mediaId",), ctx.limits, "a media id")
    liked = await view.live_with_media(cmd.media_id)
    changes: list[Change] = [EntriesRemoved(tuple(liked))] if liked else []
    return changes, [], []


async def _add_entries(cmd: AddEntries, p: Playlist, view: PlaylistView, ctx: Context) -> Handled:
    limits = ctx.limits
    if not cmd.media_ids:
        raise InvalidInput("mediaIds must not be empty", field=("mediaIds",))
    if len(cmd.media_ids) > limits.max_media_per_add:
        raise LimitExceeded(
            f"at most {limits.max_media_per_add} media per add", field=("mediaIds",)
        )
    for i, media_id in enumerate(cmd.media_ids):
        check_id(media_id, ("mediaIds", str(i)), limits, "a media id")
    check_placement(cmd.placement, limits)
    return await _place_media(p, view, ctx, cmd.media_ids, cmd.placement, ("mediaIds",))


async def _place_media(
    p: Playlist,
    view: PlaylistView,
    ctx: Context,
    media_ids: tuple[str, ...],
    placement: Placement,
    field: tuple[str, ...],
) -> Handled:
    """New entries for ``media_ids`` at ``placement``, within the entry limit."""
    limits = ctx.limits
    if p.entry_count + len(media_ids) > limits.max_entries:
        raise LimitExceeded(f"a playlist holds at most {limits.max_entries} entries", field=field)
    anchor = await find_anchor(view, placement, {})
    low, high = await gap(view, placement, anchor, frozenset())
    keys, rebalanced = await place(view, low, high, len(media_ids), frozenset())
    added = [
        Entry(ctx.new_id(), key, media_id, ctx.actor_id, ctx.now)
        for key, media_id in zip(keys, media_ids, strict=True)
    ]
    changes: list[Change] = [EntriesMoved(rebalanced)] if rebalanced else []
    changes.append(EntriesAdded(tuple(added)))
    return changes, added, []


async def _targets(
    view: PlaylistView, ids: Sequence[str], extra: Sequence[str] = ()
) -> dict[str, Entry]:
    """The target entries (and ``extra`` ids), raising for ids never in the playlist."""
    found = await view.entries([*ids, *extra])
    for i, entry_id in enumerate(ids):
        if entry_id not in found:
            raise NotFound(
                f"entry {entry_id!r} is not in this playlist", field=("entryIds", str(i))
            )
    return found


async def _move_entries(cmd: MoveEntries, p: Playlist, view: PlaylistView, ctx: Context) -> Handled:
    check_entry_ids(cmd.entry_ids, ctx.limits)
    check_placement(cmd.placement, ctx.limits)
    anchor_id = cmd.placement.anchor
    if anchor_id is not None and anchor_id in cmd.entry_ids:
        raise InvalidInput(
            "an entry cannot be moved next to itself", field=(anchor_field(cmd.placement),)
        )
    found = await _targets(view, cmd.entry_ids, [anchor_id] if anchor_id else [])
    anchor = await find_anchor(view, cmd.placement, found)
    moving = [found[i] for i in cmd.entry_ids if found[i].live]
    skipped = [i for i in cmd.entry_ids if not found[i].live]
    if not moving:
        return [], [], skipped
    exclude = frozenset(e.entry_id for e in moving)
    low, high = await gap(view, cmd.placement, anchor, exclude)
    keys, rebalanced = await place(view, low, high, len(moving), exclude)
    placed = [dataclasses.replace(e, position_key=k) for e, k in zip(moving, keys, strict=True)]
    moves = [
        *rebalanced,
        *(Move(new, old.position_key) for new, old in zip(placed, moving, strict=True)),
    ]
    return [EntriesMoved(tuple(moves))], placed, skipped


async def _remove_entries(
    cmd: RemoveEntries, p: Playlist, view: PlaylistView, ctx: Context
) -> Handled:
    check_entry_ids(cmd.entry_ids, ctx.limits)
    found = await _targets(view, cmd.entry_ids)
    removed = [found[i] for i in cmd.entry_ids if found[i].live]
    skipped = [i for i in cmd.entry_ids if not found[i].live]
    changes: list[Change] = [EntriesRemoved(tuple(removed))] if removed else []
    return changes, [], skipped


def _cannot_be_null(name: str) -> InvalidInput:
    """The refusal of an explicit ``null`` for a detail that cannot be cleared."""
    return InvalidInput(f"{name} cannot be null", field=(name,))


def _update_playlist(cmd: UpdatePlaylist, p: Playlist, ctx: Context) -> Handled:
    if cmd.title is None:
        raise _cannot_be_null("title")
    if cmd.visibility is None:
        raise _cannot_be_null("visibility")
    if cmd.collaborative is None:
        raise _cannot_be_null("collaborative")
    fields = (cmd.title, cmd.description, cmd.visibility, cmd.collaborative)
    if all(f is UNSET for f in fields):
        # The whole input is at fault: its field is the input itself.
        raise InvalidInput("nothing to update", field=())
    previous = Details(p.title, p.description, p.visibility, p.collaborative)
    details = Details(
        title=previous.title if cmd.title is UNSET else clean_title(cmd.title, ctx.limits),
        description=(
            previous.description
            if cmd.description is UNSET
            else clean_description(cmd.description, ctx.limits)
        ),
        visibility=previous.visibility if cmd.visibility is UNSET else cmd.visibility,
        collaborative=previous.collaborative if cmd.collaborative is UNSET else cmd.collaborative,
    )
    changes: list[Change] = [] if details == previous else [DetailsUpdated(details, previous)]
    return changes, [], []


async def _set_member_role(
    cmd: SetMemberRole, p: Playlist, view: PlaylistView, ctx: Context
) -> Handled:
    check_user_id(cmd.user_id, ("userId",), ctx.limits)
    if cmd.role is Role.OWNER:
        raise InvalidInput("a playlist has exactly one owner", field=("role",))
    if cmd.user_id == p.owner_id:
        raise InvalidInput("the owner's role cannot change", field=("userId",))
    previous = await view.role_of(cmd.user_id)
    if previous is cmd.role:
        return [], [], []
    return [MembersChanged(cmd.user_id, cmd.role, previous)], [], []


async def _remove_member(
    cmd: RemoveMember, p: Playlist, view: PlaylistView, ctx: Context
) -> Handled:
    check_user_id(cmd.user_id, ("userId",), ctx.limits)
    if cmd.user_id == p.owner_id:
        raise InvalidInput("the owner cannot be removed", field=("userId",))
    previous = await view.role_of(cmd.user_id)
    if previous is None:
        return [], [], []
    return [MembersChanged(cmd.user_id, None, previous)], [], []


REVERT_UNDO_FACTOR = 20
"""A revert undoes at most this many times ``max_batch_entries`` entries of changes."""


async def _revert_playlist(
    cmd: RevertPlaylist, p: Playlist, view: PlaylistView, ctx: Context
) -> Handled:
    if not 0 <= cmd.to_version <= p.version:
        raise InvalidInput(f"toVersion must be between 0 and {p.version}", field=("toVersion",))
    log = await view.changes_since(cmd.to_version)
    if log is None:
        raise InvalidInput(
            f"version {cmd.to_version} is older than the history kept", field=("toVersion",)
        )
    # A revert is one version like a batch, so it changes no more entries than
    # a batch may touch: ten thousand in one commit held the owner for ~1 s.
    # Reverting to a later version first always gets there in steps. What it
    # undoes is bounded first (REVERT_UNDO_FACTOR batches' worth): undoing 500
    # versions of 1,000 moves each took 1.2 s before the result could be refused.
    limit = ctx.limits.max_batch_entries
    undone = sum(entries_in(changes) for _, changes in log)
    if undone > limit * REVERT_UNDO_FACTOR:
        raise LimitExceeded(
            f"this revert would undo {undone} entries of changes and one revert undoes at "
            f"most {limit * REVERT_UNDO_FACTOR}: revert to a later version first, in steps",
            field=("toVersion",),
        )
    past = revert.undo(p, log)
    changes = revert.changes_to(p, past, await view.entries(list(past.entries)))
    changed = entries_in(changes)
    if changed > limit:
        raise LimitExceeded(
            f"this revert would change {changed} entries and one revert changes at most "
            f"{limit}: revert to a later version first, in steps",
            field=("toVersion",),
        )
    return changes, [], []
