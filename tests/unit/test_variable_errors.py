"""A variable that does not coerce: the error names the variable, in JSON's words (a fresh user)."""

from __future__ import annotations

from typing import Any

import pytest

from chorus.graphql.schema.build import build_schema

schema = build_schema()


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        (
            {"id": None},
            "Variable '$id' has invalid value: "
            "Expected value of non-null type 'ID!' not to be null.",
        ),
        (
            {},
            "Variable '$id' has invalid value: "
            "Expected a value of non-null type 'ID!' to be provided.",
        ),
        ({"id": 5.5}, "Variable '$id' has invalid value: ID cannot represent value: 5.5"),
    ],
)
async def test_a_variable_error_names_the_variable(variables: dict[str, Any], says: str) -> None:
    result = await schema.execute(
        "query($id: ID!) { playlist(id: $id) { id } }", variable_values=variables
    )
    assert result.errors is not None
    (error,) = result.errors
    assert error.message == says
    assert error.extensions == {"code": "GRAPHQL_VALIDATION_FAILED"}
    assert error.locations is not None  # points at the variable's definition
