"""Kafka plumbing of the full profile: the topic, the relay's producer, consumers.

Events go to one topic (default ``chorus.playlist-events.v1``) keyed by
playlist id, so one playlist's versions stay in one partition, in order
(record format: :mod:`chorus.events.wire`). The producer waits for
``acks=all``; the idempotent producer is :attr:`KafkaConfig.idempotent`
(on for Apache Kafka; the Tansu broker used in tests refuses InitProducerId).
Consumers belong to a group, never auto-commit, and start from the earliest
offset when the group is new.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, UnknownError

from chorus.domain.changes import PlaylistEvent
from chorus.events.wire import DEFAULT_TOPIC, encode_event

log = logging.getLogger("chorus.kafka")


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """Where the events are.

    Attributes:
        bootstrap_servers: ``host:port[,host:port]``.
        topic: the events topic.
        partitions: partitions when :func:`ensure_topic` creates the topic.
        idempotent: ``enable.idempotence`` for the producer.
        request_timeout_ms: how long one request may wait for the broker.
        fetch_max_wait_ms: the longest a consumer's fetch waits for records.
            Apache Kafka answers as soon as a record arrives; Tansu answers
            after about half of this wait whatever arrives, so it bounds the
            fanout's latency there (aiokafka's default of 500 ms gave
            ~250 ms per event in ``bench/full_profile.py``).
    """

    bootstrap_servers: str
    topic: str = DEFAULT_TOPIC
    partitions: int = 12
    idempotent: bool = True
    request_timeout_ms: int = 10_000
    fetch_max_wait_ms: int = 50


async def ensure_topic(config: KafkaConfig) -> None:
    """Create the topic with ``config.partitions`` partitions unless it exists.

    Raises:
        aiokafka.errors.KafkaError: the broker cannot be reached.
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=config.bootstrap_servers,
        request_timeout_ms=config.request_timeout_ms,
        client_id="chorus-admin",
    )
    await admin.start()
    try:
        if config.topic in await admin.list_topics():
            return
        topic = NewTopic(config.topic, num_partitions=config.partitions, replication_factor=1)
        try:
            response = await admin.create_topics([topic])
        except TopicAlreadyExistsError:
            return  # another process won the race
        # Some brokers (Tansu) answer "already exists" in the response instead.
        errors = [code for _, code, *_ in getattr(response, "topic_errors", [])]
        if not any(errors):
            log.info("created topic %s with %d partitions", config.topic, config.partitions)
    finally:
        await admin.close()


class KafkaPublisher:
    """The outbox relay's producer: a batch is published once every record is acknowledged.

    Connects on first use and again after a failure (a broker restart may have
    lost the topic, so it is ensured again), so a relay started while Kafka is
    down simply retries.
    """

    def __init__(self, config: KafkaConfig) -> None:
        self._config = config
        self._producer: AIOKafkaProducer | None = None

    async def _connected(self) -> AIOKafkaProducer:
        if self._producer is None:
            await ensure_topic(self._config)
            producer = AIOKafkaProducer(
                bootstrap_servers=self._config.bootstrap_servers,
                acks="all",
                enable_idempotence=self._config.idempotent,
                request_timeout_ms=self._config.request_timeout_ms,
                client_id="chorus-relay",
            )
            try:
                await producer.start()
            except BaseException as exc:
                await producer.stop()
                if self._config.idempotent and isinstance(exc, UnknownError):
                    log.warning(
                        "the broker refused the idempotent producer; brokers without "
                        "InitProducerId (Tansu) need CHORUS_KAFKA_IDEMPOTENT_PRODUCER=false"
                    )
                raise
            self._producer = producer
        return self._producer

    async def publish_batch(self, events: Sequence[PlaylistEvent]) -> None:
        """Produce ``events`` in order and wait until the broker acknowledged all.

        Raises:
            aiokafka.errors.KafkaError: a record was not acknowledged, or no
                broker answers (none of the batch counts as published; the
                relay produces it again later).
        """
        producer = await self._connected()
        try:
            sent = [
                await producer.send(
                    self._config.topic,
                    key=event["playlist_id"].encode(),
                    value=encode_event(event),
                )
                for event in events
            ]
            await asyncio.gather(*sent)
        except BaseException as exc:
            await self.aclose()  # reconnect, and ensure the topic, next time
            if self._config.idempotent and isinstance(exc, UnknownError):
                log.warning(
                    "the broker answered the idempotent producer with an unknown error; "
                    "brokers without InitProducerId (Tansu) need "
                    "CHORUS_KAFKA_IDEMPOTENT_PRODUCER=false"
                )
            raise

    async def aclose(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()


def consumer(config: KafkaConfig, group_id: str, *, client_id: str) -> AIOKafkaConsumer:
    """A consumer of the events topic in ``group_id``: manual commits, earliest offset first."""
    return AIOKafkaConsumer(
        config.topic,
        bootstrap_servers=config.bootstrap_servers,
        group_id=group_id,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=max(config.request_timeout_ms, 40_000),
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
        fetch_max_wait_ms=config.fetch_max_wait_ms,
        max_poll_records=500,
    )


def can_commit(kafka: AIOKafkaConsumer) -> bool:
    """Whether a commit now goes out at once, as a member the coordinator knows.

    Reads aiokafka internals (0.14): after the coordinator forgot this member,
    aiokafka resets it to generation -1 and an empty member id until it joins
    again, and a commit sent that way is accepted by a restarted broker's
    empty group. With no known coordinator, ``commit`` would wait for one,
    then be sent in whatever state the membership is by then.
    """
    coordinator = getattr(kafka, "_coordinator", None)
    if coordinator is None:
        return True
    return (
        getattr(coordinator, "coordinator_id", 0) is not None
        and getattr(coordinator, "generation", 0) >= 0
        and getattr(coordinator, "member_id", "-") != ""
    )
