"""Every internal of a library that Chorus reaches into, named in one place.

Chorus subclasses or reads parts of strawberry-graphql, graphql-core and
aiokafka that are not their public API (pyproject.toml bounds those three
below their next minor version). An upgrade that moves, renames or changes
the shape of one fails here, by name, instead of somewhere deep in the suite
or in production. When this fails after ``./scripts/upgrade-deps``, fix the
module named in the row, then the row.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

# (module, attribute path, where Chorus uses it)
INTERNALS: list[tuple[str, str, str]] = [
    # strawberry-graphql
    (
        "strawberry.schema.schema",
        "StrawberryGraphQLCoreExecutionContext",
        "graphql/execution/executor.py: ChorusExecutionContext subclasses it",
    ),
    ("strawberry.schema.schema", "validate_document", "graphql/guards/documents.py"),
    (
        "strawberry.schema.schema_converter",
        "GraphQLCoreConverter.DEFINITION_BACKREF",
        "graphql/execution/executor.py: a field's strawberry definition",
    ),
    (
        "strawberry.subscriptions.protocols.graphql_transport_ws.handlers",
        "BaseGraphQLTransportWSHandler._send_result_stream",
        "graphql/websocket/handler.py: TransportWSHandler overrides it",
    ),
    (
        "strawberry.subscriptions.protocols.graphql_transport_ws.handlers",
        "Operation",
        "graphql/websocket/handler.py",
    ),
    (
        "strawberry.http.websocket_origin",
        "normalize_allowed_origins",
        "graphql/websocket/handler.py",
    ),
    ("strawberry.types.nodes", "SelectedField", "graphql/ (selection walks)"),
    ("strawberry.types.execution", "PreExecutionError", "graphql/websocket/handler.py"),
    ("strawberry.types.unset", "UnsetType", "graphql/"),
    ("strawberry.dataloader", "DefaultCache", "resolvers/loaders.py: PageLoader"),
    (
        "sqlalchemy.dialects.postgresql.asyncpg",
        "AsyncAdapt_asyncpg_connection._start_transaction",
        "db/direct.py: fetch_in_transaction",
    ),
    ("sqlalchemy.pool.base", "Pool._invalidate", "db/direct.py: _lost"),
    # graphql-core
    ("graphql.execution.collect_fields", "FieldDetailsList", "graphql/execution/executor.py"),
    ("graphql.execution.collect_fields", "GroupedFieldSet", "graphql/execution/executor.py"),
    ("graphql.pyutils", "gather_with_cancel", "graphql/execution/executor.py"),
    (
        "graphql.execution.executor",
        "Executor.execute_fields",
        "graphql/execution/executor.py: overrides",
    ),
    ("graphql.execution.executor", "Executor.execute_field", "graphql/execution/executor.py"),
    ("graphql.execution.executor", "Executor.collect_subfields", "graphql/execution/executor.py"),
    ("graphql.execution.executor", "Executor.handle_field_error", "graphql/execution/executor.py"),
    (
        "graphql.execution.executor",
        "Executor.settle_in_background",
        "graphql/execution/executor.py",
    ),
    ("graphql.execution.executor", "Executor.is_awaitable", "graphql/execution/executor.py"),
    ("graphql.validation", "ASTValidationContext", "graphql/guards/documents.py"),
    ("graphql.execution.collect_fields", "collect_fields", "graphql/execution/plans.py"),
    ("graphql.execution.collect_fields", "collect_subfields", "graphql/execution/plans.py"),
    ("graphql.execution.collect_fields", "FragmentDetails", "graphql/execution/plans.py"),
    ("graphql.execution.values", "VariableValues", "graphql/execution/plans.py"),
    ("graphql.execution.values", "get_argument_values", "graphql/execution/plans.py"),
    ("graphql.execution.executor", "Executor.build", "graphql/execution/planned.py: overrides"),
    (
        "graphql.execution.executor",
        "Executor.execute_operation",
        "graphql/execution/planned.py: overrides",
    ),
    ("graphql.execution.executor", "Executor.build_response", "graphql/execution/planned.py"),
    (
        "strawberry.schema.schema",
        "StrawberryGraphQLCoreExecutionContext.build_resolve_info",
        "graphql/execution/plans.py: each resolver's info",
    ),
    # aiokafka
    (
        "aiokafka.consumer.group_coordinator",
        "GroupCoordinator._maybe_leave_group",
        "events/kafka.py: GroupConsumer.stop replaces it (Tansu's generation 0)",
    ),
    ("aiokafka.consumer.group_coordinator", "GroupCoordinator._send_req", "events/kafka.py"),
    ("aiokafka.consumer.group_coordinator", "GroupCoordinator.reset_generation", "kafka.py"),
    ("aiokafka.protocol.group", "LeaveGroupRequest", "events/kafka.py"),
    ("aiokafka.protocol.group", "JoinGroupRequest.UNKNOWN_MEMBER_ID", "events/kafka.py"),
    ("aiokafka.client", "AIOKafkaClient.force_metadata_update", "events/consumer.py"),
]


@pytest.mark.parametrize(
    ("module", "path", "used_by"), INTERNALS, ids=[f"{m}.{p}" for m, p, _ in INTERNALS]
)
def test_the_internal_is_where_chorus_expects_it(module: str, path: str, used_by: str) -> None:
    try:
        target: Any = importlib.import_module(module)
        for part in path.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{module}.{path} is gone ({exc}); Chorus uses it in {used_by}")
    assert target is not None, f"{module}.{path} is None; used in {used_by}"


def test_strawberry_instances_still_carry_the_private_attributes_read() -> None:
    """Instance attributes, which a class-level lookup cannot see."""
    import strawberry

    @strawberry.type
    class Query:
        x: int = 1

    schema = strawberry.Schema(query=Query)
    from graphql import GraphQLSchema

    assert isinstance(schema._schema, GraphQLSchema), "Schema._schema: cost.py, documents.py"
    field = schema._schema.query_type.fields["x"]  # type: ignore[union-attr]
    from strawberry.schema.schema_converter import GraphQLCoreConverter

    definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    assert getattr(definition, "python_name", None) == "x", "execution.py: python_name"
    assert getattr(field.resolve, "_is_default", False), "execution.py: _is_default resolver"
    # field_reads.py calls a resolver directly after reading these of strawberry's wrapper.
    resolver_source = inspect.getsource(
        importlib.import_module("strawberry.schema.schema_converter")
    )
    for name in ("field_exception_handlers", "_strawberry_info_from_graphql", "def _resolver("):
        assert name in resolver_source, f"from_resolver's {name}: field_reads.py"
    # plans.py reads a plain field as an attribute only behind this resolver.
    assert field.resolve.__name__ == "_get_basic_result", "plans.py: strawberry's basic field"
    # loaders.py reads whether a loader's DefaultCache holds any future.
    from strawberry.dataloader import DataLoader

    async def _load(keys: list[int]) -> list[int]:
        return keys

    futures = DataLoader(_load).cache_map
    assert type(getattr(futures, "cache_map", None)) is dict, "loaders.py: DefaultCache.cache_map"

    # field_reads.py converts an input itself only when strawberry's definition says these.
    @strawberry.input
    class Given:
        x: int = 1

    given = Given.__strawberry_definition__  # type: ignore[attr-defined]
    for attribute in ("is_input", "is_one_of", "from_input"):
        assert hasattr(given, attribute), f"field_reads.py: definition.{attribute}"
    # direct.py begins SQLAlchemy's deferred transaction through its asyncpg adapter.
    adapter = inspect.getsource(importlib.import_module("sqlalchemy.dialects.postgresql.asyncpg"))
    assert "self._transaction = transaction" in adapter, "direct.py: adapter._transaction"
    # direct.py marks a pool's connections stale without checking the lost one in.
    invalidate = importlib.import_module("sqlalchemy.pool.base").Pool._invalidate
    assert "_checkin" in inspect.signature(invalidate).parameters, "direct.py: Pool._invalidate"
    # operation_metrics.py reads the operation name a request sent (None: none).
    execution = inspect.getsource(importlib.import_module("strawberry.types.execution"))
    assert "self._provided_operation_name =" in execution, "operation_metrics.py"
    executor = inspect.getsource(importlib.import_module("graphql.execution.executor"))
    for attribute in ("fragments", "variable_values", "middleware_manager", "abort_signal"):
        assert f"self.{attribute} =" in executor, f"Executor.{attribute}: planned.py, plans.py"


def test_aiokafka_coordinator_carries_the_attributes_can_commit_reads() -> None:
    """``events.kafka.can_commit`` and ``_leave_group`` read these of a live coordinator."""
    source = inspect.getsource(importlib.import_module("aiokafka.consumer.group_coordinator"))
    for attribute in ("coordinator_id", "generation", "member_id", "_group_instance_id"):
        assert f"self.{attribute} =" in source, f"GroupCoordinator.{attribute}: events/kafka.py"
    consumer_source = inspect.getsource(importlib.import_module("aiokafka.consumer.consumer"))
    for attribute in ("_coordinator", "_client"):
        assert f"self.{attribute} =" in consumer_source, f"AIOKafkaConsumer.{attribute}"


def test_the_bounded_libraries_are_the_locked_ones() -> None:
    """pyproject.toml bounds each library above; the installed one is inside them."""
    from importlib.metadata import version

    from packaging.requirements import Requirement

    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.11 has it
        pytest.fail("tomllib is missing")
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    wanted = {Requirement(r).name: Requirement(r) for r in project["project"]["dependencies"]}
    for name in ("strawberry-graphql", "graphql-core", "aiokafka"):
        requirement = wanted[name]
        assert any(s.operator == "<" for s in requirement.specifier), f"{name} has no upper bound"
        assert requirement.specifier.contains(version(name)), (name, version(name))
