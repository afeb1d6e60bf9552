"""A mutation's expected failure: ``UserError`` and its ``ErrorCode``."""

from __future__ import annotations

from typing import Any

import strawberry

from chorus.domain.errors import DomainError, RateLimited
from chorus.domain.errors import ErrorCode as ErrorCodeEnum
from chorus.resolvers.admission import MutationOutcome

ErrorCode = strawberry.enum(ErrorCodeEnum, name="ErrorCode", description="Why a mutation failed.")


@strawberry.type(description="An expected failure; nothing was committed.")
class UserError:
    code: ErrorCode  # type: ignore[valid-type]
    message: str
    field: list[str] | None = strawberry.field(description="Path of the input field at fault.")
    current_version: int | None = strawberry.field(
        default=None,
        description="With VERSION_CONFLICT, and with INVALID_INPUT for a baseVersion out of "
        "range (below 0, above the current version): the playlist's version now.",
    )
    retry_after_ms: int | None = strawberry.field(
        default=None,
        description="With RATE_LIMITED, when known: milliseconds after which a retry (with "
        "the same operationId) may get in.",
    )

    @classmethod
    def from_error(cls, error: DomainError) -> UserError:
        retry = error.retry_after_ms if isinstance(error, RateLimited) else None
        # () is the input itself (["input"]); None: no field is at fault.
        field = ["input", *error.field] if error.field is not None else None
        return cls(
            code=error.code,
            message=error.message,
            field=field,
            current_version=error.current_version,
            retry_after_ms=retry,
        )


def user_errors(outcome: MutationOutcome[Any]) -> list[UserError]:
    """The ``userErrors`` of any mutation's outcome: its refusal, or none."""
    return [UserError.from_error(e) for e in outcome.errors]


__all__ = ["ErrorCode", "UserError", "user_errors"]
