"""The Redis key space: each playlist's names share one cluster slot (hash tags)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from chorus.caches.keys import (
    KEY_PREFIX,
    SLOTS,
    head_key,
    playlist_slot,
    slot_generation_key,
    slot_tag,
    snapshot_key,
)
from chorus.events.wire import channel_playlist, events_channel, fanout_version_key, follows_channel
from chorus.subscriptions.cluster_bus import node_url
from chorus.subscriptions.redis_presence import presence_keys

ids = st.uuids().map(str) | st.text(alphabet="abcdef0123456789-", min_size=1, max_size=40)


def _slot(name: str) -> int:
    return key_slot(name.encode())


@given(ids)
def test_every_name_of_a_playlist_is_in_its_slot(playlist_id: str) -> None:
    names = [
        head_key(playlist_id),
        snapshot_key(playlist_id),
        events_channel(playlist_id),
        fanout_version_key(playlist_id),
        *presence_keys(playlist_id),
    ]
    assert {_slot(name) for name in names} == {playlist_slot(playlist_id)}
    assert slot_generation_key(playlist_slot(playlist_id)).startswith(f"{KEY_PREFIX}:generation:{{")
    assert _slot(slot_generation_key(playlist_slot(playlist_id))) == playlist_slot(playlist_id)


def test_names_carry_the_id_as_a_hash_tag_under_v2() -> None:
    assert head_key("p1") == "chorus:v2:playlist:{p1}:head"
    assert events_channel("p1") == "chorus:v2:playlist:{p1}:events"
    assert channel_playlist(events_channel("p1").encode()) == "p1"
    assert follows_channel("u1") == "chorus:v2:user:{u1}:follows"
    assert _slot(follows_channel("u1")) == key_slot(b"u1")


def test_playlists_spread_over_the_slots_of_three_primaries() -> None:
    primaries = [0, 0, 0]  # redis-cli --cluster create's split: 0-5460, 5461-10922, 10923-16383
    for _ in range(300):
        slot = playlist_slot(str(uuid.uuid4()))
        primaries[0 if slot <= 5460 else 1 if slot <= 10922 else 2] += 1
    assert all(primaries), primaries


def test_every_slot_has_a_generation_key_of_its_own() -> None:
    keys = [slot_generation_key(slot) for slot in range(SLOTS)]
    assert [_slot(k) for k in keys] == list(range(SLOTS))
    assert len(set(keys)) == SLOTS
    with pytest.raises(ValueError, match="a slot is in"):
        slot_tag(SLOTS)


def test_a_node_url_keeps_the_scheme_and_credentials() -> None:
    assert node_url("redis://:pw@a:7101/0", "b", 7102) == "redis://:pw@b:7102"
    assert node_url("rediss://b:7101", "10.0.0.2", 7103) == "rediss://10.0.0.2:7103"


def test_a_cluster_is_said_and_reached_over_tcp(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from chorus.settings import Settings

    monkeypatch.setenv("CHORUS_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    monkeypatch.setenv("CHORUS_REDIS_URL", "redis://127.0.0.1:7101")
    assert Settings(_env_file=None).redis_cluster is False  # type: ignore[call-arg]
    monkeypatch.setenv("CHORUS_REDIS_CLUSTER", "true")
    assert Settings(_env_file=None).redis_cluster is True  # type: ignore[call-arg]
    monkeypatch.setenv("CHORUS_REDIS_URL", "unix:///run/redis.sock")
    with pytest.raises(ValidationError, match="a node of the cluster"):
        Settings(_env_file=None)  # type: ignore[call-arg]
