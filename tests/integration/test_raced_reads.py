"""A query that reads a playlist while an edit commits answers at one version.

A playlist's header and its first page of entries are read in one
transaction. Any other page is a second read; an edit committed between the
two would give an answer whose ``version`` and ``entries.version`` differ.
The view runs such a query again (at no cost to the viewer's query budget).
These tests commit the edit exactly there, by wrapping the page read,
through the whole ASGI app on an embedded database.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from chorus.app import create_app
from chorus.auth import mint_token
from chorus.db import pages
from chorus.db.migrate import upgrade
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.model import Visibility
from chorus.graphql.http.answers import RACED_READ_ATTEMPTS
from chorus.graphql.schema.common import ids
from chorus.resolvers.context import Services
from chorus.settings import Settings

SECRET = "raced-reads-" + "s" * 40

PAGE = """query Page($id: ID!) { playlist(id: $id) { version
  entries(last: 50) { version edges { node { mediaId } } } } }"""
"""A page read apart from the header (``last``: a first page is read with it, below)."""
FIRST_PAGE = """query First($id: ID!) { playlist(id: $id) { version
  ... on Playlist { entries(first: 50) { version edges { node { mediaId } } } } } }"""

Message = dict[str, Any]


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    """The app with its lifespan started; the client and the services it built."""
    app = create_app(settings)
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan", "state": {}}, inbox.get, outbox.put))
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started
    services = _services(app)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client, services
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await task


def _services(app: Any) -> Services:
    """The services the lifespan put on the Starlette app under the middleware."""
    while not hasattr(app, "state") or not hasattr(app.state, "services"):
        app = app.app
    services: Services = app.state.services
    return services


@pytest.fixture
def migrated(tmp_path: Path) -> str:
    """An embedded database migrated outside the test's loop (Alembic runs its own)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'chorus.db'}"
    upgrade(url)
    return url


def settings_for(url: str, tmp_path: Path, **overrides: Any) -> Settings:
    return Settings(database_url=url, data_dir=str(tmp_path), jwt_secret=SECRET, **overrides)


async def _public_playlist(services: Services) -> str:
    created = await services.store.create(
        CreatePlaylist("c", "Mix", visibility=Visibility.PUBLIC), "alice"
    )
    pid = created.outcome.playlist_id
    await services.store.execute(AddEntries(pid, "a0", 0, ("m0",)), "alice")
    return pid


def _racing(monkeypatch: pytest.MonkeyPatch, services: Services, pid: str, races: int) -> list[int]:
    """Commit one edit before each of the first ``races`` page reads; the versions read."""
    real: Callable[..., Awaitable[Any]] = pages.entries_page
    read: list[int] = []

    async def racing(*args: Any, **kwargs: Any) -> Any:
        if len(read) < races:
            # Version 1 added m0; each race before it added one more entry.
            edit = AddEntries(pid, f"race{len(read)}", 1 + len(read), (f"m{len(read) + 1}",))
            await services.store.execute(edit, "alice")
        page = await real(*args, **kwargs)
        read.append(page.version)
        return page

    monkeypatch.setattr(pages, "entries_page", racing)
    return read


async def test_an_edit_between_header_and_page_is_read_again(
    migrated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(migrated, tmp_path, query_cost_per_minute=300, max_query_cost=300)
    async with running(settings) as (client, s):
        pid = await _public_playlist(s)
        read = _racing(monkeypatch, s, pid, races=1)
        token = mint_token(SECRET, "bob")
        response = await client.post(
            "/graphql",
            json={"query": PAGE, "variables": {"id": ids.playlist_global_id(pid)}},
            headers={"Authorization": f"Bearer {token}"},
        )
        body = response.json()
        answer = body["data"]["playlist"]
        assert read == [2, 2]  # the first page raced the edit; the second run did not
        assert answer["version"] == answer["entries"]["version"] == 2
        assert [e["node"]["mediaId"] for e in answer["entries"]["edges"]] == ["m0", "m1"]
        # One run was charged: the budget lost the query's cost once, not twice
        # (it refills at 5 a second meanwhile).
        budget = s.query_budget
        assert budget.limited
        cost = body["extensions"]["cost"]["requestedQueryCost"]
        assert 300 - cost <= budget.available("bob") < 300 - cost + cost / 2


async def test_a_race_every_time_answers_after_the_last_attempt_each_part_named(
    migrated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(settings_for(migrated, tmp_path)) as (client, s):
        pid = await _public_playlist(s)
        read = _racing(monkeypatch, s, pid, races=RACED_READ_ATTEMPTS)
        token = mint_token(SECRET, "bob")
        response = await client.post(
            "/graphql",
            json={"query": PAGE, "variables": {"id": ids.playlist_global_id(pid)}},
            headers={"Authorization": f"Bearer {token}"},
        )
        answer = response.json()["data"]["playlist"]
        assert len(read) == RACED_READ_ATTEMPTS
        assert answer["entries"]["version"] == read[-1] == answer["version"] + 1
        assert len(answer["entries"]["edges"]) == read[-1]  # one entry per version
        # The mixed answer was not kept: the next read (no race now) is whole.
        again = await client.post(
            "/graphql",
            json={"query": PAGE, "variables": {"id": ids.playlist_global_id(pid)}},
            headers={"Authorization": f"Bearer {token}"},
        )
        whole = again.json()["data"]["playlist"]
        assert whole["version"] == whole["entries"]["version"] == read[-1]


async def test_a_first_page_is_read_with_its_header_in_one_transaction(
    migrated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(settings_for(migrated, tmp_path)) as (client, s):
        pid = await _public_playlist(s)
        calls: list[str] = []
        for name in ("entries_page", "playlists_by_id", "playlist_and_first_page"):
            real = getattr(pages, name)

            def spy(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                calls.append(_name)
                return _real(*args, **kw)

            monkeypatch.setattr(pages, name, spy)
        response = await client.post(
            "/graphql",
            json={"query": FIRST_PAGE, "variables": {"id": ids.playlist_global_id(pid)}},
            headers={"Authorization": f"Bearer {mint_token(SECRET, 'bob')}"},
        )
        answer = response.json()["data"]["playlist"]
        assert calls == ["playlist_and_first_page"]
        assert answer["version"] == answer["entries"]["version"] == 1
        assert [e["node"]["mediaId"] for e in answer["entries"]["edges"]] == ["m0"]
