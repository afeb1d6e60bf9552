"""Per-request DataLoaders: one batched query or catalog call per kind of key.

Created with each request's :class:`~chorus.resolvers.read_source.ReadSource`
(and each subscription event's), so nothing is cached across requests.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Hashable, Iterable, Mapping
from typing import Any, TypeVar, cast

from strawberry.dataloader import DataLoader

from chorus.catalog.protocol import CatalogUnavailable, Media
from chorus.db import feed, pages
from chorus.domain.changes import Change
from chorus.domain.follows import Target
from chorus.domain.model import Playlist, Role
from chorus.resolvers.reads import ReadSet
from chorus.resolvers.services import Services

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PageLoader(DataLoader[K, V]):
    """A DataLoader that also loads a whole page's keys in one call, with no future per key.

    ``load_many`` makes a future per key, a batch task per key and a
    ``gather`` over them: for a 50-entry page's media about a third of the
    media read's CPU (docs/caching.md, "The cold path"). What a page loaded is
    kept as values (:attr:`_paged`), and a key's future made only when that key
    is loaded, primed or cleared by itself: the 50 futures of priming a page
    were ~2% of a cold read's CPU (py-spy), and usually nothing loads the key again.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._paged: dict[K, V] = {}
        """Values :meth:`load_page` loaded whose key has no future in the cache yet."""

    async def load_page(self, keys: list[K]) -> list[V]:
        """``load_many(keys)``'s values: the keys not loaded yet in one call of the batch
        function (kept for later loads), the rest from the cache. A key whose load
        is still in flight (or failed) makes it ``load_many``."""
        if not self.cache:
            return await self.load_many(keys)
        paged = self._paged
        known: dict[K, V] = {}
        missing: list[K] = []
        if self._no_futures():
            # Usually nothing loaded one key of this kind by itself: no future to ask
            # for each key (a Python call each, two a key: ~2% of a cold read, cProfile).
            for key in dict.fromkeys(keys):
                if key in paged:
                    known[key] = paged[key]
                else:
                    missing.append(key)
        else:
            for key in dict.fromkeys(keys):
                if key in paged:
                    known[key] = paged[key]
                    continue
                future = self.cache_map.get(key)
                if future is None or future.cancelled():
                    missing.append(key)
                elif future.done() and future.exception() is None:
                    known[key] = future.result()
                else:
                    return await self.load_many(keys)
        if missing:
            values = await self.load_fn(missing)
            if any(isinstance(v, BaseException) for v in values):
                return await self.load_many(keys)  # DataLoader's way: an error per key
            loaded = cast(dict[K, V], dict(zip(missing, values, strict=True)))
            if self._no_futures():
                paged.update(loaded)
            else:
                for key, value in loaded.items():
                    # A key loaded meanwhile keeps its future's value, as prime_many would.
                    if self.cache_map.get(key) is None:
                        paged[key] = value
            known.update(loaded)
        return [known[key] for key in keys]

    def _no_futures(self) -> bool:
        """Whether the cache holds no future (strawberry's ``DefaultCache``, empty)."""
        futures = getattr(self.cache_map, "cache_map", None)
        return type(futures) is dict and not futures

    def _settle(self, keys: Iterable[K]) -> None:
        """The paged value of each of ``keys`` as its future in the cache, as priming made it."""
        paged = self._paged
        if paged:
            ready = {key: paged.pop(key) for key in keys if key in paged}
            if ready:
                super().prime_many(ready)

    def load(self, key: K) -> Awaitable[V]:
        self._settle((key,))
        return super().load(key)

    def prime_many(self, data: Mapping[K, V], force: bool = False) -> None:
        self._settle(data)
        super().prime_many(data, force)

    def clear(self, key: K) -> None:
        self._settle((key,))  # a paged key has a future to clear, as priming made it
        super().clear(key)

    def clear_many(self, keys: Iterable[K]) -> None:
        keys = list(keys)
        self._settle(keys)
        super().clear_many(keys)

    def clear_all(self) -> None:
        self._paged.clear()
        super().clear_all()


