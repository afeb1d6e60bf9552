"""Which results are request errors (no ``data`` entry) and which executed (GraphQL spec §7.1)."""

from __future__ import annotations

from graphql import GraphQLError
from strawberry.types.execution import ExecutionResult, PreExecutionError

from chorus.graphql.execution.result_shape import is_request_error


def test_a_pre_execution_error_is_a_request_error() -> None:
    assert is_request_error(PreExecutionError(data=None, errors=[GraphQLError("parse")]))


def test_errors_without_a_path_and_no_data_are_a_request_error() -> None:
    # graphql-core's variable coercion: execute returns no data, errors without a path.
    coerced = ExecutionResult(data=None, errors=[GraphQLError("Variable '$id' has invalid value")])
    assert is_request_error(coerced)


def test_a_field_error_that_nulled_data_was_executed() -> None:
    field = GraphQLError("Argument 'input' has invalid value", path=["createPlaylist"])
    assert not is_request_error(ExecutionResult(data=None, errors=[field]))
    assert not is_request_error(ExecutionResult(data={"a": None}, errors=[GraphQLError("x")]))


def test_no_errors_is_no_request_error() -> None:
    assert not is_request_error(ExecutionResult(data=None, errors=None))
    assert not is_request_error(ExecutionResult(data={"a": 1}, errors=[]))
