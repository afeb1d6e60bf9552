"""The committed event path: outbox → relay → Kafka → consumer groups.

The outbox (written in the commit's transaction, :mod:`chorus.db.outbox`) is
the only source of events. :mod:`~chorus.events.relay` publishes it, in
per-playlist version order, to an in-process bus (embedded profile) or to
Kafka (:mod:`~chorus.events.kafka`, record format in
:mod:`~chorus.events.wire`). Every Kafka consumer group runs in the one
:class:`~chorus.events.consumer.ConsumerRunner`: :mod:`~chorus.events.fanout`
(Kafka → Redis pub/sub) and :mod:`~chorus.events.projector` (Kafka → Redis
snapshots).
"""
