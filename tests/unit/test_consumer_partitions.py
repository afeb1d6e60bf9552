"""``chorus_consumer_partitions{group}`` follows what a consumer runner owns."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import TopicPartition
from prometheus_client import REGISTRY

from chorus.events.consumer import ConsumerRunner, Record
from chorus.events.kafka import KafkaConfig


class Ignore:
    async def handle(self, records: Sequence[Record]) -> None:
        return None


def gauge(group: str) -> float | None:
    return REGISTRY.get_sample_value("chorus_consumer_partitions", {"group": group})


async def test_the_gauge_counts_assigned_partitions_until_revoked_or_forgotten() -> None:
    runner = ConsumerRunner(
        KafkaConfig("127.0.0.1:1", topic="t"), Ignore(), group_id="g-gauge", client_id="c"
    )
    runner._on_assigned([TopicPartition("t", p) for p in range(4)])
    assert gauge("g-gauge") == 4
    # Nothing handled yet, so the revocation commits nothing and needs no broker.
    await runner._on_revoked(None, [TopicPartition("t", 0), TopicPartition("t", 1)])
    assert (gauge("g-gauge"), runner.assignment) == (2, {TopicPartition("t", p) for p in (2, 3)})
    runner._forget_partitions()
    assert gauge("g-gauge") == 0
