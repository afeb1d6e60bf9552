"""A commit's trace context through the full profile: PostgreSQL, Tansu, Redis.

The committing request's ``traceparent`` is kept with its outbox row; the
relay sends it as the Kafka record's ``traceparent`` header and links its
publish span to it; the fanout consumer's span links to it too. A record
with no header (an untraced commit) or a malformed one links nothing.
"""

from __future__ import annotations

import asyncio
import uuid

import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from chorus.db.engine import Database
from chorus.db.store import PlaylistStore
from chorus.events.fanout import Fanout
from chorus.events.kafka import KafkaConfig, KafkaPublisher
from chorus.events.relay import OutboxRelay
from chorus.events.wire import encode_event
from chorus.resilience.tasks import cancel_and_wait
from chorus.tracing import TRACEPARENT, tracer
from tests.deadlines import patience
from tests.full.helpers import create_playlist, event, eventually, topic_reader


async def _headers(config: KafkaConfig, expected: int) -> list[dict[str, bytes]]:
    """The headers of the topic's first ``expected`` records (every partition, no group)."""
    seen: list[dict[str, bytes]] = []
    async with topic_reader(config) as consumer, asyncio.timeout(patience(20)):
        while len(seen) < expected:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                seen += [dict(record.headers) for record in records]
    return seen


async def test_a_commits_traceparent_rides_its_kafka_record_and_fanout_links_to_it(
    pg_database: Database,
    kafka_config: KafkaConfig,
    redis_client: aioredis.Redis,
    spans: InMemorySpanExporter,
) -> None:
    store = PlaylistStore(pg_database)
    with tracer.start_as_current_span("a request") as request:
        await create_playlist(store)
    await create_playlist(store)  # untraced: its record carries no header
    trace_id = request.get_span_context().trace_id
    (commit,) = [s for s in spans.get_finished_spans() if s.name == "db.write"]
    assert commit.context.trace_id == trace_id  # the commit's transaction, in the request's trace
    traceparent = f"00-{trace_id:032x}-{commit.context.span_id:016x}-03"
    publisher = KafkaPublisher(kafka_config)
    try:
        assert await OutboxRelay(pg_database, publisher).drain_once() == 2
    finally:
        await publisher.aclose()

    headers = await _headers(kafka_config, expected=2)
    assert sorted(h.get(TRACEPARENT, b"") for h in headers) == [b"", traceparent.encode()]
    (publish,) = [s for s in spans.get_finished_spans() if s.name == "outbox publish"]
    assert publish.kind == SpanKind.PRODUCER
    assert [(link.context.trace_id, link.context.span_id) for link in publish.links] == [
        (trace_id, commit.context.span_id)
    ]

    consumed = await _fanned_out(kafka_config, redis_client, spans, 2)
    assert all(s.kind == SpanKind.CONSUMER for s in consumed)
    links = [link.context for s in consumed for link in s.links]
    assert [(c.trace_id, c.span_id) for c in links] == [(trace_id, commit.context.span_id)]


async def test_a_malformed_traceparent_header_links_nothing_and_is_still_published(
    kafka_config: KafkaConfig, redis_client: aioredis.Redis, spans: InMemorySpanExporter
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_config.bootstrap_servers)
    await producer.start()
    try:
        playlist_id = f"p-{uuid.uuid4().hex[:12]}"
        await producer.send_and_wait(
            kafka_config.topic,
            key=playlist_id.encode(),
            value=encode_event(event(playlist_id, 0)),
            headers=[(TRACEPARENT, b"00-not-a-trace-01")],
        )
    finally:
        await producer.stop()
    consumed = await _fanned_out(kafka_config, redis_client, spans, 1)
    assert consumed
    assert [link for s in consumed for link in s.links] == []


async def _fanned_out(
    config: KafkaConfig, redis: aioredis.Redis, spans: InMemorySpanExporter, count: int
) -> list[ReadableSpan]:
    """Run a fanout of a group of its own until it published ``count`` events; its spans."""
    fanout = Fanout(config, redis, group_id=f"fanout-{uuid.uuid4().hex[:8]}", dedupe_ttl_s=600)

    async def published() -> bool:
        return fanout.published >= count

    task = asyncio.create_task(fanout.run())
    try:
        await eventually(published, what=f"fanout to publish {count} events")
    finally:
        await cancel_and_wait(task)
    return [s for s in spans.get_finished_spans() if s.name == "fanout publish"]
