"""Domain errors, each carrying the ``ErrorCode`` the API reports.

Hierarchy::

    DomainError                      base; never raised itself
    ├── NotFound                     NOT_FOUND: missing, deleted or invisible to the actor
    ├── Forbidden                    FORBIDDEN: visible, but the actor's role may not do this
    ├── VersionConflict              VERSION_CONFLICT: strict command, base version is stale
    ├── AnchorNotFound               ANCHOR_NOT_FOUND: after/before names no entry of the playlist
    ├── InvalidInput                 INVALID_INPUT: malformed or contradictory arguments
    │   └── BaseVersionOutOfRange    a base version below 0 or above the current version
    ├── LimitExceeded                LIMIT_EXCEEDED: a size limit of DESIGN §4
    ├── OperationIdReused            OPERATION_ID_REUSED: same operation id, different request
    ├── MediaNotFound                MEDIA_NOT_FOUND: the catalog does not know a media id
    └── RateLimited                  RATE_LIMITED: the actor sent too much

Every error has a human ``message`` and an optional ``field`` path (the input
field it concerns, e.g. ``("entryIds", "3")``) so the API maps it to a
``UserError`` in one place.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Codes of expected failures; the GraphQL ``ErrorCode`` enum mirrors these."""

    NOT_FOUND = "NOT_FOUND"
    FORBIDDEN = "FORBIDDEN"
    VERSION_CONFLICT = "VERSION_CONFLICT"
    ANCHOR_NOT_FOUND = "ANCHOR_NOT_FOUND"
    INVALID_INPUT = "INVALID_INPUT"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    OPERATION_ID_REUSED = "OPERATION_ID_REUSED"
    MEDIA_NOT_FOUND = "MEDIA_NOT_FOUND"
    RATE_LIMITED = "RATE_LIMITED"


class DomainError(Exception):
    """An expected failure of a command; nothing was committed."""

    code: ErrorCode
    current_version: int | None = None
    """The playlist's version now, where the error is about the base version."""

    def __init__(self, message: str, *, field: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, field={self.field!r})"


class NotFound(DomainError):
    code = ErrorCode.NOT_FOUND


class Forbidden(DomainError):
    code = ErrorCode.FORBIDDEN


class VersionConflict(DomainError):
    """A strict command's base version differs from the playlist's version."""

    code = ErrorCode.VERSION_CONFLICT

    def __init__(self, base_version: int, current_version: int) -> None:
        super().__init__(
            f"baseVersion {base_version} is not the current version {current_version}",
            field=("baseVersion",),
        )
        self.current_version = current_version


class AnchorNotFound(DomainError):
    code = ErrorCode.ANCHOR_NOT_FOUND


class InvalidInput(DomainError):
    code = ErrorCode.INVALID_INPUT


class BaseVersionOutOfRange(InvalidInput):
    """A base version no client could have read (below 0, above the playlist's version):
    ``current_version`` says where the playlist is, as a version conflict does."""

    def __init__(self, base_version: int, current_version: int) -> None:
        super().__init__(
            f"baseVersion {base_version} is not between 0 and the current version "
            f"{current_version}",
            field=("baseVersion",),
        )
        self.current_version = current_version


class LimitExceeded(DomainError):
    code = ErrorCode.LIMIT_EXCEEDED


class OperationIdReused(DomainError):
    code = ErrorCode.OPERATION_ID_REUSED


class MediaNotFound(DomainError):
    code = ErrorCode.MEDIA_NOT_FOUND


class RateLimited(DomainError):
    """Too much at once; ``retry_after_ms``, when known, says when a retry may get in."""

    code = ErrorCode.RATE_LIMITED

    def __init__(self, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms
