"""What an SRE gets from a real ``chorus serve``: OTLP traces and JSON access lines.

The test serves an OTLP/HTTP endpoint itself on 127.0.0.1 and decodes what
the server exports with ``opentelemetry-proto``; the server's stderr, in
``CHORUS_LOG_FORMAT=json``, is parsed line by line.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from chorus.auth import mint_token
from tests.deadlines import patience
from tests.http_stub import QuietHandler
from tests.servers import TEST_SECRET, ChorusServer

CREATE = """mutation Create($input: CreatePlaylistInput!) {
  createPlaylist(input: $input) { version playlist { id } userErrors { code } } }"""
READ = "query ReadTitle($id: ID!) { playlist(id: $id) { title } }"


class Collector:
    """An OTLP/HTTP trace endpoint: every ``POST /v1/traces`` body, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        collector = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.paths.append(self.path)
                collector.requests.append(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.reply(answer, "application/x-protobuf")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every exported span with its resource's attributes."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    found += [(resource, span) for span in scope.spans]
        return found


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


@pytest.fixture
def collector() -> Iterator[Collector]:
    served = Collector()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


def _graphql(server: ChorusServer, query: str, user: str, **variables: Any) -> Any:
    response = httpx.post(
        server.url,
        json={"query": query, "variables": variables},
        headers={"Authorization": f"Bearer {mint_token(TEST_SECRET, user)}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_chorus_serve_exports_its_spans_over_otlp_http(
    collector: Collector, tmp_path: Path
) -> None:
    server = ChorusServer(
        f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}",
        tmp_path,
        CHORUS_OTLP_ENDPOINT=collector.url,
        CHORUS_RESPONSE_CACHE="false",
        OTEL_BSP_SCHEDULE_DELAY="100",  # the SDK's batch delay (ms): export soon, not in 5 s
    )
    server.start()
    try:
        created = _graphql(server, CREATE, "alice", input={"operationId": "o1", "title": "Mix"})
        playlist_id = created["createPlaylist"]["playlist"]["id"]
        assert _graphql(server, READ, "alice", id=playlist_id) == {"playlist": {"title": "Mix"}}
        deadline = time.monotonic() + patience(15)
        names: set[str] = set()
        while time.monotonic() < deadline and not {"query ReadTitle", "outbox publish"} <= names:
            time.sleep(0.1)
            names = {span.name for _, span in collector.spans()}
    finally:
        server.stop()
    assert set(collector.paths) == {"/v1/traces"}
    spans = collector.spans()
    assert {"POST /graphql", "mutation Create", "query ReadTitle", "db.read", "outbox publish"} <= {
        span.name for _, span in spans
    }, sorted({span.name for _, span in spans})
    resource, _ = spans[0]
    assert resource["service.name"] == "chorus"
    assert resource["chorus.role"] == "api"
    (read,) = [span for _, span in spans if span.name == "query ReadTitle"]
    (server_span,) = [
        span for _, span in spans if span.trace_id == read.trace_id and span.name == "POST /graphql"
    ]
    assert read.parent_span_id == server_span.span_id
    attributes = {a.key: _value(a.value) for a in read.attributes}
    assert attributes["graphql.operation.name"] == "ReadTitle"
    assert attributes["graphql.operation.type"] == "query"


def test_json_logs_give_one_access_line_per_request(tmp_path: Path) -> None:
    server = ChorusServer(
        f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}",
        tmp_path,
        log_level="info",
        CHORUS_LOG_FORMAT="json",
    )
    server.start()
    try:
        created = _graphql(server, CREATE, "alice", input={"operationId": "o1", "title": "Mix"})
        playlist_id = created["createPlaylist"]["playlist"]["id"]
        response = httpx.post(
            server.url,
            json={"query": READ, "variables": {"id": playlist_id}},
            headers={
                "Authorization": f"Bearer {mint_token(TEST_SECRET, 'bob')}",
                "X-Request-Id": "req-42",
            },
            timeout=10,
        )
        assert response.status_code == 200
    finally:
        server.stop()
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if line[:1] == "{"]
    assert lines, server.log.read_text()[-2000:]
    assert all(
        {"time", "level", "logger", "request_id", "message"} <= line.keys() for line in lines
    )
    access = [line for line in lines if line["logger"] == "chorus.access"]
    assert [line["path"] for line in access if line["path"] == "/graphql"] == ["/graphql"] * 2
    (read,) = [line for line in access if line["request_id"] == "req-42"]
    assert read["user"] == "bob"
    assert read["client"] == "127.0.0.1"  # the TCP peer: no trusted proxy is set
    assert read["operation"] == "ReadTitle"
    assert read["status"] == 200
    assert read["duration_ms"] > 0
    assert not [line for line in lines if line["logger"] == "uvicorn.access"]


def test_a_bad_log_format_or_otlp_endpoint_stops_start_up_naming_the_variable(
    tmp_path: Path,
) -> None:
    for variable, value in (("CHORUS_LOG_FORMAT", "yaml"), ("CHORUS_OTLP_ENDPOINT", "grpc://x")):
        server = ChorusServer(
            f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", tmp_path, **{variable: value}
        )
        try:
            with pytest.raises(RuntimeError, match=variable):
                server.start(timeout_s=20)
        finally:
            server.stop()  # closes its log file
