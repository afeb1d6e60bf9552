"""Live playlists: the outbox relay, the event bus, the per-process hub and the stream.

The outbox is the only source of events in every profile. The relay claims
unpublished outbox rows and publishes them to a :class:`~chorus.subscriptions.bus.Bus`
(in-process here; Kafka → fanout → Redis in the full profile); each API
process keeps one bus subscription per playlist in its
:class:`~chorus.subscriptions.hub.Hub`, which feeds every local
:func:`~chorus.subscriptions.stream.playlist_stream`.
"""
