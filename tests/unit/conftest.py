"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chorus.cli import main


@pytest.fixture
def refused_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., str]:
    """``refused_settings(env, *argv)``: what ``chorus argv…`` says on stderr as it
    exits 2, refusing the settings in ``env`` (never with a traceback)."""

    def refused(env: dict[str, str], *argv: str) -> str:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(SystemExit) as exited:
            main(list(argv))
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return err

    return refused
