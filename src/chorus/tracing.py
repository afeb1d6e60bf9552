"""OpenTelemetry traces: the tracer every part starts its spans with, and trace context on the wire.

Spans go through the OpenTelemetry API only. Until the composition root
installs an SDK tracer provider (:func:`chorus.bootstrap.traced`, when
``CHORUS_OTLP_ENDPOINT`` is set), :data:`tracer` is the API's proxy and every
span is a non-recording no-op: a call costs about a microsecond and nothing
is kept or sent (docs/observability.md).

The trace context crosses processes as a W3C ``traceparent``
(``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``): stored with each
outbox row by the committing request (``outbox.trace_context``), and sent by
the relay as the ``traceparent`` header of each Kafka record, so the relay's
publish span and every consumer's span *link* to the commit's trace (links,
not parents: one publish or one consumer batch serves many commits).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

tracer = trace.get_tracer("chorus")
"""Chorus's tracer: a no-op until an SDK provider is installed (then it delegates to it)."""

TRACEPARENT = "traceparent"
"""The W3C header (and Kafka record header) a trace context travels in."""

_W3C = TraceContextTextMapPropagator()


def enabled() -> bool:
    """Whether an SDK tracer provider is installed in this process (spans are recorded)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span; ``None`` when there is none (tracing off)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get(TRACEPARENT)


def span_context_of(traceparent: str | bytes | None) -> SpanContext | None:
    """The remote span context a ``traceparent`` names; ``None`` when missing or malformed."""
    if not traceparent:
        return None
    if isinstance(traceparent, bytes):
        traceparent = traceparent.decode("ascii", "replace")
    context = trace.get_current_span(_W3C.extract({TRACEPARENT: traceparent})).get_span_context()
    return context if context.is_valid else None


def links_to(traceparents: Iterable[str | bytes | None]) -> list[Link]:
    """One link per distinct valid ``traceparent`` (malformed and missing ones are skipped)."""
    seen: dict[tuple[int, int], Link] = {}
    for value in traceparents:
        context = span_context_of(value)
        if context is not None:
            seen.setdefault((context.trace_id, context.span_id), Link(context))
    return list(seen.values())


def header_value(headers: Sequence[tuple[str, bytes]] | None) -> bytes | None:
    """The ``traceparent`` of a Kafka record's headers, if it has one."""
    for key, value in headers or ():
        if key == TRACEPARENT:
            return value
    return None
