"""Opaque global IDs (Relay object identification) and cursors.

Both are URL-safe base64 of a small UTF-8 text, so clients treat them as
opaque strings while the server can decode them without a lookup:

* a global ID is ``"<TypeName>:<key>"`` — ``Playlist:<playlist id>``,
  ``PlaylistEntry:<playlist id>:<entry id>``;
* a cursor is ``"<prefix>:<keyset>"``, one prefix per connection:

  - ``Playlist.entries``: ``"k:<position key>:<entry id>"`` — the keyset
    ``(position_key, entry_id)`` of the entry, which stays meaningful after
    the entry moves away or is removed (it pages from where the entry stood);
  - ``Playlist.members``: ``"m:<user id>"``;
  - ``Viewer.playlists``, ``User.playlists``, ``searchPlaylists``:
    ``"o:" + JSON [order field, direction, value, playlist id]`` — the order
    it belongs to and the keyset ``(value, id)`` in it (the value: an ISO
    8601 time, or a title key); the older ``"p:<created_at>|<playlist id>"``
    of ``Viewer.playlists`` still reads as ``CREATED_AT DESC``;
  - ``searchMedia``: ``"s:<position>"``, the 0-based position in the results.

Decoding never raises anything but :class:`MalformedId`; what a malformed
argument becomes for the client is :mod:`chorus.graphql.schema.common.arguments`' business.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import unicodedata
from datetime import datetime

from chorus.domain import positions
from chorus.domain.playlist_search import (
    MAX_TITLE_KEY_LENGTH,
    NEWEST_FIRST,
    Direction,
    OrderField,
    PlaylistKey,
    PlaylistOrder,
)
from chorus.graphql.guards import nesting

MAX_ENCODED_LENGTH = 512

# Type names in global IDs: those of the GraphQL types.
PLAYLIST = "Playlist"
PLAYLIST_ENTRY = "PlaylistEntry"

_ENTRY = "k"
_MEMBER = "m"
_PLAYLIST = "p"
_SEARCH = "s"
_FOLLOW = "f"
_FEED = "d"
_ORDERED = "o"

MAX_ORDERED_CURSOR_LENGTH = 16 * MAX_TITLE_KEY_LENGTH + 512
"""An ordered playlist cursor holds a title key as ASCII JSON (``\\uXXXX``, twice for an
astral character: 12 characters each), in base64 (4/3 of that)."""


class MalformedId(ValueError):
    """Not an ID or cursor this server made."""


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _encode(text: str) -> str:
    # base64.urlsafe_b64encode's bytes, without its two layers of wrappers: a
    # page of 50 entries encodes 100 of these (each entry's id and cursor).
    encoded = binascii.b2a_base64(text.encode(), newline=False)
    return encoded.translate(_URLSAFE).rstrip(b"=").decode("ascii")


def _decode(value: str, max_length: int = MAX_ENCODED_LENGTH) -> str:
    if not value or len(value) > max_length:
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


def playlist_global_id(playlist_id_: str) -> str:
    """The global ID of a playlist."""
    return to_global_id(PLAYLIST, playlist_id_)


KEPT_ENTRY_IDS = 8192
"""Entries whose global id, and cursor, are kept (least recently used go; ~3 MB each).

A page of 50 entries encodes 100 of these, ~2.5% of a cold page's CPU
(py-spy); a read page is mostly read again, and an id's text never changes."""


@functools.lru_cache(maxsize=KEPT_ENTRY_IDS)
def entry_global_id(playlist_id_: str, entry_id_: str) -> str:
    """The global ID of an entry of a playlist."""
    return to_global_id(PLAYLIST_ENTRY, playlist_id_, entry_id_)


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
    if type_name != PLAYLIST or len(key) != 1 or not key[0]:
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
    if type_name != PLAYLIST_ENTRY or len(key) != 2 or not all(key):
        raise MalformedId("not a PlaylistEntry ID")
    if in_playlist is not None and key[0] != in_playlist:
        raise MalformedId("an entry of another playlist")
    return key[1]


