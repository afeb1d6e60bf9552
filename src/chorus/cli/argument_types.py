"""argparse types: each refuses a bad value with a one-line reason (exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def user(value: str) -> str:
    from chorus.auth import check_user_id

    return _checked(check_user_id, value)


def count(value: str) -> int:
    """A whole number from 1 to 2**31 - 1 (:data:`~chorus.settings.MAX_SETTING_INTEGER`).

    Larger is a typo, and past 32 bits it would overflow PostgreSQL's integers.
    """
    from chorus.settings import MAX_SETTING_INTEGER

    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 1 <= number <= MAX_SETTING_INTEGER:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_SETTING_INTEGER}")
    return number


def ttl(value: str) -> int:
    """A token lifetime in whole seconds, from 1 to :data:`chorus.auth.MAX_TTL`.

    A fraction is refused, not rounded: below 1 the token would be expired
    when printed, and a token's ``exp`` holds whole seconds (1.5 would be cut).
    """
    from chorus.auth import MAX_TTL

    most = int(MAX_TTL.total_seconds())
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= most:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of seconds from 1 to {most} (366 days)"
        )
    return number


def host(value: str) -> str:
    """A bind address (:func:`chorus.settings.server.check_host`: not empty, no blanks)."""
    from chorus.settings.server import check_host

    return _checked(check_host, value)


def _checked(check: Callable[[str], str], value: str) -> str:
    """``check(value)``; its ``ValueError`` becomes the argument's refusal."""
    try:
        return check(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def days(value: str) -> float:
    from chorus.settings import MAX_KEEP_DAYS

    return _above_zero(value, MAX_KEEP_DAYS, f"days above 0 and at most {MAX_KEEP_DAYS:g}")


def _above_zero(value: str, most: float, bounds: str) -> float:
    """``value`` as a number above 0 and at most ``most``, else refused: "must be a number of
    ``bounds``"."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number <= most:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be a number of {bounds}")
    return number


def port(value: str) -> int:
    """A TCP port, 0 to 65535; 0 lets the system choose a free one (as ``CHORUS_PORT=0``)."""
    try:
        number = int(value) if value.strip().isdigit() else -1
    except ValueError:
        number = -1
    if not 0 <= number < 65536:
        raise argparse.ArgumentTypeError(
            "must be a TCP port between 0 and 65535 (0: any free port)"
        )
    return number
