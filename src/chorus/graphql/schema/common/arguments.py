"""Every check of a field's arguments, and only here.

The rule: a field of :mod:`chorus.graphql` hands each argument it receives to
a function of this module *before* it calls its one resolver, and passes on
only what comes back — decoded, valid values: a page size, a keyset position,
an offset, a playlist or entry id, a mutation's placement. Resolvers
(:mod:`chorus.resolvers`) never refuse an argument. Two bounds depend on the
playlist as stored, ``minVersion`` and ``sinceVersion``: the field checks
them here right *after* its resolver read that version.

A refusal keeps the form the API gives it (docs/api.md):

* a query argument: a top-level error with ``BAD_USER_INPUT``
  (:class:`~chorus.resolvers.request_errors.BadUserInput`);
* an ID given to ``node`` or ``playlist`` that this server never made:
  ``null``, as for an object that is missing or not visible;
* a mutation input (and ``playlistEvents``' ``playlistId``): the domain
  error it stands for — ``NOT_FOUND``, ``ANCHOR_NOT_FOUND``,
  ``INVALID_INPUT`` — which becomes a ``userError`` (or ends the stream).

Not here: the rules of a command's contents (title and id lengths, entries
per edit, media per add), which are the domain's
(:mod:`chorus.domain.validation`); and ``playlistEvents``' ``sinceVersion``,
which the stream checks against the version it joined the hub at
(:func:`chorus.subscriptions.stream.playlist_stream`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import strawberry

from chorus.catalog.protocol import MAX_SEARCH_OFFSET, MAX_SEARCH_QUERY_LENGTH
from chorus.db.history_reads import NotKept
from chorus.domain.commands import Placement
from chorus.domain.errors import AnchorNotFound, NotFound
from chorus.domain.follows import FeedKey, FeedLimits, Target, TargetKind
from chorus.domain.limits import Limits
from chorus.domain.model import Playlist
from chorus.domain.ports import SortKey
from chorus.graphql.schema.common import ids
from chorus.resolvers.request_errors import BadUserInput, HistoryCompacted
from chorus.subscriptions.catchup import CatchUpPage

NOT_A_CURSOR = "{} is not a cursor of this connection"

T = TypeVar("T")


# -- pages: first/last and cursors --------------------------------------------


def page_size(limits: Limits, first: int | None, last: int | None = None) -> tuple[int, bool]:
    """``(size, from_end)`` of a Relay page request; the default size when neither is given.

    ``from_end`` is set for ``last``: the page nearest ``before`` (or the end).
    A size above the maximum is an error, never a silent clamp.

    Raises:
        BadUserInput: both ``first`` and ``last``, a negative size, or one
            above ``limits.page_size_max``.
    """
    if first is not None and last is not None:
        raise BadUserInput("give first or last, not both")
    size = first if first is not None else last
    if size is None:
        return limits.page_size_default, False
    if size < 0 or size > limits.page_size_max:
        name = "first" if first is not None else "last"
        raise BadUserInput(f"{name} must be between 0 and {limits.page_size_max}")
    return size, last is not None


@dataclass(frozen=True, slots=True)
class EntriesRequest:
    """A checked request for a page of entries: ``size`` nearest ``after`` (or ``before``)."""

    size: int
    from_end: bool
    after: SortKey | None
    before: SortKey | None


def entries_request(
    limits: Limits, first: int | None, after: str | None, last: int | None, before: str | None
) -> EntriesRequest:
    """The Relay arguments of an ``entries`` field, checked (head or an old version alike).

    Raises:
        BadUserInput: see :func:`page_size` and :func:`entry_position`.
    """
    after_key = entry_position(after, "after")
    before_key = entry_position(before, "before")
    size, from_end = page_size(limits, first, last)
    return EntriesRequest(size, from_end, after_key, before_key)


def entry_position(cursor: str | None, name: str) -> SortKey | None:
    """The keyset ``(position_key, entry_id)`` of an entries cursor (``None`` stays ``None``).

    Args:
        cursor: the ``after`` or ``before`` argument.
        name: which of the two, for the message.

    Raises:
        BadUserInput: not a cursor of ``Playlist.entries``.
    """
    if cursor is None:
        return None
    try:
        return ids.decode_entry_cursor(cursor)
    except ids.MalformedId:
        raise BadUserInput(NOT_A_CURSOR.format(name)) from None


def member_position(after: str | None) -> str | None:
    """The user id of a ``Playlist.members`` cursor (``None`` stays ``None``).

    Raises:
        BadUserInput: not a cursor of that connection.
    """
    return _decoded_after(after, ids.decode_member_cursor)


def _decoded_after(after: str | None, decode: Callable[[str], T]) -> T | None:
    """``decode(after)``, or ``None`` for no cursor; a malformed one is ``BAD_USER_INPUT``."""
    if after is None:
        return None
    try:
        return decode(after)
    except ids.MalformedId:
        raise BadUserInput(NOT_A_CURSOR.format("after")) from None


def following_position(after: str | None) -> tuple[datetime, str, str] | None:
    """The keyset ``(created_at, kind, target id)`` of a ``Viewer.following`` cursor.

    Raises:
        BadUserInput: not a cursor of that connection.
    """
    return _decoded_after(after, ids.decode_follow_cursor)


def feed_position(after: str | None) -> FeedKey | None:
    """The keyset ``(happened_at, playlist id, version)`` of a ``Viewer.feed`` cursor.

    Raises:
        BadUserInput: not a cursor of that connection.
    """
    return _decoded_after(after, ids.decode_feed_cursor)


def feed_page_size(limits: FeedLimits, first: int | None) -> int:
    """The size of a feed page: ``first``, or the default.

    Raises:
        BadUserInput: a negative ``first``, or one above ``CHORUS_FEED_PAGE_SIZE_MAX``.
    """
    if first is None:
        return limits.page_size_default
    if not 0 <= first <= limits.page_size_max:
        raise BadUserInput(f"first must be between 0 and {limits.page_size_max}")
    return first


def follow_target(kind: TargetKind, target_id: str) -> Target:
    """The target of a follow input: a ``Playlist`` global ID, or a user id as is.

    Raises:
        NotFound: ``PLAYLIST`` with something that is not a playlist's global ID.
    """
    if kind is TargetKind.PLAYLIST:
        try:
            return Target(kind, ids.playlist_id(target_id))
        except ids.MalformedId:
            raise NotFound("playlist not found", field=("targetId",)) from None
    return Target(kind, target_id)


def search_offset(after: str | None) -> int:
    """The offset in the search results that follows a ``searchMedia`` cursor (0 without one).

    Raises:
        BadUserInput: not a cursor of that connection, or one past the
            catalog's last offset (:data:`~chorus.catalog.protocol.MAX_SEARCH_OFFSET`).
    """
    if after is None:
        return 0
    try:
        offset = ids.decode_search_cursor(after) + 1
    except ids.MalformedId:
        raise BadUserInput(NOT_A_CURSOR.format("after")) from None
    if offset > MAX_SEARCH_OFFSET:
        raise BadUserInput("after is past the end of any search")
    return offset


def search_query(query: str) -> str:
    """A ``searchMedia`` query, as given.

    Raises:
        BadUserInput: longer than :data:`MAX_SEARCH_QUERY_LENGTH` characters,
            or holding a control character or a lone surrogate (no catalog
            can match those).
    """
    if len(query) > MAX_SEARCH_QUERY_LENGTH:
        raise BadUserInput(f"query must be at most {MAX_SEARCH_QUERY_LENGTH} characters")
    categories = {unicodedata.category(ch) for ch in query}
    if "Cc" in categories:
        raise BadUserInput("query must not contain control characters")
    if "Cs" in categories:
        raise BadUserInput("query must not contain a lone surrogate (text that is not Unicode)")
    return query


# -- versions: checked against the playlist as read ---------------------------


def check_min_version(min_version: int | None, playlist: Playlist | None) -> None:
    """Refuse a visible playlist older than ``minVersion``.

    Raises:
        BadUserInput: ``playlist.version < min_version`` (that version does not exist yet).
    """
    if playlist is not None and min_version is not None and playlist.version < min_version:
        raise BadUserInput(
            f"version {min_version} does not exist yet; the playlist is at {playlist.version}"
        )


def check_since_version(
    since_version: int, batch: CatchUpPage | None, playlist: Playlist
) -> CatchUpPage:
    """``batch``, the versions after ``sinceVersion``, when ``sinceVersion`` is in range.

    Args:
        since_version: the argument.
        batch: what the resolver read; ``None`` when the playlist is gone.
        playlist: the playlist as the request saw it (its version names the
            range when there is no batch).

    Raises:
        BadUserInput: ``since_version`` is negative or above the current version.
    """
    if batch is None or not 0 <= since_version <= batch.current_version:
        current = batch.current_version if batch else playlist.version
        raise BadUserInput(f"sinceVersion must be between 0 and {current}")
    return batch


Found = TypeVar("Found")


def check_at_version(version: int, found: Found | NotKept | None) -> Found | None:
    """``found``, what was read at ``version``, when the version is in range and kept.

    Args:
        version: the ``atVersion`` argument.
        found: what the resolver read (the playlist at ``version``, or a page
            of its entries; ``None``: the playlist is gone).

    Raises:
        BadUserInput: ``version`` is negative or above the current version.
        HistoryCompacted: ``version`` is below the log floor (retention);
            ``extensions`` say the oldest version kept and the current one.
    """
    if not isinstance(found, NotKept):
        return found
    if not 0 <= version <= found.current:
        raise BadUserInput(f"version must be between 0 and {found.current}")
    raise HistoryCompacted(
        f"version {version} is older than the history kept (the oldest is "
        f"{found.oldest}); read entries at the current version {found.current}",
        oldest_version=found.oldest,
        current_version=found.current,
    )


# -- IDs of queries: a malformed one finds nothing ------------------------------


def node_key(value: str) -> tuple[str, list[str]] | None:
    """``(type name, key parts)`` of a global ID for ``node``; ``None`` if malformed."""
    try:
        return ids.from_global_id(value)
    except ids.MalformedId:
        return None


def playlist_key(value: str) -> str | None:
    """The playlist id of a ``Playlist`` global ID for ``playlist``; ``None`` if malformed."""
    try:
        return ids.playlist_id(value)
    except ids.MalformedId:
        return None


# -- mutation inputs and playlistEvents: domain errors ---------------------------


def input_playlist_id(value: str) -> str:
    """The playlist id of an input's ``playlistId``.

    Raises:
        NotFound: not a ``Playlist`` global ID (field ``playlistId``).
    """
    try:
        return ids.playlist_id(value)
    except ids.MalformedId:
        raise NotFound("playlist not found", field=("playlistId",)) from None


def input_entry_ids(values: list[strawberry.ID], playlist_id: str) -> tuple[str, ...]:
    """The entry ids of an input's ``entryIds``, in order.

    Raises:
        NotFound: the first that is not an entry of this playlist (field ``entryIds.<i>``).
    """
    out = []
    for i, global_id in enumerate(values):
        try:
            out.append(ids.entry_id(global_id, playlist_id))
        except ids.MalformedId:
            raise NotFound(
                f"entry {global_id!r} is not in this playlist", field=("entryIds", str(i))
            ) from None
    return tuple(out)


def placement(after: str | None, before: str | None, playlist_id: str) -> Placement:
    """The anchors of an input's ``after`` / ``before``, as entry ids.

    Raises:
        AnchorNotFound: one is not an entry of this playlist (field ``after`` or ``before``).
    """

    def anchor(value: str | None, name: str) -> str | None:
        if value is None:
            return None
        try:
            return ids.entry_id(value, playlist_id)
        except ids.MalformedId:
            raise AnchorNotFound(
                f"{name} is not an entry of this playlist", field=(name,)
            ) from None

    return Placement(after=anchor(after, "after"), before=anchor(before, "before"))
