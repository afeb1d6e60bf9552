"""Many writers, many flaky subscribers, one playlist: everyone ends with the same list.

Eight writers send random adds, moves and removes over HTTP, each against the
version it last saw and with anchors and targets from what it has seen (some
since removed or moved by others), so most commands are rebased. Twenty
subscribers — half on the ``gql`` client, half on bare ``websockets`` —
follow ``playlistEvents`` and drop their connection at random moments
(cleanly, by cancelling, or by killing the TCP connection), then subscribe
again from the last version they applied.

At the end every subscriber has received each version exactly once, in
order, across all its reconnects, and the list it rebuilt from nothing but
those events equals ``playlist.entries`` (DESIGN §6).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import httpx

from tests.e2e.conftest import Api
from tests.e2e.helpers import (
    ENTRIES,
    add,
    committed,
    create_playlist,
    mutate,
    mutation_document,
    track,
    version,
)
from tests.e2e.test_subscriptions import (
    GqlSubscriber,
    Replica,
    close_socket,
    gql_session,
    open_socket,
    receive,
    server_order,
    settled,
    subscribe,
)
from tests.servers import ChorusServer

WRITERS = 8
COMMANDS_PER_WRITER = 25
SUBSCRIBERS = 20
SEED = 20_240_601


class Writer:
    """Edits through HTTP from a possibly stale view of the playlist."""

    def __init__(self, api: Api, http: httpx.AsyncClient, user: str, playlist_id: str) -> None:
        self.api = api
        self.http = http
        self.user = user
        self.playlist_id = playlist_id
        self.rng = random.Random(f"{SEED}-{user}")
        self.base = 0
        self.seen: list[str] = []  # every entry id this writer ever saw, live or not
        self.rebased = 0

    async def post(self, query: str, **variables: Any) -> dict[str, Any]:
        response = await self.http.post(
            self.api.server.url,
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {self.api.token(self.user)}"},
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data

    async def look(self) -> None:
        """Read the list (a page is enough to learn anchors) and its version."""
        found = (await self.post(ENTRIES, id=self.playlist_id, first=100))["playlist"]
        self.base = found["entries"]["version"]
        for edge in found["entries"]["edges"]:
            if edge["node"]["id"] not in self.seen:
                self.seen.append(edge["node"]["id"])

    def placement(self, exclude: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
        anchors = [e for e in self.seen if e not in exclude]
        where = self.rng.choice(["after", "before", "end"])
        if where == "end" or not anchors:
            return {}
        return {where: self.rng.choice(anchors)}

    async def command(self) -> None:
        kind = self.rng.choices(["add", "move", "remove"], [5, 3, 2])[0]
        if len(self.seen) < 3:
            kind = "add"
        fields: dict[str, Any] = {
            "playlistId": self.playlist_id,
            "operationId": f"{self.user}-{self.api.op()}",
            "baseVersion": self.base,
        }
        if kind == "add":
            media = [track(self.rng.randint(1, 3_000)) for _ in range(self.rng.randint(1, 3))]
            fields.update(mediaIds=media, **self.placement())
        else:
            targets = self.rng.sample(self.seen, self.rng.randint(1, min(2, len(self.seen))))
            fields["entryIds"] = targets
            if kind == "move":
                fields.update(self.placement(exclude=targets))
        name = {"add": "addEntries", "move": "moveEntries", "remove": "removeEntries"}[kind]
        payload = (await self.post(mutation_document(name), input=fields))[name]
        assert payload["userErrors"] == [], (self.user, fields, payload)
        assert payload["version"] is not None, payload
        self.rebased += payload["rebased"]
        self.base = payload["version"]
        for entry in payload.get("entries", []):
            if entry["id"] not in self.seen:
                self.seen.append(entry["id"])

    async def run(self) -> None:
        await self.look()
        for _ in range(COMMANDS_PER_WRITER):
            if self.rng.random() < 0.15:
                await self.look()
            await self.command()
            await asyncio.sleep(self.rng.uniform(0, 0.03))


class Follower:
    """A subscriber that keeps dropping its connection and coming back."""

    def __init__(self, server: ChorusServer, api: Api, n: int, playlist_id: str) -> None:
        self.server = server
        self.api = api
        self.user = f"follower-{n}"
        self.playlist_id = playlist_id
        self.use_gql = n % 2 == 0
        self.rng = random.Random(f"{SEED}-{self.user}")
        self.replica = Replica(since=0)
        self.sessions = 0
        # True from a session's connection_ack until it starts closing: only
        # then is it cut (gql leaves its socket open when cancelled between
        # connect and ack), and never again once it closes (a cancel then would
        # interrupt the close, and the socket would outlive the test). It is
        # cut again while still True: Python 3.11's wait_for can swallow a
        # cancel that races with a message arriving.
        self.connected = False

    async def _raw_session(self, budget: int) -> None:
        ws = await open_socket(self.server, self.api.token(self.user))
        self.connected = True
        try:
            await subscribe(ws, "1", self.playlist_id, self.replica.last)
            for _ in range(budget):
                message = await receive(ws)
                assert message["type"] == "next", message
                self.replica.apply(message["payload"]["data"]["playlistEvents"])
        finally:
            self.connected = False
            if self.rng.random() < 0.5:
                ws.transport.abort()  # no close frame
            else:
                with contextlib.suppress(Exception):
                    await close_socket(ws)

    async def _gql_session(self, budget: int) -> None:
        async with gql_session(self.server, self.api.token(self.user)) as session:
            self.connected = True
            sub = GqlSubscriber(session, self.playlist_id, self.replica.last)
            try:
                for _ in range(budget):
                    (event,) = await sub.take(1)
                    self.replica.apply(event)
            finally:
                self.connected = False
                await sub.close()

    async def run(self, final: asyncio.Future[int]) -> None:
        while not (final.done() and self.replica.last >= final.result()):
            self.sessions += 1
            budget = self.rng.randint(1, 40)
            run = self._gql_session if self.use_gql else self._raw_session
            self.connected = False
            session = asyncio.create_task(run(budget))
            give_up_at = asyncio.get_running_loop().time() + self.rng.uniform(0.1, 2.0)
            while not session.done():
                await asyncio.wait({session}, timeout=0.1)
                caught_up = final.done() and self.replica.last >= final.result()
                timed_out = asyncio.get_running_loop().time() > give_up_at
                if self.connected and (caught_up or timed_out):
                    session.cancel()  # a disconnect at a random moment
            with contextlib.suppress(asyncio.CancelledError):
                await session
            await asyncio.sleep(self.rng.uniform(0, 0.1))


async def test_writers_and_reconnecting_subscribers_converge(
    server: ChorusServer, api: Api
) -> None:
    await converge(api, api)


async def converge(writing: Api, following_api: Api) -> None:
    """Writers edit through ``writing``'s server; followers subscribe on ``following_api``'s.

    With two API processes of the full profile, every event a follower gets
    crossed outbox → relay → Kafka → fanout → Redis pub/sub → the other process.
    """
    api, server = writing, following_api.server
    playlist_id = create_playlist(api, visibility="PUBLIC", collaborative=True)
    base = add(api, playlist_id, [track(n) for n in range(1, 11)], 0)["version"]
    writers = ["alice"] + [f"writer-{n}" for n in range(1, WRITERS)]
    for user in writers[1:]:
        base = committed(
            mutate(
                api,
                "setMemberRole",
                playlistId=playlist_id,
                baseVersion=base,
                userId=user,
                role="EDITOR",
            )
        )["version"]

    final: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    followers = [Follower(server, following_api, n, playlist_id) for n in range(SUBSCRIBERS)]
    following = [asyncio.create_task(f.run(final)) for f in followers]
    async with httpx.AsyncClient(timeout=60) as http:
        editors = [Writer(api, http, user, playlist_id) for user in writers]
        await asyncio.gather(*(w.run() for w in editors))
    head = await asyncio.to_thread(version, api, playlist_id)
    assert head == base + WRITERS * COMMANDS_PER_WRITER
    final.set_result(head)
    await asyncio.wait_for(asyncio.gather(*following), 120)

    truth = await asyncio.to_thread(server_order, api, playlist_id)
    assert sum(w.rebased for w in editors) > WRITERS * COMMANDS_PER_WRITER / 4
    for follower in followers:
        assert follower.replica.versions == list(range(1, head + 1)), follower.user
        assert follower.replica.order() == truth, follower.user
    assert sum(f.sessions for f in followers) >= 3 * SUBSCRIBERS  # they did reconnect
    await settled(server)
