"""Liked Songs (issue 14): its id, likes and unlikes, and what it refuses."""

from __future__ import annotations

import pytest

from chorus.domain import library
from chorus.domain.commands import (
    AddEntries,
    DeletePlaylist,
    LikeMedia,
    MoveEntries,
    SetMemberRole,
    UnlikeMedia,
    UpdatePlaylist,
)
from chorus.domain.errors import Forbidden, InvalidInput, NotFound
from chorus.domain.model import PlaylistKind, Role, Visibility
from chorus.domain.validation import check_operation_id
from tests.unit.fakes import PLAYLIST_ID, MemoryPlaylist

SECRET = b"s" * 32


def test_the_id_is_stable_per_user_and_secret_and_differs_between_them() -> None:
    alice = library.liked_songs_id(SECRET, "alice")
    assert alice == library.liked_songs_id(SECRET, "alice")
    assert len(alice) == 32
    assert alice.startswith(library.LIKED_SONGS_ID_PREFIX)
    assert alice != library.liked_songs_id(SECRET, "bob")
    assert alice != library.liked_songs_id(b"t" * 32, "alice")


def test_an_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="secret"):
        library.liked_songs_id(b"", "alice")


def test_clients_cannot_send_system_operation_ids() -> None:
    with pytest.raises(InvalidInput, match="reserved"):
        check_operation_id(library.CREATE_OPERATION_ID)


def liked() -> MemoryPlaylist:
    return MemoryPlaylist("alice", liked_songs=True)


def test_version_0_is_private_owner_only_and_titled() -> None:
    pl = liked()
    p = pl.state.playlist
    assert (p.title, p.visibility, p.kind, p.version) == (
        library.LIKED_SONGS_TITLE,
        Visibility.PRIVATE,
        PlaylistKind.LIKED_SONGS,
        0,
    )
    assert pl.state.members == {"alice": Role.OWNER}
    # Through the wire, as the log keeps it.
    assert pl.fold_log().playlist == p


def test_newest_like_first_and_liking_twice_adds_nothing() -> None:
    pl = liked()
    pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), "m1"), "alice")
    pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), "m2"), "alice")
    again = pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), "m1"), "alice")
    assert again.changes == ()
    assert again.outcome.version == 3  # a version that changes nothing
    assert [e.media_id for e in pl.live()] == ["m2", "m1"]


def test_unlike_removes_the_media_and_unliking_again_is_a_no_op() -> None:
    pl = liked()
    pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), "m1"), "alice")
    pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), "m2"), "alice")
    pl.execute_sync(UnlikeMedia(PLAYLIST_ID, pl.op(), "m1"), "alice")
    assert [e.media_id for e in pl.live()] == ["m2"]
    assert pl.execute_sync(UnlikeMedia(PLAYLIST_ID, pl.op(), "m1"), "alice").changes == ()
    assert [e.media_id for e in pl.live()] == ["m2"]


def test_another_user_does_not_see_it() -> None:
    pl = liked()
    with pytest.raises(NotFound):
        pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), "m1"), "bob")


def test_likes_go_to_liked_songs_only() -> None:
    pl = MemoryPlaylist("alice")
    with pytest.raises(Forbidden, match="Liked Songs only"):
        pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), "m1"), "alice")


def test_a_malformed_media_id_is_invalid_input() -> None:
    pl = liked()
    with pytest.raises(InvalidInput) as caught:
        pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), ""), "alice")
    assert caught.value.field == ("mediaId",)


@pytest.mark.parametrize(
    "make",
    [
        lambda pl: AddEntries(PLAYLIST_ID, pl.op(), pl.version, ("m1",)),
        lambda pl: UpdatePlaylist(PLAYLIST_ID, pl.op(), pl.version, title="Mine"),
        lambda pl: UpdatePlaylist(PLAYLIST_ID, pl.op(), pl.version, visibility=Visibility.PUBLIC),
        lambda pl: SetMemberRole(PLAYLIST_ID, pl.op(), pl.version, "bob", Role.VIEWER),
        lambda pl: DeletePlaylist(PLAYLIST_ID, pl.op(), pl.version),
    ],
    ids=["add", "rename", "share", "members", "delete"],
)
def test_what_liked_songs_refuses(make: object) -> None:
    pl = liked()
    with pytest.raises(Forbidden, match="Liked Songs cannot"):
        pl.execute_sync(make(pl), "alice")  # type: ignore[operator]


def test_the_owner_may_reorder_liked_songs() -> None:
    pl = liked()
    for media in ("m1", "m2", "m3"):
        pl.execute_sync(LikeMedia(PLAYLIST_ID, pl.op(), media), "alice")
    first = pl.live()[0].entry_id
    pl.execute_sync(MoveEntries(PLAYLIST_ID, pl.op(), pl.version, (first,)), "alice")
    assert [e.media_id for e in pl.live()] == ["m2", "m1", "m3"]
