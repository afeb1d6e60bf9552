"""The media boundary: Chorus asks a catalog for media metadata (docs/full-profile.md).

Playlists store media ids; titles, artists, albums and durations come from a
:class:`Catalog`, a separate service reached through this protocol:

* :mod:`chorus.catalog.protocol` — :class:`Media`, :class:`MediaPage`,
  :class:`Catalog`, :class:`CatalogUnavailable`;
* :mod:`chorus.catalog.embedded` — :class:`EmbeddedCatalog`: the packaged
  Chinook catalogue (3,503 tracks) plus media imported into SQL;
* :mod:`chorus.catalog.http` — :class:`HttpCatalog`, the client of the service;
* :mod:`chorus.catalog.service` — :func:`create_catalog_app`, the service
  itself, serving any catalog over HTTP;
* :mod:`chorus.catalog.chinook` — the sample data and its playlists
  (:func:`chinook_playlists`).

Nothing here connects or reads data at import time.
"""

from __future__ import annotations

from chorus.catalog.chinook import chinook_playlists
from chorus.catalog.embedded import EmbeddedCatalog
from chorus.catalog.http import HttpCatalog
from chorus.catalog.protocol import Catalog, CatalogUnavailable, Media, MediaPage
from chorus.catalog.service import create_catalog_app

__all__ = [
    "Catalog",
    "CatalogUnavailable",
    "EmbeddedCatalog",
    "HttpCatalog",
    "Media",
    "MediaPage",
    "chinook_playlists",
    "create_catalog_app",
]
