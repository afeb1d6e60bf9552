"""Bounds on the JSON of a request body or a WebSocket frame: its nesting, its numbers.

Python's :func:`json.loads` recurses once per ``[`` or ``{``: a body of a few
thousand brackets raises :class:`RecursionError`, which strawberry lets
through (a plain-text 500 and a traceback per request). Nothing in the
schema nests anywhere near :data:`MAX_JSON_DEPTH`, and no request holds
anywhere near :data:`MAX_JSON_VALUES`: :func:`decode_json` measures both
first (:func:`_measure`) and refuses a deeper or larger document before the
decoder with Chorus's checks (a Python call per float and per object) runs.

Python also refuses to convert an integer of more than
:func:`sys.get_int_max_str_digits` digits (4,300) to ``int`` (converting is
quadratic in the digits): :func:`json.loads` raises a plain
:class:`ValueError`, which strawberry lets through too. :func:`decode_json`
turns it into :class:`JSONNumberTooLong`.

And Python's decoder accepts more than standard JSON (RFC 8259): ``NaN``,
``Infinity``, numbers such as ``1e999`` that become ``inf``, UTF-16 and
UTF-32 bytes, a UTF-8 byte order mark. :func:`decode_json` refuses each as
:class:`JSONNotStandard`, so what a client sends means the same to every
JSON reader.

Answers go out through :func:`encode_json` (orjson: the page of a cold read
spent 4% of its CPU in :func:`json.dumps`).
"""

from __future__ import annotations

import json
import math
import sys

import orjson

MAX_JSON_VALUES = 20_000
"""Most values (each number, string, literal, array and object counts one) in a body or frame.

Decoding holds the GIL wherever it runs: a 1 MiB body of 200,000 one-letter
strings took ~0.3 s of CPU and held ``/healthz`` for seconds. The largest
legitimate request (``applyOperations`` at its limits: 100 operations,
1,000 entries) holds a few thousand."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects in a request body or WebSocket frame.

A GraphQL request is an object holding ``variables`` (an object) whose
inputs nest a few levels; 64 leaves room for any client while staying far
below the decoder's recursion limit (about 1,000)."""


class JSONRefused(json.JSONDecodeError):
    """A document Chorus refuses to decode; ``phrase`` completes "the request body …".

    A :class:`json.JSONDecodeError`, so that every caller already treating a
    body or frame as "not valid JSON" (strawberry's WebSocket loop closes with
    4400) refuses it the same way.
    """

    phrase = ""

    def __init__(self, message: str) -> None:
        ValueError.__init__(self, message)
        self.msg, self.doc, self.pos, self.lineno, self.colno = message, "", 0, 1, 1


class _OverLimit(JSONRefused):
    """A document past one of the bounds: ``limit`` is the bound, the messages name it."""

    message = ""
    """The error's message, ``{limit}`` standing for the bound."""
    refusal = ""
    """The :attr:`phrase`, ``{limit}`` standing for the bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(self.message.format(limit=limit))
        self.limit = limit
        self.phrase = self.refusal.format(limit=limit)


class JSONTooDeep(_OverLimit):
    """A document nests deeper than allowed."""

    message = "JSON nested deeper than {limit} levels"
    refusal = "nests arrays and objects deeper than {limit}"


class JSONTooLarge(_OverLimit):
    """A document holds more values (numbers, strings, arrays, objects …) than allowed."""

    message = "JSON of more than {limit} values"
    refusal = "holds more than {limit} JSON values"


class JSONNumberTooLong(_OverLimit):
    """A document holds an integer of more digits than Python converts."""

    message = "a JSON number has more than {limit} digits"
    refusal = "has a number of more than {limit} digits"


class JSONNotStandard(JSONRefused):
    """A document Python would decode but standard JSON does not allow; ``reason`` says what."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"not standard JSON: {reason}")
        self.reason = reason
        self.phrase = f"is not standard JSON: {reason}"


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # `{"query": "{…}", "query": "mutation {…}"}` runs the mutation in Python
    # and the query in a reader that keeps the first key (a proxy, a WAF).
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JSONNotStandard(f"the key {key[:40]!r} appears twice in one object")
            seen.add(key)
    return found


