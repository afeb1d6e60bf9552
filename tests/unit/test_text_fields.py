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
