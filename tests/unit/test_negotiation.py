"""Which media type an answer goes as (GraphQL over HTTP), and its status."""

from __future__ import annotations

import json

import pytest
from starlette.responses import Response

from chorus.graphql.http.negotiation import GRAPHQL_RESPONSE, JSON, as_graphql_response, negotiate


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, JSON),
        ("", JSON),
        ("*/*", JSON),
        ("application/*", JSON),
        ("application/json", JSON),
        ("application/graphql-response+json", GRAPHQL_RESPONSE),
        ("application/graphql-response+json, application/json", GRAPHQL_RESPONSE),
        ("application/json, application/graphql-response+json", GRAPHQL_RESPONSE),
        ("application/json;q=1, application/graphql-response+json;q=0.9", JSON),
        ("application/json;q=0.5, application/graphql-response+json", GRAPHQL_RESPONSE),
        ("Application/GraphQL-Response+JSON", GRAPHQL_RESPONSE),
        ("application/graphql-response+json;q=0", None),
        ("application/graphql-response+json;q=0, */*", JSON),
        ("application/json;q=zzz", JSON),
        ("text/plain", None),
        ("text/html, image/png", None),
        ("x" * 5000, JSON),
    ],
)
def test_negotiate(accept: str | None, chosen: str | None) -> None:
    assert negotiate(accept) == chosen


def answer(body: object, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type=JSON)


def test_a_request_error_is_400_without_data() -> None:
    out = as_graphql_response(
        answer({"data": None, "errors": [{"extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]})
    )
    assert (out.status_code, out.media_type) == (400, GRAPHQL_RESPONSE)
    assert "data" not in json.loads(bytes(out.body))


def test_an_unauthenticated_answer_is_401() -> None:
    out = as_graphql_response(
        answer({"data": None, "errors": [{"extensions": {"code": "UNAUTHENTICATED"}}]})
    )
    assert out.status_code == 401
    assert out.headers["www-authenticate"] == "Bearer"
    assert json.loads(bytes(out.body))["data"] is None


@pytest.mark.parametrize(
    "body",
    [
        {"data": {"a": 1}},
        {"data": {"a": None}, "errors": [{"extensions": {"code": "NOT_FOUND"}}]},
        {"data": None, "errors": [{"extensions": {"code": "INTERNAL_SERVER_ERROR"}}]},
        {"data": None, "errors": [{"extensions": {"code": "UNAUTHENTICATED"}}, {}]},
    ],
)
def test_executed_answers_stay_200(body: object) -> None:
    out = as_graphql_response(answer(body))
    assert (out.status_code, out.media_type) == (200, GRAPHQL_RESPONSE)
    assert json.loads(bytes(out.body)) == body


def test_other_statuses_and_headers_are_kept() -> None:
    refused = answer({"errors": [{"extensions": {"code": "BAD_REQUEST"}}]}, 400)
    refused.headers["X-Request-Id"] = "r1"
    out = as_graphql_response(refused)
    assert (out.status_code, out.headers["x-request-id"]) == (400, "r1")
    assert out.headers["content-type"] == GRAPHQL_RESPONSE
    assert as_graphql_response(Response(status_code=304)).status_code == 304
