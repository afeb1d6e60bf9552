"""The embedded catalog: the Chinook sample in memory plus imported media in SQL.

The embedded profile needs no catalog service: :class:`EmbeddedCatalog` answers
from the packaged Chinook catalogue (:mod:`chorus.catalog.chinook`) and from
the ``catalog_media`` table, where importers (:mod:`chorus.importers`) put
media such as the Million Playlist Dataset's tracks. The same object can be
served as the separate catalog service (:mod:`chorus.catalog.service`).

Search order: Chinook matches first, in Chinook track id order, then imported
matches by id (bytewise); an offset counts through that combined sequence.
Offset pages are exact while nothing is imported between two requests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Row, func, select, true
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from chorus.catalog.chinook import MEDIA_ID_PREFIX, load_chinook
from chorus.catalog.matching import check_page, normalise, search_text
from chorus.catalog.protocol import CatalogUnavailable, Media, MediaPage
from chorus.db.engine import Database
from chorus.db.tables import catalog_media
from chorus.domain.limits import MAX_ID_LENGTH

_SQL_BATCH = 1_000
"""Ids per ``IN (…)`` list: far below SQLite's and asyncpg's bound-parameter limits."""


def _batches(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _SQL_BATCH):
        yield items[start : start + _SQL_BATCH]


def _media_from_row(row: Row[Any]) -> Media:
    return Media(
        id=row.id,
        title=row.title,
        artists=tuple(row.artists),
        album=row.album,
        duration_ms=row.duration_ms,
        available=row.available,
    )


def _check_importable(media: Media) -> None:
    if not media.id or len(media.id) > MAX_ID_LENGTH or not media.id.isprintable():
        raise ValueError(f"media id {media.id!r} is not 1–{MAX_ID_LENGTH} printable characters")
    if media.id.startswith(MEDIA_ID_PREFIX):
        raise ValueError(f"media id {media.id!r} uses the reserved prefix {MEDIA_ID_PREFIX!r}")


class EmbeddedCatalog:
    """The packaged Chinook catalogue plus media imported into ``catalog_media``.

    Args:
        db: the database holding ``catalog_media`` (migration 0002). ``None``
            gives the Chinook catalogue alone, with no storage at all;
            :meth:`add_many` then refuses.

    The Chinook data is loaded on the first call that needs it (once per
    process, ~20 ms). The catalog does not own ``db``: :meth:`aclose` leaves it
    open for its owner to dispose.
    """

    def __init__(self, db: Database | None = None) -> None:
        self._db = db

    async def get_many(self, media_ids: Sequence[str]) -> dict[str, Media]:
        """Metadata of ``media_ids``: Chinook from memory, the rest in one SQL query.

        Returns:
            ``{media id: Media}``; unknown ids are absent.

        Raises:
            CatalogUnavailable: the database could not be read.
        """
        chinook = load_chinook().media
        found: dict[str, Media] = {}
        rest: list[str] = []
        for media_id in dict.fromkeys(media_ids):
            if media_id in chinook:
                found[media_id] = chinook[media_id]
            elif not media_id.startswith(MEDIA_ID_PREFIX):
                rest.append(media_id)
        if rest and self._db is not None:
            try:
                async with self._db.read() as conn:
                    for batch in _batches(rest):
                        rows = await conn.execute(
                            select(catalog_media).where(catalog_media.c.id.in_(batch))
                        )
                        found.update((r.id, _media_from_row(r)) for r in rows)
            except (SQLAlchemyError, OSError) as exc:
                raise CatalogUnavailable("the catalog database could not be read") from exc
        return found

    async def search(self, query: str, *, offset: int, limit: int) -> MediaPage:
        """Media whose title, an artist or the album contains ``query``.

        See :meth:`chorus.catalog.protocol.Catalog.search` for matching; the
        order is Chinook matches by track id, then imported matches by id.

        Raises:
            ValueError: ``offset < 0`` or ``limit < 1``.
            CatalogUnavailable: the database could not be read.
        """
        check_page(offset, limit)
        needle = normalise(query)
        chinook = [m for text, m in load_chinook().search_texts if needle in text]
        items = chinook[offset : offset + limit]
        if self._db is None:
            return MediaPage(tuple(items), len(chinook), offset)
        try:
            async with self._db.read() as conn:
                imported, sql_items = await self._search_sql(
                    conn,
                    needle,
                    offset=max(0, offset - len(chinook)),
                    limit=limit - len(items),
                )
        except (SQLAlchemyError, OSError) as exc:
            raise CatalogUnavailable("the catalog database could not be read") from exc
        return MediaPage((*items, *sql_items), len(chinook) + imported, offset)

    @staticmethod
    async def _search_sql(
        conn: AsyncConnection, needle: str, *, offset: int, limit: int
    ) -> tuple[int, list[Media]]:
        """How many imported media match, and up to ``limit`` of them from ``offset``."""
        # autoescape: the user's % and _ (and the escape character) match literally.
        where: ColumnElement[bool] = (
            catalog_media.c.search_text.contains(needle, autoescape=True) if needle else true()
        )
        total = int(
            await conn.scalar(select(func.count()).select_from(catalog_media).where(where)) or 0
        )
        if limit <= 0 or offset >= total:
            return total, []
        rows = await conn.execute(
            select(catalog_media)
            .where(where)
            .order_by(catalog_media.c.id)
            .offset(offset)
            .limit(limit)
        )
        return total, [_media_from_row(r) for r in rows]

    async def add_many(self, media: Sequence[Media]) -> int:
        """Insert imported media, or update the ones already there, in one transaction.

        Args:
            media: the media to store; when an id repeats, its last occurrence
                wins. Ids are 1–``MAX_ID_LENGTH`` printable characters and may not start
                with ``"chinook:"`` (reserved for the packaged catalogue).

        Returns:
            How many of the ids were not in the catalog before (two concurrent
            imports of the same new id may both count it).

        Raises:
            ValueError: a malformed or reserved media id; nothing was stored.
            RuntimeError: this catalog was made without a database.
            CatalogUnavailable: the database could not be written.
        """
        if self._db is None:
            raise RuntimeError("this EmbeddedCatalog has no database to import media into")
        latest: dict[str, Media] = {}
        for item in media:
            _check_importable(item)
            latest[item.id] = item
        if not latest:
            return 0
        now = datetime.now(UTC)
        rows = [
            {
                "id": m.id,
                "title": m.title,
                "artists": list(m.artists),
                "album": m.album,
                "duration_ms": m.duration_ms,
                "available": m.available,
                "search_text": search_text(m),
                "added_at": now,
            }
            for m in latest.values()
        ]
        ids = list(latest)
        try:
            async with self._db.write() as conn:
                existing = 0
                for batch in _batches(ids):
                    existing += int(
                        await conn.scalar(
                            select(func.count())
                            .select_from(catalog_media)
                            .where(catalog_media.c.id.in_(batch))
                        )
                        or 0
                    )
                dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
                stmt = dialect.insert(catalog_media)
                stmt = stmt.on_conflict_do_update(
                    index_elements=[catalog_media.c.id],
                    set_={
                        name: stmt.excluded[name]
                        for name in (
                            "title",
                            "artists",
                            "album",
                            "duration_ms",
                            "available",
                            "search_text",
                        )
                    },
                )
                for start in range(0, len(rows), _SQL_BATCH):
                    await conn.execute(stmt, rows[start : start + _SQL_BATCH])
        except (SQLAlchemyError, OSError) as exc:
            raise CatalogUnavailable("the catalog database could not be written") from exc
        return len(ids) - existing

    async def aclose(self) -> None:
        """Nothing to release: the database belongs to the caller."""
