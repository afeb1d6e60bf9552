"""How long a test waits for what it expects: long enough on a loaded machine.

A deadline in a test tells "it happened" from "it hung", never a speed: a
test waits for the event it expects and fails only when the event does not
come within a bound far above its usual time. Every such bound goes through
:func:`patience`, which multiplies it by ``CHORUS_TEST_PATIENCE`` (default 3;
a positive number). On a quiet machine the event comes long before the bound
and the factor costs nothing; on a loaded one (CI beside other work, one core
taken by another process) it keeps the suite green without hiding a hang,
which pytest-timeout (300 s a test) still ends with every thread's stack.

Quiet periods ("nothing arrives within 0.4 s") are not deadlines and are not
scaled: they would only make the suite slower.
"""

from __future__ import annotations

import os


def _factor() -> float:
    raw = os.environ.get("CHORUS_TEST_PATIENCE", "3")
    try:
        factor = float(raw)
    except ValueError:
        factor = 0.0
    if not factor > 0 or factor == float("inf"):
        raise SystemExit(f"CHORUS_TEST_PATIENCE must be a positive number, not {raw!r}")
    return factor


PATIENCE = _factor()
"""The factor every deadline in the tests is multiplied by."""


def patience(seconds: float) -> float:
    """``seconds`` (a deadline's usual bound) times ``CHORUS_TEST_PATIENCE``."""
    return seconds * PATIENCE
