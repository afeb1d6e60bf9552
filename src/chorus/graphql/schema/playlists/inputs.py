"""The inputs of the edits of a playlist (DESIGN §5).

Each edit's input is a :class:`PlaylistEditInput` (``playlistId``,
``operationId``, ``baseVersion``) ending with ``strict``; ``createPlaylist``'s
has no playlist yet. :func:`update_command` turns ``updatePlaylist``'s (alone or
in a batch) into its command.
"""

from __future__ import annotations

from typing import Any

import strawberry

from chorus.domain import commands as cmd
from chorus.domain.model import Visibility as VisibilityEnum
from chorus.graphql.schema.common.inputs import PlaylistEditInput
from chorus.graphql.schema.common.types import Visibility


@strawberry.input
class CreatePlaylistInput:
    operation_id: strawberry.ID
    title: str
    description: str | None = None
    visibility: Visibility = VisibilityEnum.PRIVATE  # type: ignore[valid-type]
    collaborative: bool = False


@strawberry.input(
    description="Add media contiguously, in the order given, after or before an "
    "entry; neither appends."
)
class AddEntriesInput(PlaylistEditInput):
    media_ids: list[str]
    after: strawberry.ID | None = None
    before: strawberry.ID | None = None
    strict: bool = strawberry.field(
        default=False, description="Compare-and-set: refuse unless baseVersion is current."
    )


@strawberry.input(
    description="Move entries contiguously, in the order given, after or before "
    "an entry; neither moves them to the end."
)
class MoveEntriesInput(PlaylistEditInput):
    entry_ids: list[strawberry.ID]
    after: strawberry.ID | None = None
    before: strawberry.ID | None = None
    strict: bool = False


@strawberry.input
class RemoveEntriesInput(PlaylistEditInput):
    entry_ids: list[strawberry.ID]
    strict: bool = False


@strawberry.input(description="Fields left out stay as they are; description null clears it.")
class UpdatePlaylistInput(PlaylistEditInput):
    title: str | None = strawberry.UNSET
    description: str | None = strawberry.UNSET
    visibility: Visibility | None = strawberry.UNSET  # type: ignore[valid-type]
    collaborative: bool | None = strawberry.UNSET
    strict: bool = False


@strawberry.input(
    description="Commit a new version whose entries, title and description "
    "equal those of toVersion. Members and visibility are not reverted."
)
class RevertPlaylistInput(PlaylistEditInput):
    to_version: int
    strict: bool = False


@strawberry.input
class DeletePlaylistInput(PlaylistEditInput):
    strict: bool = False


def update_command(
    i: Any, playlist_id: str, base_version: int, strict: bool = False
) -> cmd.UpdatePlaylist:
    """The command of an ``updatePlaylist`` (its input, or the same edit in a batch).

    An explicit ``null`` is passed on as ``None``: the handler refuses it for the fields
    that cannot be cleared, after the access checks (so the answer names the playlist).

    Args:
        i: an :class:`UpdatePlaylistInput` or a batch's ``UpdatePlaylistOperation``:
            ``operationId``, ``title``, ``description``, ``visibility``, ``collaborative``.
    """
    return cmd.UpdatePlaylist(
        playlist_id,
        str(i.operation_id),
        base_version,
        _unset(i.title),
        _unset(i.description),
        _unset(i.visibility),
        _unset(i.collaborative),
        strict,
    )


def _unset(value: Any) -> Any:
    return cmd.UNSET if value is strawberry.UNSET else value
