"""The README and docs/ against the code: every setting documented, every link resolves."""

from __future__ import annotations

import re
from pathlib import Path

from chorus.settings import Settings

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_ROW = re.compile(r"^\| `(CHORUS_[A-Z0-9_]+)` \| ([^|]*) \|", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _settings_rows() -> dict[str, str]:
    """``{variable: default cell}`` of docs/settings.md's tables, each variable once."""
    rows: dict[str, str] = {}
    for name, default in _ROW.findall((ROOT / "docs" / "settings.md").read_text()):
        assert name not in rows, f"{name} has two rows"
        rows[name] = default.strip()
    return rows


def _documented_default(cell: str) -> object:
    """The value a default cell states: ``unset…``/``generated…`` → None, else its first word."""
    if cell.startswith("unset"):
        return None
    word = cell.split()[0].strip("`")
    if word in ("true", "false"):
        return word == "true"
    try:
        return float(word.replace(",", ""))
    except ValueError:
        return word


def test_the_settings_page_names_every_setting_with_its_default() -> None:
    rows = _settings_rows()
    fields = {
        f"CHORUS_{name.upper()}": info.default for name, info in Settings.model_fields.items()
    }
    assert sorted(set(fields) - set(rows)) == [], "settings missing from docs/settings.md"
    assert sorted(set(rows) - set(fields)) == [], "docs/settings.md names unknown settings"
    wrong = {}
    for name, default in fields.items():
        stated = _documented_default(rows[name])
        number = isinstance(default, int | float) and not isinstance(default, bool)
        if stated != (float(default) if number else default):
            wrong[name] = (rows[name], default)
    assert wrong == {}, "docs/settings.md states another default"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_reaches_a_file_and_its_heading() -> None:
    broken = []
    for page in PAGES:
        for target in _LINK.findall(_FENCE.sub("", page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []
