"""Suite-wide switches: settings a whole test run may turn, which every test honours.

``CHORUS_COMPILED_EXECUTION=false ./scripts/test tests/e2e`` runs those tests
with plans off (graphql-core executes every operation): the value is read
here once, when the suite starts, before :func:`tests.conftest.clean_environ`
takes every other ``CHORUS_*`` variable away. It stays in the environment of
each test (an app's :class:`~chorus.settings.Settings` reads it), it is
passed to every process a test starts (:func:`child_environ`), and a schema a
test builds itself (``build_schema()``) gets it as its default
(``tests/conftest.py``). A test that sets the setting itself (the
differential tests run both ways) keeps its own value.
"""

from __future__ import annotations

import os

SWITCHES = ("CHORUS_COMPILED_EXECUTION",)
"""The ``CHORUS_*`` variables a test run passes on to every test."""

_VALUES = {name: os.environ[name] for name in SWITCHES if name in os.environ}


def switched() -> dict[str, str]:
    """The switches this run was started with (name → value as given)."""
    return dict(_VALUES)


def compiled_execution() -> bool:
    """Whether this run executes kept documents by their plans (the default: yes)."""
    value = _VALUES.get("CHORUS_COMPILED_EXECUTION", "true").strip().lower()
    return value not in ("0", "false", "no", "off", "f", "n")


def child_environ() -> dict[str, str]:
    """The environment of a process a test starts: none of the developer's ``CHORUS_*``
    settings, this run's switches."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    return {**environ, **switched()}
