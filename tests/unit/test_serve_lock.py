"""One ``chorus serve`` per SQLite file: the lock beside it, whatever spelling names the file.

``flock`` locks belong to an open file, so a second lock taken in this very
process conflicts just as another process's would (the e2e tests start real
servers); every spelling of one file's path must meet the same lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pytest

from chorus.cli.process import lock_embedded_database
from chorus.settings import Settings


def _lock(url: str, **settings: str) -> IO[bytes] | None:
    return lock_embedded_database(Settings(database_url=url, **settings))  # type: ignore[arg-type]


def _refusal(capsys: pytest.CaptureFixture[str], url: str) -> str:
    """The one line ``serve`` exits 2 with when it cannot lock ``url``'s file."""
    with pytest.raises(SystemExit) as refused:
        _lock(url)
    assert refused.value.code == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1
    return line


@pytest.mark.parametrize(
    "spelling",
    [
        "sqlite+aiosqlite:///{d}/chorus.db",
        "sqlite+aiosqlite:///{d}/./sub/../chorus.db",
        "sqlite+aiosqlite:///{d}/link.db",
        "sqlite+aiosqlite:///file:{d}/chorus.db?uri=true",
        "sqlite+aiosqlite:///file://{d}/chorus.db?uri=true",
    ],
)
def test_every_spelling_of_one_file_meets_the_same_lock(
    tmp_path: Path, spelling: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "chorus.db").touch()
    (tmp_path / "link.db").symlink_to(tmp_path / "chorus.db")
    held = _lock(f"sqlite+aiosqlite:///{tmp_path}/chorus.db")
    assert held is not None
    line = _refusal(capsys, spelling.format(d=tmp_path))
    assert f"another chorus serve is running on {tmp_path / 'chorus.db'}" in line
    assert "full profile" in line
    assert held is not None
    held.close()
    again = _lock(spelling.format(d=tmp_path))  # released: the next one starts
    assert again is not None
    again.close()


def test_other_files_and_other_profiles_are_not_locked(tmp_path: Path) -> None:
    held = _lock(f"sqlite+aiosqlite:///{tmp_path}/a.db")
    other = _lock(f"sqlite+aiosqlite:///{tmp_path}/b.db")
    assert other is not None
    for nothing in ("postgresql+asyncpg://postgres@127.0.0.1:5432/chorus",):
        assert _lock(nothing) is None
    full = {"kafka_bootstrap_servers": "127.0.0.1:9092", "redis_url": "redis://127.0.0.1:6379/0"}
    assert _lock(f"sqlite+aiosqlite:///{tmp_path}/a.db", **full) is None
    for lock in (held, other):
        assert lock is not None
        lock.close()


@pytest.mark.parametrize(
    ("folder", "reason"),
    [
        ("/proc", "No such file or directory"),  # exists, but no file can be made in it
        ("/proc/chorus-missing", "No such file or directory"),  # missing, cannot be made
        ("{d}/a-file", "not a folder"),
        ("{d}/a-file/below", "not a folder"),
    ],
)
def test_a_folder_that_cannot_hold_the_database_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], folder: str, reason: str
) -> None:
    (tmp_path / "a-file").touch()
    where = folder.format(d=tmp_path)
    line = _refusal(capsys, f"sqlite+aiosqlite:///{where}/x.db")
    assert f"the database file's folder {where} cannot be written ({reason})" in line


def test_a_missing_folder_is_made_but_not_its_parents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = _lock(f"sqlite+aiosqlite:///{tmp_path}/new/x.db")
    assert held is not None
    assert (tmp_path / "new" / "x.db.serve-lock").exists()
    held.close()
    # A mistyped path would start a new, empty database: refused in one line.
    line = _refusal(capsys, f"sqlite+aiosqlite:///{tmp_path}/typo/deeper/x.db")
    assert f"folder {tmp_path}/typo/deeper is missing and so is its parent" in line
    assert not (tmp_path / "typo").exists()


def test_a_read_only_folder_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mode 555; the tests may run as root, who writes anywhere, so ``open`` says it too."""
    import os

    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    if os.geteuid() == 0:
        real_open = Path.open

        def denied(self: Path, *args: object, **kwargs: object) -> object:
            if self.parent == read_only:
                raise PermissionError(13, "Permission denied", str(self))
            return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(Path, "open", denied)
    line = _refusal(capsys, f"sqlite+aiosqlite:///{read_only}/chorus.db")
    assert f"folder {read_only} cannot be written (Permission denied)" in line
