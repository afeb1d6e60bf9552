"""Kafka plumbing of the full profile: the topic, the relay's producer, consumers.

Events go to one topic (default ``chorus.playlist-events.v1``) keyed by
playlist id, so one playlist's versions stay in one partition, in order
(record format: :mod:`chorus.events.wire`). The producer waits for
``acks=all``; the idempotent producer is :attr:`KafkaConfig.idempotent`
(on for Apache Kafka; the Tansu broker used in tests refuses InitProducerId).
Consumers belong to a group, never auto-commit, start from the earliest
offset when the group is new, and leave their group when stopped (see
:class:`GroupConsumer`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownError,
    UnknownTopicOrPartitionError,
)
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest
from aiokafka.protocol.metadata import MetadataRequest

from chorus.domain.changes import PlaylistEvent
from chorus.events.wire import DEFAULT_TOPIC, encode_event
from chorus.tracing import TRACEPARENT

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

    async def publish_batch(
        self, events: Sequence[PlaylistEvent], *, traceparents: Sequence[str | None] = ()
    ) -> None:
        """Produce ``events`` in order and wait until the broker acknowledged all.

        Each record carries its event's ``traceparent`` (``traceparents[i]``,
        when given and not ``None``) as a record header of that name, so the
        consumers' spans link to the commit's trace (:mod:`chorus.tracing`).

        The topic must exist before and after: a broker that restarted empty
        (Tansu keeps its log in memory) acknowledges records produced to the
        topic it lost and drops them when the topic is created again, so a
        producer that rode through a short outage on its cached metadata
        would lose them. Such a batch fails and is produced again once the
        topic exists (consumers dedupe a copy that got through).

        Raises:
            aiokafka.errors.KafkaError: a record was not acknowledged, the
                topic is missing, or no broker answers (none of the batch
                counts as published; the relay produces it again later).
        """
        producer = await self._connected()
        try:
            await self._check_topic(producer)
            contexts = list(traceparents) or [None] * len(events)
            sent = [
                await producer.send(
                    self._config.topic,
                    key=event["playlist_id"].encode(),
                    value=encode_event(event),
                    headers=[(TRACEPARENT, context.encode())] if context else None,
                )
                for event, context in zip(events, contexts, strict=True)
            ]
            await asyncio.gather(*sent)
            await self._check_topic(producer)
        except BaseException as exc:
            await self.aclose()  # reconnect, and ensure the topic, next time
            if self._config.idempotent and isinstance(exc, UnknownError):
                log.warning(
                    "the broker answered the idempotent producer with an unknown error; "
                    "brokers without InitProducerId (Tansu) need "
                    "CHORUS_KAFKA_IDEMPOTENT_PRODUCER=false"
                )
            raise

    async def _check_topic(self, producer: AIOKafkaProducer) -> None:
        """Raise unless the broker holds the topic now (asked without auto-creating it)."""
        client = producer.client
        node = client.get_random_node()
        if node is None:
            raise KafkaConnectionError("no broker is known")
        request = MetadataRequest([self._config.topic], allow_auto_topic_creation=False)
        response = await client.send(node, request)
        if not any(t[0] == 0 and t[1] == self._config.topic for t in response.topics):
            raise UnknownTopicOrPartitionError(f"the broker has no topic {self._config.topic}")

    async def aclose(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()


class GroupConsumer(AIOKafkaConsumer):  # type: ignore[misc]  # aiokafka is untyped
    """An :class:`AIOKafkaConsumer` whose :meth:`stop` leaves the group on every broker.

    aiokafka (0.14, ``GroupCoordinator._maybe_leave_group``) sends LeaveGroup
    only ``if self.generation > 0``: Apache Kafka numbers a group's first
    generation 1, but Tansu numbers it 0. So on Tansu a consumer stopped while
    in a group's first generation stays a member until its session times out
    (``session_timeout_ms``), usually as the group's leader; a consumer that
    joins meanwhile becomes a follower whose SyncGroup waits for an
    assignment the dead leader never sends, and its ``start()`` hangs until
    the broker evicts the dead member. A broker restart makes every group
    new again, and is when consumers get stopped and made afresh.
    """

    async def stop(self) -> None:
        coordinator = getattr(self, "_coordinator", None)
        if isinstance(coordinator, GroupCoordinator):
            # Replaces the check of generation > 0 for this instance (private API).
            coordinator._maybe_leave_group = lambda: _leave_group(coordinator)
        await super().stop()


async def _leave_group(coordinator: GroupCoordinator) -> None:
    """``GroupCoordinator._maybe_leave_group`` for any member id the broker gave.

    Also a member still joining (generation -1 with a member id) leaves, so a
    consumer cancelled during its JoinGroup does not linger either.
    """
    member_id = coordinator.member_id
    if member_id != JoinGroupRequest.UNKNOWN_MEMBER_ID and coordinator._group_instance_id is None:
        try:
            await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, member_id))
        except KafkaError as exc:  # best effort, as aiokafka's: the session times out anyway
            log.info("LeaveGroup of %s failed (%s)", coordinator.group_id, exc)
    coordinator.reset_generation()


def consumer(config: KafkaConfig, group_id: str, *, client_id: str) -> AIOKafkaConsumer:
    """A consumer of the events topic in ``group_id``: manual commits, earliest offset first."""
    return GroupConsumer(
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
        # A topic re-created by another client (a broker that lost its state)
        # may have more partitions; the group leader rebalances only when its
        # metadata shows them. The forced refresh after an assignment can run
        # before the re-creation; this bounds the wait to 10 s, not 5 minutes.
        metadata_max_age_ms=METADATA_MAX_AGE_MS,
    )


METADATA_MAX_AGE_MS = 10_000
"""How old a consumer's topic metadata may get (ms): the longest a new partition goes unread."""


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


async def position(kafka: AIOKafkaConsumer, tp: TopicPartition) -> int:
    """The partition's fetch position, or 0 when it has none now (never waits for one)."""
    try:
        async with asyncio.timeout(0.1):
            return int(await kafka.position(tp))
    except (TimeoutError, KafkaError):
        return 0
