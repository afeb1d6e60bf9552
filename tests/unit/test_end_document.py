"""The one-statement end's JSON document (``writer._document``): orjson's, and
``json.dumps``' for what orjson refuses, with the same meaning either way."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from chorus.db import writer

AT = datetime(2026, 12, 7, 15, 4, 5, 123456, tzinfo=UTC)


def test_times_keep_their_microseconds_and_naive_ones_are_utc() -> None:
    rows = {"records": [{"committed_at": AT}], "added": [{"added_at": AT.replace(tzinfo=None)}]}
    parsed = json.loads(writer._document(rows))
    assert datetime.fromisoformat(parsed["records"][0]["committed_at"]) == AT
    assert datetime.fromisoformat(parsed["added"][0]["added_at"]) == AT


def test_what_orjson_refuses_is_written_by_json_with_the_same_times() -> None:
    big = 2**70  # past 64 bits: orjson refuses it
    rows = {"records": [{"payload": {"n": big}, "committed_at": AT}], "added": []}
    parsed = json.loads(writer._document(rows))
    assert parsed["records"][0]["payload"] == {"n": big}
    assert datetime.fromisoformat(parsed["records"][0]["committed_at"]) == AT
    naive = json.loads(writer._document({"at": AT.replace(tzinfo=None), "n": big}))
    assert datetime.fromisoformat(naive["at"]) == AT