@functools.lru_cache(maxsize=KEPT_ENTRY_IDS)
def entry_cursor(position_key: str, entry_id_: str) -> str:
    """The cursor of an entry at ``(position_key, entry_id)``."""
    return _encode(f"{_ENTRY}:{position_key}:{entry_id_}")


@functools.lru_cache(maxsize=KEPT_ENTRY_IDS)
def entry_cursor_and_global_id(
    playlist_id_: str, position_key: str, entry_id_: str
) -> tuple[str, str]:
    """``(entry_cursor(position_key, entry_id), entry_global_id(playlist_id, entry_id))``,
    kept as one: a page written from its rows needs both of each entry (one lookup
    of three fresh strings where two lookups hashed the entry id twice)."""
    return entry_cursor(position_key, entry_id_), entry_global_id(playlist_id_, entry_id_)


def decode_entry_cursor(cursor: str) -> tuple[str, str]:
    """The keyset ``(position_key, entry_id)`` of an entry cursor.

    Raises:
        MalformedId: not an entry cursor.
    """
    prefix, key, entry = [*_decode(cursor).split(":", 2), "", ""][:3]
    if prefix != _ENTRY or not positions.is_valid(key) or not entry or ":" in entry:
        raise MalformedId("malformed cursor")
    return key, entry


def cursor(prefix: str, value: str) -> str:
    """A cursor of another connection: its ``prefix`` and keyset ``value``."""
    return _encode(f"{prefix}:{value}")


def decode_cursor(prefix: str, value: str, max_length: int = MAX_ENCODED_LENGTH) -> str:
    """The keyset value of a :func:`cursor` with ``prefix``.

    Raises:
        MalformedId: not such a cursor.
    """
    found, sep, rest = _decode(value, max_length).partition(":")
    if found != prefix or not sep or not rest:
        raise MalformedId("malformed cursor")
    return rest


def _when(text: str, *, aware: bool = False) -> datetime:
    """A cursor's time, as ``datetime.isoformat`` wrote it; ``aware``: with its offset.

    Raises:
        MalformedId: not such a time.
    """
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise MalformedId("malformed cursor") from None
    if aware and when.tzinfo is None:
        raise MalformedId("malformed cursor")
    return when


def _small_int(text: str) -> int:
    """A cursor's position or version: only what ``str(int)`` writes, up to 9 ASCII digits
    (``int()`` alone would also take ``" 5"``, ``"1_000"`` and other scripts' digits).

    Raises:
        MalformedId: not such a number.
    """
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise MalformedId("malformed cursor")
    return int(text)


def _three_parts(prefix: str, value: str) -> tuple[str, str, str]:
    """A keyset cursor's ``first|second|rest``; the last two not empty.

    Raises:
        MalformedId: not a cursor of ``prefix``, or one part short.
    """
    first, _, rest = decode_cursor(prefix, value).partition("|")
    second, _, third = rest.partition("|")
    if not second or not third:
        raise MalformedId("malformed cursor")
    return first, second, third


def member_cursor(user_id: str) -> str:
    """The cursor of a member of ``Playlist.members``."""
    return cursor(_MEMBER, user_id)


def decode_member_cursor(value: str) -> str:
    """The user id of a member cursor.

    Raises:
        MalformedId: not a member cursor.
    """
    return decode_cursor(_MEMBER, value)


def playlist_cursor(created_at: datetime, playlist_id_: str) -> str:
    """The cursor of a playlist of ``Viewer.playlists``: its keyset ``(created_at, id)``."""
    return cursor(_PLAYLIST, f"{created_at.isoformat()}|{playlist_id_}")


