"""Opaque global IDs (Relay object identification) and cursors.

Both are URL-safe base64 of a small UTF-8 text, so clients treat them as
opaque strings while the server can decode them without a lookup:

* a global ID is ``"<TypeName>:<key>"`` — ``Playlist:<playlist id>``,
  ``PlaylistEntry:<playlist id>:<entry id>``;
* an entry cursor is ``"k:<position key>:<entry id>"`` — the keyset
  ``(position_key, entry_id)`` of the entry, which stays meaningful after the
  entry moves away or is removed (it pages from where the entry stood);
* other connections use ``"<prefix>:<value>"`` of their own keyset.

Decoding never raises anything but :class:`MalformedId`.
"""

from __future__ import annotations

import base64
import binascii

from chorus.domain import positions

MAX_ENCODED_LENGTH = 512


class MalformedId(ValueError):
    """Not an ID or cursor this server made."""


def _encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode(value: str) -> str:
    if not value or len(value) > MAX_ENCODED_LENGTH:
        raise MalformedId("malformed")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        text = raw.decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise MalformedId("malformed") from None
    # Nothing this server makes holds a control character; NUL would even
    # reach PostgreSQL, which cannot compare text with it.
    if not text.isprintable():
        raise MalformedId("malformed")
    return text


def to_global_id(type_name: str, *key: str) -> str:
    """The global ID of an object: ``type_name`` and its key parts."""
    return _encode(":".join((type_name, *key)))


def from_global_id(value: str) -> tuple[str, list[str]]:
    """``(type_name, key parts)`` of a global ID.

    Raises:
        MalformedId: not a global ID.
    """
    type_name, _, rest = _decode(value).partition(":")
    if not type_name or not rest:
        raise MalformedId("malformed")
    return type_name, rest.split(":")


def playlist_id(value: str) -> str:
    """The playlist id inside a ``Playlist`` global ID.

    Raises:
        MalformedId: not a playlist's global ID.
    """
    type_name, key = from_global_id(value)
    if type_name != "Playlist" or len(key) != 1 or not key[0]:
        raise MalformedId("not a Playlist ID")
    return key[0]


def entry_id(value: str, in_playlist: str | None = None) -> str:
    """The entry id inside a ``PlaylistEntry`` global ID.

    Args:
        value: the global ID.
        in_playlist: when given, an entry of another playlist is refused.

    Raises:
        MalformedId: not an entry's global ID (of that playlist).
    """
    type_name, key = from_global_id(value)
    if type_name != "PlaylistEntry" or len(key) != 2 or not all(key):
        raise MalformedId("not a PlaylistEntry ID")
    if in_playlist is not None and key[0] != in_playlist:
        raise MalformedId("an entry of another playlist")
    return key[1]


def entry_cursor(position_key: str, entry_id_: str) -> str:
    """The cursor of an entry at ``(position_key, entry_id)``."""
    return _encode(f"k:{position_key}:{entry_id_}")


def decode_entry_cursor(cursor: str) -> tuple[str, str]:
    """The keyset ``(position_key, entry_id)`` of an entry cursor.

    Raises:
        MalformedId: not an entry cursor.
    """
    prefix, key, entry = [*_decode(cursor).split(":", 2), "", ""][:3]
    if prefix != "k" or not positions.is_valid(key) or not entry or ":" in entry:
        raise MalformedId("malformed cursor")
    return key, entry


def cursor(prefix: str, value: str) -> str:
    """A cursor of another connection: its ``prefix`` and keyset ``value``."""
    return _encode(f"{prefix}:{value}")


def decode_cursor(prefix: str, value: str) -> str:
    """The keyset value of a :func:`cursor` with ``prefix``.

    Raises:
        MalformedId: not such a cursor.
    """
    found, sep, rest = _decode(value).partition(":")
    if found != prefix or not sep or not rest:
        raise MalformedId("malformed cursor")
    return rest
