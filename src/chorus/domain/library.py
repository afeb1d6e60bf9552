"""A user's library: the system playlists every user has (today: Liked Songs).

Liked Songs is an ordinary playlist row (:class:`~chorus.domain.model.PlaylistKind`
``LIKED_SONGS``) with a reserved id derived from its owner:

    ``liked_songs_id(secret, user) = "ls" + hex(HMAC-SHA256(secret, "liked-songs\\0" + user))[:30]``

32 characters like every other playlist id. The id is stable for as long as
the server's library secret (``CHORUS_LIBRARY_SECRET``) stays the same, and
without the secret nobody can compute another user's id from their user id;
knowing the id gives nothing anyway, as the playlist is PRIVATE and owner-only.
It is created on first use (a like, an unlike, or reading ``viewer.likedSongs``)
at version 0, by a command the store writes with the reserved operation id
:data:`CREATE_OPERATION_ID`; clients cannot send operation ids of that form
(:func:`chorus.domain.validation.check_operation_id`).
"""

from __future__ import annotations

import hashlib
import hmac

from chorus.domain.changes import Details
from chorus.domain.model import Visibility

LIKED_SONGS_TITLE = "Liked Songs"
LIKED_SONGS_ID_PREFIX = "ls"
SYSTEM_OPERATION_PREFIX = "system:"
"""Operation ids the server writes for itself; refused from clients."""
CREATE_OPERATION_ID = SYSTEM_OPERATION_PREFIX + "create-liked-songs"
"""The operation id of version 0 of a user's Liked Songs (scoped to that user)."""

LIKED_SONGS_DETAILS = Details(
    title=LIKED_SONGS_TITLE, description=None, visibility=Visibility.PRIVATE, collaborative=False
)


def liked_songs_id(secret: bytes, user_id: str) -> str:
    """The playlist id of ``user_id``'s Liked Songs: 32 lowercase hex-ish characters.

    Args:
        secret: the server's library secret (at least 32 bytes in practice).
        user_id: a token's ``sub``.

    Raises:
        ValueError: an empty secret (the id would be guessable).
    """
    if not secret:
        raise ValueError("the library secret must not be empty")
    message = b"liked-songs\0" + user_id.encode("utf-8", "surrogatepass")
    digest = hmac.new(secret, message, hashlib.sha256).hexdigest()
    return LIKED_SONGS_ID_PREFIX + digest[:30]
