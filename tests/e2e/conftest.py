"""The running server, over real sockets, on SQLite and on PostgreSQL.

``server`` starts ``chorus serve`` once per test module and backend; ``api``
is a small GraphQL-over-HTTP client (httpx) that mints tokens with the
server's secret.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chorus.auth import mint_token
from tests.servers import TEST_SECRET, ChorusServer, create_database, drop_database, postgres_url


@contextlib.contextmanager
def running_server(
    backend: str, tmp_path_factory: pytest.TempPathFactory, **env: str
) -> Iterator[ChorusServer]:
    """A started ``chorus serve`` on a fresh ``backend`` ("sqlite" or "postgres") database.

    ``env``: extra ``CHORUS_*`` settings. The server stops, and a PostgreSQL
    database is dropped, when the block ends.
    """
    data_dir = tmp_path_factory.mktemp("chorus-data")
    database = None
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{data_dir / 'chorus.db'}"
    else:
        database = create_database()
        url = postgres_url(database)
    chorus = ChorusServer(url, data_dir, **env)
    chorus.start()
    try:
        yield chorus
    finally:
        chorus.stop()
        if database:
            drop_database(database)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChorusServer]:
    with running_server(request.param, tmp_path_factory) as chorus:
        yield chorus


class Api:
    """GraphQL over HTTP against one server."""

    _ops = itertools.count()

    def __init__(self, server: ChorusServer) -> None:
        self.server = server
        self.http = httpx.Client(timeout=30)

    def token(self, user: str) -> str:
        return mint_token(TEST_SECRET, user)

    def raw(self, body: Any, user: str | None = "alice", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        return self.http.post(self.server.url, json=body, headers=headers, **kw)

    def gql(self, query: str, user: str | None = "alice", **variables: Any) -> dict[str, Any]:
        """The response body; asserts HTTP 200."""
        response = self.raw({"query": query, "variables": variables}, user)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def data(self, query: str, user: str | None = "alice", **variables: Any) -> dict[str, Any]:
        """The ``data`` of a response that must have no errors."""
        body = self.gql(query, user, **variables)
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data

    def op(self) -> str:
        return f"op-{next(self._ops)}"


@pytest.fixture(scope="module")
def api(server: ChorusServer) -> Iterator[Api]:
    client = Api(server)
    yield client
    client.http.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path


@contextlib.contextmanager
def serving(url: str, data_dir: Path, **env: str) -> Iterator[Api]:
    """A client of a ``chorus serve`` on ``url`` while the block runs; the server stops
    and the client closes when it ends (``env``: extra ``CHORUS_*`` settings)."""
    server = ChorusServer(url, data_dir, **env)
    server.start()
    api = Api(server)
    try:
        yield api
    finally:
        api.http.close()
        server.stop()
