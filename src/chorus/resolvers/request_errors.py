"""Request-level failures: top-level GraphQL errors with ``extensions.code``.

Domain failures are ``userErrors`` in payloads instead (:mod:`chorus.domain.errors`).
"""

from __future__ import annotations


class RequestError(Exception):
    """A failure of the whole field; its message is safe to show."""

    code = "BAD_REQUEST"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthenticated(RequestError):
    code = "UNAUTHENTICATED"


class BadUserInput(RequestError):
    """A malformed argument: page size, cursor, ID, version."""

    code = "BAD_USER_INPUT"


class PayloadReadRefused(RequestError):
    """A mutation's payload asked to read more than what is left of the viewer's query budget.

    The edit itself ran (its answer, a retry's included, is in the payload's
    other fields); only ``playlist`` is refused. ``retry_after_ms``: when the budget
    will hold the operation's cost, as ``extensions.retryAfterMs`` (graphql-core takes
    an exception's ``extensions`` for its error's), as the query budget's refusal says it.
    """

    code = "RATE_LIMITED"

    def __init__(self, message: str, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.extensions = {} if retry_after_ms is None else {"retryAfterMs": retry_after_ms}


class TooMuchHistory(RequestError):
    """One request would read more of the log than :data:`HISTORY_ENTRIES_PER_REQUEST`."""

    code = "LIMIT_EXCEEDED"


HISTORY_ENTRIES_PER_REQUEST = 10_000
"""Entries one request may read through ``changes`` (added, moved, removed, all fields).

The query cost counts a version at 100 entries (:mod:`chorus.graphql.guards.cost`),
which holds for edits; a batch's or a revert's version can hold up to
``max_batch_entries``, so the read itself is bounded too: a page stops before
the version that would go past this, or past the query cost limit once the
entries beyond 100 per version are charged (``hasMore`` stays true; the next
request goes on from there).
"""


REWIND_ENTRIES_PER_REQUEST = 20_000
"""Entries of changes one request's ``atVersion`` reads may undo, in all.

A rewind undoes every version between the one asked for and the next
checkpoint (at most 500): each version's entries are decoded and undone,
about 4.5 µs each, so this bound is ~90 ms, what the largest query the cost
limit allows takes to execute (10,000 points: 24 pages of 100 entries with
every field). The query cost counts an ``atVersion`` at 200 points more than
its selection, which covers :data:`REWIND_ENTRIES_FREE` entries; each
:data:`REWIND_ENTRIES_PER_POINT` beyond are charged to the request before the
rewind starts (``actualQueryCost``; weighed in SQL, so a refusal reads no
row), within what the query cost limit leaves, and never past this bound.
"""

REWIND_ENTRIES_FREE = 400
"""Entries of changes a rewind may undo within the 200 points the query cost counts it at."""

REWIND_ENTRIES_PER_POINT = 2
"""Entries of changes undone per query cost point beyond :data:`REWIND_ENTRIES_FREE`
(a point is ~9 µs of execution; undoing an entry ~4.5 µs)."""


CATALOG_UNAVAILABLE = "the media catalog is not available; try again"
"""The message of :class:`ServiceUnavailable` when the catalog does not answer."""


class ServiceUnavailable(RequestError):
    """A dependency (the catalog, the database) cannot answer now; retrying later may work.

    The database's own failure is :class:`~chorus.db.engine.DatabaseUnavailable`,
    which :mod:`chorus.graphql.execution.error_masking` reports under this code.
    """

    code = "SERVICE_UNAVAILABLE"


class HistoryCompacted(RequestError):
    """The version asked for is older than the history kept (``chorus compact``).

    ``extensions`` add ``oldestVersion`` (the oldest version still readable)
    and ``currentVersion``: read ``entries`` at the head instead.
    """

    code = "HISTORY_COMPACTED"

    def __init__(self, message: str, *, oldest_version: int, current_version: int) -> None:
        super().__init__(message)
        self.extensions = {"oldestVersion": oldest_version, "currentVersion": current_version}


NO_TOKEN = "send 'Authorization: Bearer <token>'"
"""The reason given when a request needing a viewer carries no token."""


def no_viewer(reason: str | None, *, unavailable: bool = False) -> RequestError:
    """The refusal of a request that needs a viewer and has none.

    Args:
        reason: why the token check found none (``None``: no token was sent).
        unavailable: the identity provider's keys could not be fetched: the
            token may be fine, so ``SERVICE_UNAVAILABLE``, not ``UNAUTHENTICATED``.
    """
    if unavailable:
        return ServiceUnavailable(reason or "the identity provider cannot be reached")
    return Unauthenticated(reason or NO_TOKEN)