def _no_constant(name: str) -> object:
    raise JSONNotStandard(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise JSONNotStandard(f"the number {text[:40]} is too large for a float")
    return number


def _utf8_text(document: str | bytes) -> str:
    """``document`` as text: bytes must be UTF-8, without a byte order mark."""
    if isinstance(document, str):
        if document.startswith("\ufeff"):
            raise JSONNotStandard("it starts with a byte order mark")
        return document
    if document.startswith(b"\xef\xbb\xbf"):
        raise JSONNotStandard("it starts with a byte order mark (send UTF-8 without one)")
    if b"\x00" in document:  # never in UTF-8 JSON: escaped in strings, nowhere else
        raise JSONNotStandard("it is not UTF-8 (UTF-16 or UTF-32?)")
    try:
        return document.decode("utf-8")
    except UnicodeDecodeError:
        raise JSONNotStandard("it is not UTF-8") from None


def _measure(text: str, limit: int, values: int) -> None:
    """Refuse ``text`` when it nests deeper than ``limit`` or holds more than ``values`` values.

    The common body is passed at a glance: its brackets (inside strings or
    not) bound its depth and, with its commas, its values, counted at C
    speed. Any other is decoded once by the C decoder alone (no hooks: a
    Python call per float or object is what made a large body slow), which
    stops at about 1,000 levels with :class:`RecursionError`, and walked,
    stopping at the first value past a bound.

    Raises:
        JSONTooDeep, JSONTooLarge, JSONNumberTooLong, json.JSONDecodeError.
    """
    openings = text.count("[") + text.count("{")
    if openings <= limit and openings + text.count(",") < values:
        return
    try:
        decoded = json.loads(text)
    except RecursionError:
        raise JSONTooDeep(limit) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # the only other one: int() refusing a huge integer
        raise JSONNumberTooLong(sys.get_int_max_str_digits()) from None
    # Containers only, each charged its items at once: a list of 200,000
    # strings is refused without a step per string.
    seen = 1
    pending: list[tuple[object, int]] = [(decoded, 0)]
    while pending:
        value, depth = pending.pop()
        if not isinstance(value, dict | list):
            continue
        if depth >= limit:
            raise JSONTooDeep(limit)
        seen += len(value)
        if seen > values:
            raise JSONTooLarge(values)
        inner = value.values() if isinstance(value, dict) else value
        pending.extend((item, depth + 1) for item in inner if isinstance(item, dict | list))


def decode_json(
    document: str | bytes, limit: int = MAX_JSON_DEPTH, values: int = MAX_JSON_VALUES
) -> object:
    """``json.loads(document)`` of standard JSON only, refusing nesting deeper than ``limit``.

    Raises:
        JSONTooDeep: nested deeper than ``limit``.
        JSONTooLarge: more than ``values`` values (:data:`MAX_JSON_VALUES`).
        JSONNumberTooLong: an integer of more than :func:`sys.get_int_max_str_digits` digits.
        JSONNotStandard: ``NaN``, ``Infinity``, a number that overflows a
            float, bytes that are not UTF-8 or start with a byte order mark,
            a key twice in one object.
        json.JSONDecodeError: not JSON.
    """
    text = _utf8_text(document)
    _measure(text, limit, values)
    try:
        return json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique_keys
        )
    except RecursionError:  # not reached below the limit; kept as a backstop
        raise JSONTooDeep(limit) from None
    except json.JSONDecodeError:
        raise
    except ValueError:
        raise JSONNumberTooLong(sys.get_int_max_str_digits()) from None


def encode_json(data: object) -> str:
    """``data`` as compact JSON text (HTTP bodies and WebSocket text frames alike).

    orjson first; what it refuses (an integer past 64 bits, a non-string key)
    goes through :func:`json.dumps`, so nothing that encoded before fails now.
    Text, not bytes: strawberry sends bytes over a WebSocket as a binary
    frame, which graphql-ws clients do not read.
    """
    try:
        return orjson.dumps(data).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(data, separators=(",", ":"))
