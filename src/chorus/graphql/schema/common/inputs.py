"""What every input of an edit of a playlist starts with (DESIGN §5).

``playlistId`` (the playlist's global ID), ``operationId`` (the client's id of
this edit: a retry with it replays the commit) and ``baseVersion`` (the
version the client saw); each input adds its own fields and ends with
``strict``. Not a schema type itself: only the features' inputs are.
"""

from __future__ import annotations

import strawberry


@strawberry.input
class PlaylistEditInput:
    playlist_id: strawberry.ID
    operation_id: strawberry.ID
    base_version: int
