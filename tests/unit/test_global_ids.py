"""Global ids and cursors: the encoding is URL-safe base64 without padding, and reads back."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from chorus.graphql.schema.common import ids

_KEY_PART = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters=":"))


@given(st.text(st.characters(blacklist_categories=("Cs",))))
def test_the_encoding_is_urlsafe_base64_without_padding(text: str) -> None:
    expected = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    assert ids._encode(text) == expected


@given(_KEY_PART.filter(bool), _KEY_PART.filter(bool))
def test_an_entry_id_reads_back(playlist: str, entry: str) -> None:
    gid = ids.entry_global_id(playlist, entry)
    assert not set(gid) & set("=+/")
    # What the decoder refuses this server never makes: control characters, or
    # ids longer than any it makes.
    if (playlist + entry).isprintable() and len(gid) <= ids.MAX_ENCODED_LENGTH:
        assert ids.entry_id(gid, in_playlist=playlist) == entry