class Loaders:
    """Per-request DataLoaders: one batched query or catalog call per kind of key.

    The batch functions are methods of a :class:`_Batches`, not of this
    object: a DataLoader holding a bound method of the object that holds the
    DataLoader is a reference cycle, and then every value a request loaded
    (a feed page's changes: tens of MB) outlived the request until a full
    collection, which a serving process makes rare (``cli.process.GC_THRESHOLDS``).
    """

    def __init__(self, services: Services, viewer_id: str | None, reads: ReadSet) -> None:
        self._batches = _Batches(services, viewer_id, reads)

    # Each made when a resolver first asks for it: a mutation's request uses none
    # (six DataLoaders per request were ~1% of an addEntries' CPU, py-spy). Typed by
    # annotation, not by subscripting the class: DataLoader[K, V](...) is typing's
    # generic alias called at run time, its arguments hashed in typing's cache on
    # every request (6% of a subscribe's CPU for these six).

    @functools.cached_property
    def playlist(self) -> DataLoader[str, Playlist | None]:
        """Playlist headers by id (one query per batch)."""
        return DataLoader(self._batches.playlists)

    @functools.cached_property
    def role(self) -> DataLoader[str, Role | None]:
        """The viewer's role in each playlist by id (one query per batch)."""
        return DataLoader(self._batches.roles)

    @functools.cached_property
    def media(self) -> PageLoader[str, Media | None]:
        """Media by id (one catalog call per batch; a page's primed)."""
        return PageLoader(self._batches.media)

    @functools.cached_property
    def liked(self) -> DataLoader[str, bool]:
        """Whether the viewer's Liked Songs holds a media id (one query per batch)."""
        return DataLoader(self._batches.liked)

    @functools.cached_property
    def follower_count(self) -> DataLoader[Target, int]:
        """Followers of a playlist or user (one query per batch)."""
        return DataLoader(self._batches.follower_counts)

    @functools.cached_property
    def feed_changes(self) -> DataLoader[tuple[str, int], tuple[Change, ...]]:
        """The changes of a feed item's version, from the log (one query per page)."""
        return DataLoader(self._batches.feed_changes)

    def forget(self, playlist_id: str) -> None:
        """Drop what was loaded about a playlist (after the request committed a change to it)."""
        made = self.__dict__  # the loaders made so far (cached_property keeps them there)
        for name in ("playlist", "role"):
            loader = made.get(name)
            if loader is not None:
                with contextlib.suppress(KeyError):
                    loader.clear(playlist_id)
        liked = made.get("liked")
        if liked is not None:
            liked.clear_all()  # a like or unlike may have changed any answer


class _Batches:
    """The batch functions of one request's :class:`Loaders` (and nothing that holds them)."""

    def __init__(self, services: Services, viewer_id: str | None, reads: ReadSet) -> None:
        self._services = services
        self._viewer_id = viewer_id
        self._reads = reads

    async def playlists(self, ids: list[str]) -> list[Playlist | None]:
        found = await pages.playlists_by_id(self._services.db, ids)
        return [found.get(i) for i in ids]

    async def roles(self, playlist_ids: list[str]) -> list[Role | None]:
        if self._viewer_id is None:
            return [None] * len(playlist_ids)
        found = await pages.roles_of(self._services.db, self._viewer_id, playlist_ids)
        return [found.get(i) for i in playlist_ids]

    async def liked(self, media_ids: list[str]) -> list[bool]:
        if self._viewer_id is None or not self._services.store.keeps_liked_songs:
            return [False] * len(media_ids)
        # Not created yet reads as an empty playlist: no row, no entries.
        playlist_id = self._services.store.liked_songs_id(self._viewer_id)
        liked = await pages.media_in(self._services.db, playlist_id, media_ids)
        return [m in liked for m in media_ids]

    async def follower_counts(self, targets: list[Target]) -> list[int]:
        found = await pages.follower_counts(self._services.db, targets)
        return [found.get(t, 0) for t in targets]

    async def feed_changes(self, keys: list[tuple[str, int]]) -> list[tuple[Change, ...]]:
        found = await feed.changes_at(self._services.db, keys)
        return [found.get(k, ()) for k in keys]

    async def media(self, media_ids: list[str]) -> list[Media | None]:
        # A failing catalog must not fail the request: entries come back
        # with media null (DESIGN §8).
        self._reads.read_media()
        try:
            found = await self._services.catalog.get_many(media_ids)
        except CatalogUnavailable:
            self._reads.refuse("the catalog did not answer")
            return [None] * len(media_ids)
        return [found.get(i) for i in media_ids]
