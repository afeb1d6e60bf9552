"""Bounds on the JSON of a request body or a WebSocket frame: its nesting, its numbers.

Python's :func:`json.loads` recurses once per ``[`` or ``{``: a body of a few
thousand brackets raises :class:`RecursionError`, which strawberry lets
through (a plain-text 500 and a traceback per request). Nothing in the
schema nests anywhere near :data:`MAX_JSON_DEPTH`, so the view measures the
nesting first (strings skipped, one regular-expression pass, then a walk over
the brackets alone) and refuses a deeper document before the decoder sees it.

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
import re
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

# A whole JSON string, or a run of characters that are neither brackets,
# commas nor quotes: removing both leaves the brackets and commas outside
# strings, in order.
_NOT_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^\[\]{}",]+', re.DOTALL)
_NOT_BRACKETS_BYTES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[^\[\]{}",]+', re.DOTALL)


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


class JSONTooDeep(JSONRefused):
    """A document nests deeper than allowed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit
        self.phrase = f"nests arrays and objects deeper than {limit}"


class JSONTooLarge(JSONRefused):
    """A document holds more values (numbers, strings, arrays, objects …) than allowed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON of more than {limit} values")
        self.limit = limit
        self.phrase = f"holds more than {limit} JSON values"


class JSONNumberTooLong(JSONRefused):
    """A document holds an integer of more digits than Python converts."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a JSON number has more than {limit} digits")
        self.limit = limit
        self.phrase = f"has a number of more than {limit} digits"


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


def nests_deeper_than(document: str | bytes, limit: int, values: int = MAX_JSON_VALUES) -> bool:
    """Whether ``document`` has arrays or objects nested more than ``limit`` deep.

    Brackets inside strings do not count. An unbalanced or otherwise invalid
    document is measured as far as its brackets go; the decoder refuses it.

    Raises:
        JSONTooLarge: more than ``values`` values (counted by the commas and
            opening brackets outside strings, in the same pass).
    """
    marks = (
        _NOT_BRACKETS_BYTES.sub(b"", document)
        if isinstance(document, bytes)
        else _NOT_BRACKETS.sub("", document)
    )
    if len(marks) > values and len(marks) - _closing_count(marks) >= values:
        # Too deep is named first when the first values already say so.
        if _deeper_than(marks[:values], limit):
            return True
        raise JSONTooLarge(values)
    return len(marks) > limit and _deeper_than(marks, limit)


def _deeper_than(marks: str | bytes, limit: int) -> bool:
    opening, closing = (b"[{", b"]}") if isinstance(marks, bytes) else ("[{", "]}")
    depth = 0
    for mark in marks:  # a lone quote (an unterminated string) is neither
        if mark in opening:
            depth += 1
            if depth > limit:
                return True
        elif mark in closing:
            depth -= 1
    return False


def _closing_count(marks: str | bytes) -> int:
    # Each value is an opening bracket or follows a comma (or starts the
    # document): the closing brackets are what is not a value.
    if isinstance(marks, bytes):
        return marks.count(b"]") + marks.count(b"}")
    return marks.count("]") + marks.count("}")


def decode_json(document: str | bytes, limit: int = MAX_JSON_DEPTH) -> object:
    """``json.loads(document)`` of standard JSON only, refusing nesting deeper than ``limit``.

    Raises:
        JSONTooDeep: nested deeper than ``limit``.
        JSONTooLarge: more than :data:`MAX_JSON_VALUES` values.
        JSONNumberTooLong: an integer of more than :func:`sys.get_int_max_str_digits` digits.
        JSONNotStandard: ``NaN``, ``Infinity``, a number that overflows a
            float, bytes that are not UTF-8 or start with a byte order mark,
            a key twice in one object.
        json.JSONDecodeError: not JSON.
    """
    if nests_deeper_than(document, limit):
        raise JSONTooDeep(limit)
    text = _utf8_text(document)
    try:
        return json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique_keys
        )
    except RecursionError:  # not reached below the limit; kept as a backstop
        raise JSONTooDeep(limit) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # the only other one: int() refusing a huge integer
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
