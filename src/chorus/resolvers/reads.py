"""What one request read: the record an answer's cache entry is built from.

Every read in :mod:`chorus.resolvers.queries` (and the viewer-dependent
fields of :mod:`chorus.graphql`) tells the request's :class:`ReadSet` what it
read. From it the response cache (:mod:`chorus.caches.responses`) learns:

* the version of every playlist the answer read — the answer is valid while
  each is still that playlist's head, and never after;
* the answer's **audience**: *shared* (any authenticated viewer gets the same
  answer) when it read only PUBLIC, undeleted playlists and no field that
  depends on who asks (``viewerRole``, ``viewer``); otherwise only the viewer
  who asked;
* whether it read media from the catalog (whose metadata changes without a
  playlist version: a bounded freshness instead);
* or that it must not be cached at all: a read that does not tell the
  version it was read at (members, one entry by id, history, the viewer's
  playlists, search), a playlist that does not exist, one playlist read at
  two versions (an edit raced the request), a catalog that failed.

Nothing here is consulted while answering: it only decides what may be
remembered afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chorus.domain.model import Playlist, Visibility

RACED = "one playlist read at two versions"
"""Why an answer that read one playlist at two versions (an edit committed between) is refused."""


@dataclass(slots=True)
class ReadSet:
    """The reads of one request, as the resolvers report them.

    Attributes:
        versions: playlist id → the version the answer read it at.
        viewer_dependent: a field whose value depends on the viewer was read.
        private: a playlist that is not PUBLIC (or is deleted) was read.
        media: media metadata was read from the catalog.
        uncacheable: why the answer must not be cached (``None``: it may be).
    """

    versions: dict[str, int] = field(default_factory=dict)
    viewer_dependent: bool = False
    private: bool = False
    media: bool = False
    uncacheable: str | None = None

    def playlist(self, playlist: Playlist) -> None:
        """The header of ``playlist`` was read (visible to the viewer or not)."""
        self.version(playlist.id, playlist.version)
        if playlist.visibility is not Visibility.PUBLIC or playlist.deleted:
            self.private = True

    def version(self, playlist_id: str, version: int) -> None:
        """Something of ``playlist_id`` was read at ``version`` (a page names its version)."""
        seen = self.versions.setdefault(playlist_id, version)
        if seen != version:
            self.refuse(RACED)

    def depends_on_viewer(self) -> None:
        """A field whose value is the viewer's own (``viewerRole``, ``viewer``) was read."""
        self.viewer_dependent = True

    def read_media(self) -> None:
        self.media = True

    def refuse(self, reason: str) -> None:
        """This answer must not be cached, for ``reason`` (the first reason is kept)."""
        if self.uncacheable is None:
            self.uncacheable = reason

    @property
    def raced(self) -> bool:
        """An edit committed between two reads of one playlist: the answer mixes versions."""
        return self.uncacheable == RACED

    @property
    def shared(self) -> bool:
        """Whether every authenticated viewer would get this same answer."""
        return not (self.viewer_dependent or self.private)


__all__ = ["RACED", "ReadSet"]
