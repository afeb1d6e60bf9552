"""``chorus_graphql_errors_total``'s ``code`` label: every code Chorus gives, and no other.

The codes are read from their sources (the domain's ``ErrorCode``, every
``RequestError``, the HTTP refusals) and from the code itself: each literal
``extensions`` code, ``error_response`` / ``PersistedQueryError`` code, the
transport's refusals and a class's ``code``. A new code not added to
``ERROR_CODES`` would be counted as ``OTHER``; this test names it instead.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from prometheus_client import REGISTRY

from chorus import app as app_module
from chorus.domain.errors import ErrorCode
from chorus.graphql.roles import MISDIRECTED_CODE
from chorus.metrics import ERROR_CODES, count_error
from chorus.resolvers import request_errors

SRC = Path(__file__).resolve().parents[2] / "src" / "chorus"


def _literal_codes() -> dict[str, str]:
    """``{code: where}`` of every literal code in the source (see the module docstring)."""
    found: dict[str, str] = {}

    def note(node: ast.expr | None, where: str) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.setdefault(node.value, where)

    for path in SRC.rglob("*.py"):
        where = str(path.relative_to(SRC))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code":
                        note(value, where)
            elif isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("error_response", "PersistedQueryError", "_refuse") and node.args:
                    note(node.args[-1], where)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and target.id == "code":
                    note(node.value, where)
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "_refusal"
                    and isinstance(node.value, ast.Tuple)
                ):
                    note(node.value.elts[-1], where)
            elif isinstance(node, ast.FunctionDef) and node.name.endswith("_too_large"):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Tuple):
                        note(inner.value.elts[-1], where)
    return found


def test_every_code_chorus_gives_is_a_label_value() -> None:
    codes = {c.value for c in ErrorCode}
    codes |= {
        cls.code
        for _, cls in inspect.getmembers(request_errors, inspect.isclass)
        if issubclass(cls, request_errors.RequestError) and isinstance(cls.code, str)
    }
    codes |= set(app_module._HTTP_ERROR_CODES.values()) | {MISDIRECTED_CODE}
    literal = _literal_codes()
    # The scan finds the kinds it looks for (it would pass vacuously otherwise).
    assert {"HEADERS_TOO_LARGE", "PAYLOAD_TOO_LARGE", "PERSISTED_QUERY_NOT_ALLOWED"} <= set(literal)

    missing = {code: where for code, where in literal.items() if code not in ERROR_CODES}
    assert missing == {}
    assert sorted(codes - ERROR_CODES) == []


def test_a_code_outside_the_list_is_counted_as_other() -> None:
    def value(code: str) -> float:
        sample = REGISTRY.get_sample_value("chorus_graphql_errors_total", {"code": code})
        return sample or 0.0

    other, limited = value("OTHER"), value("RATE_LIMITED")

    count_error("SOMETHING_A_CLIENT_MADE_UP")
    count_error(None)
    count_error("RATE_LIMITED")

    assert value("OTHER") == other + 2
    assert value("RATE_LIMITED") == limited + 1
    assert value("SOMETHING_A_CLIENT_MADE_UP") == 0.0
