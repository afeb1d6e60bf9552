"""Fixtures shared by every test directory."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chorus.graphql.schema import build
from tests.switches import compiled_execution, switched

# CI runs every property test on the same examples, so a landing is never
# decided by a random draw; developers' runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Read before clean_environ runs: where the suite finds the real servers.
POSTGRES_ADMIN_URL = os.environ.get(
    "CHORUS_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)

if not compiled_execution():
    # A run with plans off (tests/switches.py): the schemas tests build themselves too,
    # unless a test asks for plans itself. Done before any test module imports it.
    build.build_schema = functools.partial(build.build_schema, compiled_execution=False)  # type: ignore[assignment]


FULL_PROFILE_TESTS = "tests/full/"
"""The tests that start brokers, Redis servers and several processes each."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``tests/full/`` first: with ``pytest -n`` (``./scripts/test`` runs two workers,
    each taking whole files) its files are the longest, and started first they do
    not end the run alone on one worker."""
    items.sort(key=lambda item: not item.nodeid.startswith(FULL_PROFILE_TESTS))


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A migrated template database on the real server, dropped at the end."""
    from chorus.db.migrate import upgrade
    from tests.servers import create_database, drop_database, postgres_url

    name = create_database()
    upgrade(postgres_url(name))
    yield name
    drop_database(name)


@pytest.fixture(autouse=True)
def clean_environ() -> Iterator[None]:
    """Tests never depend on the developer's CHORUS_* settings (httpx does the same),
    but for the run's switches (tests/switches.py)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("CHORUS_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(switched())
    yield
    for key in [k for k in os.environ if k.startswith("CHORUS_")]:
        del os.environ[key]
    os.environ.update(saved)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """An SDK tracer provider for this test only, its finished spans in memory.

    The API lets a process set its provider once; like OpenTelemetry's own
    test utilities, this resets the globals afterwards (and the tracer
    :mod:`chorus.tracing` resolved through them), so other tests run untraced.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.util._once import Once

    from chorus import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        tracing.tracer._real_tracer = None  # type: ignore[attr-defined]
