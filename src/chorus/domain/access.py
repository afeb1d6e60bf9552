"""Who may do what to a playlist (DESIGN §7), in one place.

* A playlist the actor may not see is :class:`NotFound`, never
  :class:`Forbidden`: no existence leak.
* OWNER does everything; EDITOR edits entries, title and description while
  the playlist is collaborative; VIEWER reads.
* Only the owner changes members, visibility and collaboration, and deletes;
  any member may remove themselves.
* A system playlist (Liked Songs) is its owner's alone: only ``likeMedia`` /
  ``unlikeMedia`` add to it (so a media is never in it twice), its details
  and members never change and it is never deleted; the owner may still
  reorder, remove and revert its entries. Likes go to no other playlist.

Access is checked before anything else about a command (its base version,
its arguments), so a refused actor learns nothing more than that. A command
without a rule here is refused, never allowed: mypy fails on the match in
:func:`authorize` until a new command has its case, and at run time anything
else is :class:`Forbidden`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from chorus.domain.commands import (
    UNSET,
    AddEntries,
    DeletePlaylist,
    LikeMedia,
    MoveEntries,
    PlaylistCommand,
    RemoveEntries,
    RemoveMember,
    RevertPlaylist,
    SetMemberRole,
    UnlikeMedia,
    UpdatePlaylist,
)
from chorus.domain.errors import Forbidden, NotFound
from chorus.domain.model import Playlist, Role, role_can_edit, role_can_read


def readable(playlist: Playlist | None, role: Role | None) -> Playlist:
    """The playlist, or :class:`NotFound` when the actor may not see it."""
    if playlist is None or not role_can_read(role, playlist):
        raise NotFound("playlist not found", field=("playlistId",))
    return playlist


def _edit(playlist: Playlist, role: Role | None) -> None:
    if not role_can_edit(role, playlist):
        raise Forbidden("you may not edit this playlist")


def _owner(role: Role | None, what: str) -> None:
    if role is not Role.OWNER:
        raise Forbidden(f"only the owner may {what}")


def _not_system(playlist: Playlist, what: str) -> None:
    if playlist.system:
        raise Forbidden(f"{playlist.title} cannot {what}")


def authorize(
    command: PlaylistCommand, playlist: Playlist, role: Role | None, actor_id: str
) -> None:
    """Raises :class:`Forbidden` unless ``role`` allows ``command`` on a visible ``playlist``.

    Raises:
        Forbidden: the role does not allow the command, or ``command`` is not
            one this module has a rule for.
    """
    match command:
        case LikeMedia() | UnlikeMedia():
            if not playlist.system:
                raise Forbidden("likes go to Liked Songs only")
            _owner(role, "like or unlike media")
        case AddEntries():
            _not_system(playlist, "be added to; use likeMedia")
            _edit(playlist, role)
        case MoveEntries() | RemoveEntries() | RevertPlaylist():
            _edit(playlist, role)
        case UpdatePlaylist():
            _not_system(playlist, "be renamed or shared")
            if command.title is not UNSET or command.description is not UNSET:
                _edit(playlist, role)
            if command.visibility is not UNSET or command.collaborative is not UNSET:
                _owner(role, "change visibility or collaboration")
        case SetMemberRole():
            _not_system(playlist, "have members")
            _owner(role, "change members")
        case RemoveMember():
            if command.user_id != actor_id:
                _owner(role, "remove other members")
            elif role is None:
                raise Forbidden("you are not a member of this playlist")
        case DeletePlaylist():
            _not_system(playlist, "be deleted")
            _owner(role, "delete the playlist")
        case _:
            if TYPE_CHECKING:
                assert_never(command)  # every PlaylistCommand has its case above
            raise Forbidden(f"no access rule for {type(command).__name__}")
