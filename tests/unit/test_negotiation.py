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
    assert negotiate(accept) == chosen  # the second from what the first read kept


def test_more_accept_values_than_are_kept_are_each_read_right() -> None:
    for n in range(600):  # past the kept values' bound, which forgets them all
        accept = f"application/json;q=0.{n % 9 + 1}, application/graphql-response+json;q=0.{n}"
        graphql_q = float(f"0.{n}")
        assert negotiate(accept) == (GRAPHQL_RESPONSE if graphql_q >= n % 9 / 10 + 0.1 else JSON)


def answer(body: object, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type=JSON)


def test_a_request_error_is_400_and_sent_as_it_is() -> None:
    body = {"errors": [{"extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]}
    out = as_graphql_response(answer(body))
    assert (out.status_code, out.media_type) == (400, GRAPHQL_RESPONSE)
    assert json.loads(bytes(out.body)) == body


@pytest.mark.parametrize(
    ("codes", "status"),
    [
        (["UNAUTHENTICATED"], 401),
        (["RATE_LIMITED"], 429),
        (["SERVICE_UNAVAILABLE"], 503),
        (["INTERNAL_SERVER_ERROR"], 500),
        (["BAD_REQUEST"], 400),
        (["GRAPHQL_PARSE_FAILED"], 400),
        (["UNAUTHENTICATED", "GRAPHQL_VALIDATION_FAILED"], 400),
        (["RATE_LIMITED", "SERVICE_UNAVAILABLE"], 400),
        ([None], 400),
    ],
)
def test_an_answer_without_data_is_never_2xx(codes: list[str | None], status: int) -> None:
    errors = [{"extensions": {"code": c}} if c else {"message": "m"} for c in codes]
    out = as_graphql_response(answer({"errors": errors}))
    assert out.status_code == status
    assert ("www-authenticate" in out.headers) is (status == 401)


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
        # A field error raised while coercing an argument inside execution:
        # executed, so 200 with its data, whatever its code says.
        {
            "data": None,
            "errors": [
                {"path": ["createPlaylist"], "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}
            ],
        },
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
