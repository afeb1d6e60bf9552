"""Input checks shared by the command handlers (limits of DESIGN §4).

Each check raises :class:`~chorus.domain.errors.InvalidInput` or
:class:`~chorus.domain.errors.LimitExceeded` naming the input field.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from chorus.domain.commands import Placement
from chorus.domain.errors import InvalidInput, LimitExceeded
from chorus.domain.library import SYSTEM_OPERATION_PREFIX
from chorus.domain.limits import DEFAULT_LIMITS, MAX_ID_LENGTH, Limits


def check_id(value: str, field: tuple[str, ...], limits: Limits, what: str = "id") -> None:
    if not value or len(value) > limits.max_id_length or not value.isprintable():
        raise InvalidInput(
            f"{what} must be 1–{limits.max_id_length} printable characters", field=field
        )


def is_user_id(value: str, max_length: int = MAX_ID_LENGTH) -> bool:
    """A user id (a token's ``sub``): 1–``max_length`` printable characters, no white space,
    in Unicode NFKC form.

    NFKC because two ids that differ only in how the same text is encoded (a
    fullwidth ``ａｌｉｃｅ``, a decomposed ``é``) would be two users a member list
    shows alike; identity providers' ids are ASCII, which NFKC leaves as it is.
    """
    return (
        0 < len(value) <= max_length
        and value.isprintable()
        and not any(ch.isspace() for ch in value)
        and (value.isascii() or unicodedata.normalize("NFKC", value) == value)
    )


def check_user_id(value: str, field: tuple[str, ...], limits: Limits) -> None:
    """Raises :class:`InvalidInput` unless ``value`` could be a token's ``sub``."""
    if not is_user_id(value, limits.max_id_length):
        raise InvalidInput(
            f"a user id is 1–{limits.max_id_length} printable characters without spaces"
            " (Unicode NFKC)",
            field=field,
        )


def check_operation_id(operation_id: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raises :class:`InvalidInput` unless 1–64 printable characters."""
    n = limits.max_operation_id_length
    if not operation_id or len(operation_id) > n or not operation_id.isprintable():
        raise InvalidInput(
            f"operationId must be 1–{n} printable characters", field=("operationId",)
        )
    if operation_id.startswith(SYSTEM_OPERATION_PREFIX):
        raise InvalidInput(
            f"operationIds starting with {SYSTEM_OPERATION_PREFIX!r} are reserved",
            field=("operationId",),
        )


def _unstorable(text: str, allowed: str = "") -> str | None:
    """What of ``text`` may not be kept: control characters, or a lone surrogate (which
    no UTF-8 column can store); ``None`` when nothing."""
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Cs":
            return "a lone surrogate (not valid Unicode)"
        if category == "Cc" and ch not in allowed:
            return "control characters"
    return None


def _visible(ch: str) -> bool:
    # White space and format characters (zero-width space, BOM, …) show nothing.
    return not ch.isspace() and unicodedata.category(ch) != "Cf"


_ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff\u180e")
"""Format characters that mean nothing at either end of a text (zero-width space, non-joiner
and joiner, word joiner, BOM, Mongolian vowel separator). Not every format character: the
tag characters ending a flag emoji (🏴 + tags + cancel tag) are format characters too."""


def _trim(text: str) -> str:
    """``text`` without the white space and zero-width characters around it (what
    ``str.strip`` trims, and :data:`_ZERO_WIDTH`), so that a text shows as it is kept."""
    start, end = 0, len(text)
    while start < end and (text[start].isspace() or text[start] in _ZERO_WIDTH):
        start += 1
    while end > start and (text[end - 1].isspace() or text[end - 1] in _ZERO_WIDTH):
        end -= 1
    return text[start:end]


def clean_title(title: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """The title trimmed of surrounding white space and zero-width characters.

    Raises:
        InvalidInput: empty, or holds a control character (NUL, …) or a lone surrogate.
        LimitExceeded: longer than ``limits.max_title_length`` code points.
    """
    title = _trim(title)
    if not any(_visible(ch) for ch in title):
        raise InvalidInput("title must not be empty", field=("title",))
    if (unstorable := _unstorable(title)) is not None:
        raise InvalidInput(f"title must not contain {unstorable}", field=("title",))
    if len(title) > limits.max_title_length:
        raise LimitExceeded(
            f"title is longer than {limits.max_title_length} characters", field=("title",)
        )
    return title


def clean_description(description: str | None, limits: Limits = DEFAULT_LIMITS) -> str | None:
    """The description trimmed as a title is; empty means none. Newlines and tabs are kept.

    Raises:
        InvalidInput: holds another control character, or a lone surrogate.
        LimitExceeded: longer than ``limits.max_description_length`` code points.
    """
    description = None if description is None else _trim(description)
    if not description:
        return None
    if (unstorable := _unstorable(description, allowed="\n\t")) is not None:
        raise InvalidInput(f"description must not contain {unstorable}", field=("description",))
    if len(description) > limits.max_description_length:
        raise LimitExceeded(
            f"description is longer than {limits.max_description_length} characters",
            field=("description",),
        )
    return description


def check_entry_ids(ids: Sequence[str], limits: Limits) -> None:
    if not ids:
        raise InvalidInput("entryIds must not be empty", field=("entryIds",))
    if len(ids) > limits.max_entries_per_edit:
        raise LimitExceeded(
            f"at most {limits.max_entries_per_edit} entries per command", field=("entryIds",)
        )
    for i, entry_id in enumerate(ids):
        check_id(entry_id, ("entryIds", str(i)), limits, "an entry id")
    if len(set(ids)) != len(ids):
        raise InvalidInput("entryIds must not repeat an id", field=("entryIds",))


def check_placement(placement: Placement, limits: Limits) -> None:
    if placement.after is not None and placement.before is not None:
        raise InvalidInput("give after or before, not both", field=("after",))
    if placement.anchor is not None:
        check_id(placement.anchor, (anchor_field(placement),), limits, "an anchor")


def anchor_field(placement: Placement) -> str:
    return "after" if placement.after is not None else "before"
