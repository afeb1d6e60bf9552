"""The virtual environment running the tests is exactly uv.lock.

scripts/_venv.sh installs from the lock and never resolves (docs/development.md).
This compares what is installed (``pip freeze``, read through
``importlib.metadata``) with what the lock says for this platform and the test
extras (``uv export``), both ways: a package missing, extra or at another
version fails, by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parents[2]


def _uv() -> Path:
    uv = Path(os.environ.get("CHORUS_UV_VENV", ROOT / ".venv-uv")) / "bin" / "uv"
    assert uv.is_file(), f"{uv} is missing: run ./scripts/test, which installs it"
    return uv


def locked() -> dict[str, str]:
    """``{name: version}`` that uv.lock installs here with the test extras."""
    exported = subprocess.run(
        [
            _uv(),
            "export",
            "--frozen",
            "--extra",
            "test",
            "--no-hashes",
            "--no-emit-project",
            "--format",
            "requirements-txt",
            "--no-header",
            "--quiet",
            "--project",
            ROOT,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    wanted = {}
    for line in exported.splitlines():
        requirement, _, marker = line.partition(";")
        if "==" not in requirement or line.startswith((" ", "#")):
            continue
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        name, _, version = requirement.strip().partition("==")
        wanted[canonicalize_name(name)] = version
    return wanted


def installed() -> dict[str, str]:
    """``{name: version}`` of every distribution in this interpreter's environment."""
    found = {}
    for dist in distributions(path=[p for p in sys.path if p.startswith(sys.prefix)]):
        found[canonicalize_name(dist.metadata["Name"])] = dist.version
    return found


def test_the_environment_is_exactly_the_lock() -> None:
    wanted = locked()
    assert len(wanted) > 50, "uv export gave too little to compare"
    have = installed()
    have.pop("chorus")  # the project itself, editable
    missing = {n: v for n, v in wanted.items() if n not in have}
    extra = {n: v for n, v in have.items() if n not in wanted}
    other = {n: (have[n], v) for n, v in wanted.items() if n in have and have[n] != v}
    assert (missing, extra, other) == ({}, {}, {}), (
        "installed (missing, not in the lock, at another version than locked)"
    )


def test_chorus_is_imported_from_this_checkout() -> None:
    """chorus is installed editable: the environment points at this checkout's src/
    (scripts/_venv.sh installs again when it does not: a moved checkout, or a .venv
    another checkout installed into)."""
    import chorus

    assert Path(chorus.__file__).resolve().is_relative_to((ROOT / "src").resolve())
    pth = list(Path(sys.prefix).glob("lib/python*/site-packages/__editable__.chorus-*.pth"))
    assert [p.read_text().strip() for p in pth] == [str(ROOT / "src")]
