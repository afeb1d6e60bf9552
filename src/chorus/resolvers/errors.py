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


CATALOG_UNAVAILABLE = "the media catalog is not available; try again"
"""The message of :class:`ServiceUnavailable` when the catalog does not answer."""


class ServiceUnavailable(RequestError):
    """A dependency (the catalog, the database) cannot answer now; retrying later may work.

    The database's own failure is :class:`~chorus.db.engine.DatabaseUnavailable`,
    which :mod:`chorus.graphql.errors` reports under this code.
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
