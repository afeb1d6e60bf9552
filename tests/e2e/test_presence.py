"""Presence on the embedded profile (in-process sessions), on SQLite and on PostgreSQL.

The scenarios are :mod:`tests.e2e.presence_steps`'s; the full profile runs
them too (``tests/full/test_presence.py``), with Redis keeping the sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import presence_steps
from tests.e2e.conftest import Api, running_server
from tests.e2e.presence_steps import ENV, SCENARIOS, shown, viewing
from tests.servers import ChorusServer

Scenario = Callable[[ChorusServer, Api], Coroutine[Any, Any, None]]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def presence_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChorusServer]:
    with running_server(request.param, tmp_path_factory, **ENV) as server:
        yield server


@pytest.fixture(scope="module")
def presence_api(presence_server: ChorusServer) -> Iterator[Api]:
    client = Api(presence_server)
    yield client
    client.http.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_presence(
    presence_server: ChorusServer, presence_api: Api, scenario: Scenario
) -> None:
    await scenario(presence_server, presence_api)


async def test_a_killed_process_takes_its_presence_with_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with running_server("sqlite", tmp_path_factory, **ENV) as server:
        api = Api(server)
        try:
            playlist_id = presence_steps.create_playlist(api, title="Killed")
            ws = await viewing(server, api, "alice", playlist_id)
            await presence_steps.until(lambda: shown(api, playlist_id) == ({"alice": "VIEWING"}, 0))
            server.kill()
            ws.transport.abort()
            await ws.wait_closed()
            again = ChorusServer(server.database_url, Path(server.env["CHORUS_DATA_DIR"]), **ENV)
            again.start()
            try:
                after = Api(again)
                assert shown(after, playlist_id) == ({}, 0)
                after.http.close()
            finally:
                again.stop()
        finally:
            api.http.close()