def decode_playlist_cursor(value: str) -> tuple[datetime, str]:
    """The keyset ``(created_at, playlist id)`` of a playlist cursor.

    Raises:
        MalformedId: not a playlist cursor.
    """
    created, _, playlist_id_ = decode_cursor(_PLAYLIST, value).partition("|")
    return _when(created), playlist_id_


def ordered_playlist_cursor(key: PlaylistKey) -> str:
    """The cursor of a playlist in a list ordered by ``key.order``: the order and the keyset."""
    value = key.value.isoformat() if isinstance(key.value, datetime) else key.value
    order = key.order
    fields = [order.field.value, order.direction.value, value, key.playlist_id]
    return cursor(_ORDERED, json.dumps(fields, separators=(",", ":")))


def decode_ordered_playlist_cursor(value: str) -> PlaylistKey:
    """The place an ordered playlist cursor names (an old ``Viewer.playlists`` one too).

    Raises:
        MalformedId: not a cursor of a list of playlists.
    """
    try:
        created_at, playlist_id_ = decode_playlist_cursor(value)
    except MalformedId:
        pass
    else:
        if created_at.tzinfo is None or not playlist_id_:
            raise MalformedId("malformed cursor")
        return PlaylistKey(NEWEST_FIRST, created_at, playlist_id_)
    text = decode_cursor(_ORDERED, value, MAX_ORDERED_CURSOR_LENGTH)
    try:
        # Bounded: json.loads of a few thousand brackets raises RecursionError.
        fields = nesting.decode_json(text, 1)
        if not isinstance(fields, list) or len(fields) != 4:
            raise MalformedId("malformed cursor")
        field, direction, at, playlist_id_ = fields
        order = PlaylistOrder(OrderField(field), Direction(direction))
    except (ValueError, TypeError):
        raise MalformedId("malformed cursor") from None
    if not isinstance(at, str) or not isinstance(playlist_id_, str) or not playlist_id_:
        raise MalformedId("malformed cursor")
    if order.field is OrderField.TITLE:
        # JSON escapes may spell lone surrogates or NUL, which no title key holds
        # and PostgreSQL cannot even compare.
        if len(at) > MAX_TITLE_KEY_LENGTH or any(
            unicodedata.category(ch) in ("Cc", "Cs") for ch in at
        ):
            raise MalformedId("malformed cursor")
        return PlaylistKey(order, at, playlist_id_)
    return PlaylistKey(order, _when(at, aware=True), playlist_id_)


def search_cursor(position: int) -> str:
    """The cursor of the search result at 0-based ``position``."""
    return cursor(_SEARCH, str(position))


def decode_search_cursor(value: str) -> int:
    """The 0-based position of a search cursor.

    Only what :func:`search_cursor` hands out: up to 9 ASCII digits.

    Raises:
        MalformedId: not a search cursor.
    """
    return _small_int(decode_cursor(_SEARCH, value))


def follow_cursor(created_at: datetime, kind: str, target_id: str) -> str:
    """The cursor of ``Viewer.following``: its keyset ``(created_at, kind, target id)``."""
    return cursor(_FOLLOW, f"{created_at.isoformat()}|{kind}|{target_id}")


def decode_follow_cursor(value: str) -> tuple[datetime, str, str]:
    """The keyset of a follow cursor.

    Raises:
        MalformedId: not a follow cursor.
    """
    created, kind, target_id = _three_parts(_FOLLOW, value)
    return _when(created), kind, target_id


def feed_cursor(happened_at: datetime, playlist_id_: str, version: int) -> str:
    """The cursor of ``Viewer.feed``: its keyset ``(happened_at, playlist id, version)``."""
    return cursor(_FEED, f"{happened_at.isoformat()}|{version}|{playlist_id_}")


def decode_feed_cursor(value: str) -> tuple[datetime, str, int]:
    """The keyset of a feed cursor.

    Raises:
        MalformedId: not a feed cursor.
    """
    happened, version, playlist_id_ = _three_parts(_FEED, value)
    return _when(happened, aware=True), playlist_id_, _small_int(version)
