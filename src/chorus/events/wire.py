"""Names and bytes of the event path, shared by the full profile's processes.

Every process (API, relay, fanout, cache projector) agrees on these: the
Kafka topic and consumer groups, the Kafka record of an event, and the Redis
pub/sub channel and dedupe mark of a playlist (the snapshot keys are
:mod:`chorus.caches.keys`). Changing one is a wire-format change; bump the
version in the name instead of editing in place (``v2`` of
:data:`~chorus.caches.keys.KEY_PREFIX` for Redis names).

Kafka record: key ``playlist_id`` (UTF-8), value the
:class:`~chorus.domain.changes.PlaylistEvent` as compact JSON (UTF-8), and,
when the commit was traced, a ``traceparent`` header (W3C, ASCII;
:mod:`chorus.tracing`). The same JSON is the payload of the Redis ``PUBLISH``
(``SPUBLISH`` on a cluster; it carries no trace context).
"""

from __future__ import annotations

import json
from typing import cast

from chorus.caches.keys import KEY_PREFIX, playlist_key
from chorus.domain.changes import WIRE_VERSION, PlaylistEvent

DEFAULT_TOPIC = "chorus.playlist-events.v1"
"""The events topic, keyed by playlist id (``CHORUS_KAFKA_TOPIC``)."""
FANOUT_GROUP = "chorus-fanout"
"""The fanout's consumer group (``CHORUS_KAFKA_FANOUT_GROUP``)."""
PROJECTOR_GROUP = "chorus-cache-projector"
"""The cache projector's consumer group (``CHORUS_KAFKA_PROJECTOR_GROUP``)."""
FEED_GROUP = "chorus-feed"
"""The feed consumer's group (``CHORUS_KAFKA_FEED_GROUP``)."""


def encode_event(event: PlaylistEvent) -> bytes:
    """The event as compact UTF-8 JSON."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()


def decode_event(data: bytes | str) -> PlaylistEvent:
    """An event from its JSON.

    Raises:
        ValueError: not JSON, not an object, or a wire version other than
            :data:`~chorus.domain.changes.WIRE_VERSION`, or without a
            string ``playlist_id`` and an integer ``version``.
    """
    value = json.loads(data)
    if (
        not isinstance(value, dict)
        or value.get("v") != WIRE_VERSION
        or not isinstance(value.get("playlist_id"), str)
        or not isinstance(value.get("version"), int)
    ):
        raise ValueError("not a version-1 playlist event")
    return cast(PlaylistEvent, value)


def events_channel(playlist_id: str) -> str:
    """The Redis pub/sub channel carrying a playlist's events."""
    return playlist_key(playlist_id, "events")


def follows_channel(user_id: str) -> str:
    """The Redis pub/sub channel on which a user's follows changing is announced (no payload)."""
    return f"{KEY_PREFIX}:user:{{{user_id}}}:follows"


def channel_playlist(channel: str | bytes) -> str:
    """The playlist id of an :func:`events_channel` name."""
    name = channel.decode() if isinstance(channel, bytes) else channel
    return name.removeprefix(f"{KEY_PREFIX}:playlist:{{").removesuffix("}:events")


def fanout_version_key(playlist_id: str) -> str:
    """The last version fanout published for a playlist (its dedupe mark)."""
    return playlist_key(playlist_id, "fanout-version")
