"""The bounded decoder of bodies and frames takes standard JSON only (RFC 8259)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chorus.db.engine import json_loads
from chorus.graphql.guards.nesting import JSONNotStandard, JSONTooLarge, decode_json, encode_json


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("NaN", "NaN is not a JSON number"),
        ('{"a": [Infinity]}', "Infinity is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ("1e999", "too large for a float"),
        (b"[-1.0e400]", "too large for a float"),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8"),
        ('{"a": 1}'.encode("utf-32-le"), "not UTF-8"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        ("\ufeff{}", "byte order mark"),
        (b'{"a": "\xff"}', "not UTF-8"),
    ],
)
def test_what_python_takes_beyond_standard_json_is_refused(
    document: str | bytes, reason: str
) -> None:
    with pytest.raises(JSONNotStandard, match=reason):
        decode_json(document)


@pytest.mark.parametrize(
    ("document", "value"),
    [
        (b'{"a": 1.5e308, "b": -0.0, "c": 1e-999}', {"a": 1.5e308, "b": -0.0, "c": 0.0}),
        ('["NaN", "Infinity"]', ["NaN", "Infinity"]),
        ('{"é": "\\u00e9"}'.encode(), {"é": "é"}),
    ],
)
def test_standard_json_decodes_as_before(document: str | bytes, value: object) -> None:
    assert decode_json(document) == value


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(_JSON_VALUES)
def test_an_answer_encodes_to_what_the_standard_decoder_reads_back(value: object) -> None:
    encoded = encode_json(value)
    assert isinstance(encoded, str)
    assert json.loads(encoded) == value


@pytest.mark.parametrize("value", [{"n": 2**70}, {1: "a non-string key"}, [-(2**64)]])
def test_what_orjson_refuses_is_encoded_as_json_dumps_would(value: object) -> None:
    assert encode_json(value) == json.dumps(value, separators=(",", ":"))


def test_a_key_twice_in_one_object_is_refused() -> None:
    with pytest.raises(JSONNotStandard, match="the key 'query' appears twice in one object"):
        decode_json('{"a": {"query": 1, "b": 2, "query": 3}}')


@pytest.mark.parametrize(
    "document", ["[" + "0," * 20_000 + "0]", '{"a": [' + "[]," * 20_000 + "1]}"]
)
def test_more_values_than_the_bound_are_refused(document: str) -> None:
    with pytest.raises(JSONTooLarge):
        decode_json(document)
    with pytest.raises(JSONTooLarge):
        decode_json(document.encode())


def test_commas_and_brackets_inside_strings_are_not_values() -> None:
    assert decode_json(json.dumps(["[,{" * 30_000])) == ["[,{" * 30_000]


_STORED = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(_STORED, st.booleans())
def test_a_stored_json_value_reads_as_the_standard_decoder_reads_it(
    value: object, ascii_only: bool
) -> None:
    # orjson first, json where it refuses (an integer past 64 bits, an escaped lone surrogate).
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert json_loads(text) == json.loads(text)
    if ascii_only:  # what asyncpg may hand over: bytes
        assert json_loads(text.encode()) == json.loads(text)


def test_what_a_stored_value_cannot_be_is_refused() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        json_loads("{not json")
