"""Titles and descriptions: what may not be kept is named in the refusal."""

from __future__ import annotations

import pytest

from chorus.domain.errors import InvalidInput
from chorus.domain.validation import clean_description, clean_title


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("a\ud800b", "a lone surrogate (not valid Unicode)"),
        ("a\x00b", "control characters"),
        ("a\x1bb", "control characters"),
    ],
)
def test_a_title_or_description_that_cannot_be_kept_is_refused_by_name(
    text: str, named: str
) -> None:
    with pytest.raises(InvalidInput) as title:
        clean_title(text)
    assert str(title.value) == f"title must not contain {named}"
    with pytest.raises(InvalidInput) as description:
        clean_description(text)
    assert str(description.value) == f"description must not contain {named}"


def test_a_description_keeps_newlines_and_tabs_and_a_title_its_emoji() -> None:
    assert clean_description(" one\n\ttwo ") == "one\n\ttwo"
    assert clean_title(" Mix 🎧 ") == "Mix 🎧"


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("\u200bx", "x"),
        ("x\u200b", "x"),
        ("\ufeffTitle", "Title"),
        ("\u2028x", "x"),
        (" \u200b Mix \u2060", "Mix"),
        ("a\u200bb", "a\u200bb"),  # inside: kept as sent
        ("👩\u200d💻", "👩\u200d💻"),  # a joined emoji
        ("🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",) * 2,  # a flag
    ],
)
def test_a_title_is_trimmed_of_what_shows_nothing_at_its_ends(sent: str, kept: str) -> None:
    """A fresh user: a title of only a zero-width space was refused as empty, but one
    starting or ending with it was kept with it, while a line separator was trimmed."""
    assert clean_title(sent) == kept
    assert clean_description(sent) == kept


@pytest.mark.parametrize(
    ("sent", "description"),
    [("\u200b", None), (" \ufeff ", None), ("\U000e0041", "\U000e0041")],
)
def test_a_title_of_only_invisible_characters_is_empty(sent: str, description: str | None) -> None:
    with pytest.raises(InvalidInput, match="title must not be empty"):
        clean_title(sent)
    # A description has no such rule: only what is trimmed at its ends goes.
    assert clean_description(sent) == description
