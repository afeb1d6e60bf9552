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
    assert error.extensions == {"code": "BAD_USER_INPUT"}  # the value, not the document
    assert error.locations is not None  # points at the variable's definition


async def test_an_argument_that_does_not_coerce_while_executing_is_bad_user_input() -> None:
    """A nullable variable given ``null`` where the input needs a value: a field error
    (with its path) from graphql-core's coercion, coded as the client's input."""
    result = await schema.execute(
        "mutation($vis: Visibility) { createPlaylist(input: "
        '{operationId: "o", title: "t", visibility: $vis}) { version } }',
        variable_values={"vis": None},
    )
    assert result.errors is not None
    (error,) = result.errors
    assert error.message.startswith("Argument 'input' has invalid value")
    assert error.path == ["createPlaylist"]
    assert error.extensions == {"code": "BAD_USER_INPUT"}


@pytest.mark.parametrize(
    "document",
    [
        "query($id: ID!) { playlist(id: $id) { id } other: playlist(id: $nope) { id } }",
        "query { playlist { id } }",  # "Field 'playlist' argument 'id' … is required"
    ],
)
async def test_a_document_that_does_not_validate_stays_a_validation_failure(document: str) -> None:
    result = await schema.execute(document, variable_values={"id": "x"})
    assert result.errors is not None
    assert {e.extensions["code"] for e in result.errors} == {"GRAPHQL_VALIDATION_FAILED"}  # type: ignore[index]


@pytest.mark.parametrize(
    "operation",
    [
        {"addEntries": {"operationId": "a", "mediaIds": ["m"]}, "removeEntries": None},
        {
            "addEntries": {"operationId": "a", "mediaIds": ["m"]},
            "removeEntries": {"operationId": "b", "entryIds": ["x"]},
        },
        {},
    ],
)
async def test_a_oneof_variable_without_exactly_one_member_is_bad_user_input(
    operation: dict[str, Any],
) -> None:
    """A ``@oneOf`` input in the variables with other than one key: strawberry's check
    raises out of graphql-core's coercion; still the client's input, not the document."""
    result = await schema.execute(
        "mutation($ops: [BatchOperationInput!]!) { applyOperations(input: "
        '{playlistId: "p", baseVersion: 0, operations: $ops}) { version } }',
        variable_values={"ops": [operation]},
    )
    assert result.data is None
    assert result.errors is not None
    (error,) = result.errors
    assert "BatchOperationInput" in error.message
    assert error.extensions == {"code": "BAD_USER_INPUT"}
