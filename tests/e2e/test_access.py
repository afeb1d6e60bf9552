"""Who may do what, over HTTP (DESIGN §5, §7).

The matrix: owner, editor, viewer and stranger × every mutation, on PUBLIC
and PRIVATE playlists, collaborative or not. A playlist the caller may not
see is ``NOT_FOUND`` (never ``FORBIDDEN``: no existence leak); a visible one
the caller may not change is ``FORBIDDEN``; a refused mutation commits
nothing. Then reads, and every kind of bad bearer token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import jwt
import pytest

from tests.e2e.conftest import Api
from tests.e2e.helpers import (
    add,
    committed,
    create_playlist,
    error_codes,
    mutate,
    mutation_document,
    refused,
    track,
)
from tests.servers import TEST_SECRET

OWNER, EDITOR, VIEWER, STRANGER = "alice", "bob", "carol", "dave"
ROLES = {"owner": OWNER, "editor": EDITOR, "viewer": VIEWER, "stranger": STRANGER}
CONFIGS = [
    ("PUBLIC", True),
    ("PUBLIC", False),
    ("PRIVATE", True),
    ("PRIVATE", False),
]


class Fixture:
    """A playlist with an editor, a viewer, another member (erin) and three entries."""

    def __init__(self, api: Api, visibility: str, collaborative: bool) -> None:
        self.api = api
        self.id = create_playlist(
            api, title="Shared", visibility=visibility, collaborative=collaborative
        )
        for v, (user, role) in enumerate(
            [(EDITOR, "EDITOR"), (VIEWER, "VIEWER"), ("erin", "VIEWER")]
        ):
            committed(
                mutate(
                    api, "setMemberRole", playlistId=self.id, baseVersion=v, userId=user, role=role
                )
            )
        added = add(api, self.id, [track(1), track(2), track(3)], base=3)
        self.entry_ids = [e["id"] for e in added["entries"]]
        self.visibility = visibility
        self.collaborative = collaborative

    def snapshot(self) -> dict[str, Any]:
        """Everything a refused mutation must leave as it was (read by the owner)."""
        found = self.api.data(SNAPSHOT, OWNER, id=self.id)["playlist"]
        assert found is not None
        return dict(found)


SNAPSHOT = """
query Snapshot($id: ID!) {
  playlist(id: $id) {
    version title description visibility collaborative entryCount
    entries(first: 100) { edges { node { id positionKey } } }
    members(first: 100) { edges { node { user { id } role } } }
  }
}
"""

# name → (what it needs: "edit" or "owner", its input beyond playlistId/baseVersion)
ACTIONS: dict[str, tuple[str, Callable[[Fixture], dict[str, Any]]]] = {
    "addEntries": ("edit", lambda f: {"mediaIds": [track(9)]}),
    "moveEntries": ("edit", lambda f: {"entryIds": [f.entry_ids[2]], "before": f.entry_ids[0]}),
    "removeEntries": ("edit", lambda f: {"entryIds": [f.entry_ids[0]]}),
    "updateTitle": ("edit", lambda f: {"title": "Renamed", "description": "new"}),
    "revertPlaylist": ("edit", lambda f: {"toVersion": 3}),
    "updateVisibility": (
        "owner",
        lambda f: {"visibility": "PRIVATE" if f.visibility == "PUBLIC" else "PUBLIC"},
    ),
    "updateCollaborative": ("owner", lambda f: {"collaborative": not f.collaborative}),
    "setMemberRole": ("owner", lambda f: {"userId": "frank", "role": "VIEWER"}),
    "promoteMember": ("owner", lambda f: {"userId": VIEWER, "role": "EDITOR"}),
    "removeMember": ("owner", lambda f: {"userId": "erin"}),
    "deletePlaylist": ("owner", lambda f: {}),
}
MUTATION_OF = {
    "updateTitle": "updatePlaylist",
    "updateVisibility": "updatePlaylist",
    "updateCollaborative": "updatePlaylist",
    "promoteMember": "setMemberRole",
}


def expected_code(role: str, visibility: str, collaborative: bool, needs: str) -> str | None:
    """The user error code the contract prescribes; ``None`` when the mutation commits."""
    if role == "stranger" and visibility == "PRIVATE":
        return "NOT_FOUND"
    if role == "owner":
        return None
    if needs == "edit" and role == "editor" and collaborative:
        return None
    return "FORBIDDEN"


@pytest.fixture(scope="module")
def shared(api: Api) -> dict[tuple[str, bool], Fixture]:
    """One playlist per configuration, for the refusals (they change nothing)."""
    return {config: Fixture(api, *config) for config in CONFIGS}


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize(
    ("visibility", "collaborative"),
    CONFIGS,
    ids=[f"{v}-{'collab' if c else 'solo'}" for v, c in CONFIGS],
)
def test_mutation_access(
    api: Api,
    shared: dict[tuple[str, bool], Fixture],
    visibility: str,
    collaborative: bool,
    role: str,
    action: str,
) -> None:
    needs, build = ACTIONS[action]
    code = expected_code(role, visibility, collaborative, needs)
    playlist = (
        shared[visibility, collaborative] if code else Fixture(api, visibility, collaborative)
    )
    before = playlist.snapshot()
    payload = mutate(
        api,
        MUTATION_OF.get(action, action),
        ROLES[role],
        playlistId=playlist.id,
        baseVersion=before["version"],
        **build(playlist),
    )
    if code is None:
        committed(payload)
        assert payload["version"] == before["version"] + 1
        return
    error = refused(payload, code)
    assert error["currentVersion"] is None
    assert payload["replayed"] is False
    if code == "NOT_FOUND":
        assert payload["playlist"] is None, "nothing about an invisible playlist"
        assert "Shared" not in json.dumps(payload)
    assert playlist.snapshot() == before, "a refused mutation changes nothing"


@pytest.mark.parametrize(("visibility", "collaborative"), CONFIGS)
def test_members_may_leave_strangers_may_not(
    api: Api, visibility: str, collaborative: bool
) -> None:
    playlist = Fixture(api, visibility, collaborative)
    version = playlist.snapshot()["version"]
    for user in (EDITOR, VIEWER):
        left = committed(
            mutate(
                api, "removeMember", user, playlistId=playlist.id, baseVersion=version, userId=user
            )
        )
        version = left["version"]
    stranger = mutate(
        api,
        "removeMember",
        STRANGER,
        playlistId=playlist.id,
        baseVersion=version,
        userId=STRANGER,
    )
    refused(stranger, "NOT_FOUND" if visibility == "PRIVATE" else "FORBIDDEN")
    owner = mutate(
        api, "removeMember", OWNER, playlistId=playlist.id, baseVersion=version, userId=OWNER
    )
    refused(owner, "INVALID_INPUT")
    members = playlist.snapshot()["members"]["edges"]
    assert sorted(m["node"]["user"]["id"] for m in members) == [OWNER, "erin"]


def test_owner_role_cannot_be_granted_or_changed(api: Api) -> None:
    playlist = Fixture(api, "PUBLIC", True)
    before = playlist.snapshot()
    for user, role in ((EDITOR, "OWNER"), (OWNER, "VIEWER")):
        payload = mutate(
            api,
            "setMemberRole",
            playlistId=playlist.id,
            baseVersion=before["version"],
            userId=user,
            role=role,
        )
        refused(payload, "INVALID_INPUT")
    assert playlist.snapshot() == before


def test_lost_access_is_immediate(api: Api) -> None:
    playlist = Fixture(api, "PRIVATE", True)
    version = playlist.snapshot()["version"]
    op = api.op()
    request = {"playlistId": playlist.id, "baseVersion": version, "mediaIds": [track(4)]}
    before_removal = committed(mutate(api, "addEntries", EDITOR, operationId=op, **request))
    committed(
        mutate(api, "removeMember", playlistId=playlist.id, baseVersion=version + 1, userId=EDITOR)
    )
    payload = mutate(
        api,
        "addEntries",
        EDITOR,
        playlistId=playlist.id,
        baseVersion=version + 2,
        mediaIds=[track(5)],
    )
    refused(payload, "NOT_FOUND")
    assert api.data(READ, EDITOR, id=playlist.id)["playlist"] is None
    # A retry of what the editor committed before still gets its stored answer
    # (docs/semantics.md), and tells nothing new about the playlist.
    retry = committed(mutate(api, "addEntries", EDITOR, operationId=op, **request))
    assert (retry["replayed"], retry["version"]) == (True, before_removal["version"])
    assert retry["entries"] == before_removal["entries"]
    assert retry["playlist"] is None


# --- reads -------------------------------------------------------------------------

READ = """
query Read($id: ID!) {
  playlist(id: $id) {
    title viewerRole version
    entries(first: 10) { totalCount edges { node { id } } }
  }
  node(id: $id) { id }
}
"""

VIEWER_PLAYLISTS = """
{ viewer { user { id } playlists(first: 100) { totalCount edges { node { id } } } } }
"""


@pytest.mark.parametrize(("visibility", "collaborative"), CONFIGS)
def test_reads(
    api: Api, shared: dict[tuple[str, bool], Fixture], visibility: str, collaborative: bool
) -> None:
    playlist = shared[visibility, collaborative]
    for role, user in ROLES.items():
        body = api.gql(READ, user, id=playlist.id)
        assert "errors" not in body, body
        found = body["data"]["playlist"]
        if role == "stranger" and visibility == "PRIVATE":
            assert body["data"] == {"playlist": None, "node": None}
            continue
        assert found["title"] == "Shared"
        assert found["viewerRole"] == (None if role == "stranger" else role.upper())
        assert found["entries"]["totalCount"] == 3
        assert body["data"]["node"] == {"id": playlist.id}

        mine = api.data(VIEWER_PLAYLISTS, user)["viewer"]
        assert mine["user"]["id"] == user
        listed = {e["node"]["id"] for e in mine["playlists"]["edges"]}
        assert (playlist.id in listed) is (role != "stranger")


# --- tokens --------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _by_hand(header: dict[str, Any], claims: dict[str, Any], secret: str | None) -> str:
    """A JWT built without PyJWT (so nothing refuses to build the bad ones)."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    if secret is None:
        return signing_input + "."
    digest = {"HS256": hashlib.sha256, "HS512": hashlib.sha512}[header["alg"]]
    signature = hmac.new(secret.encode(), signing_input.encode(), digest).digest()
    return f"{signing_input}.{_b64(signature)}"


def _bad_tokens() -> dict[str, str | None]:
    now = int(time.time())
    good_claims = {"sub": OWNER, "iat": now, "exp": now + 3600}
    valid = jwt.encode(good_claims, TEST_SECRET, algorithm="HS256")
    header, claims, _ = valid.split(".")
    return {
        "expired": "Bearer "
        + jwt.encode({"sub": OWNER, "exp": now - 60}, TEST_SECRET, algorithm="HS256"),
        "wrong signature": "Bearer "
        + jwt.encode(good_claims, "another-secret-" + "y" * 40, algorithm="HS256"),
        "alg none": "Bearer " + _by_hand({"alg": "none", "typ": "JWT"}, good_claims, None),
        "alg none, signed": "Bearer "
        + f"{_by_hand({'alg': 'none', 'typ': 'JWT'}, good_claims, None)}{valid.split('.')[2]}",
        "alg HS512": "Bearer " + _by_hand({"alg": "HS512", "typ": "JWT"}, good_claims, TEST_SECRET),
        "signature stripped": f"Bearer {header}.{claims}.",
        "claims swapped": "Bearer "
        + f"{header}.{_b64(json.dumps({**good_claims, 'sub': 'mallory'}).encode())}."
        + valid.split(".")[2],
        "missing sub": "Bearer " + jwt.encode({"exp": now + 3600}, TEST_SECRET, algorithm="HS256"),
        "empty sub": "Bearer "
        + jwt.encode({"sub": "", "exp": now + 3600}, TEST_SECRET, algorithm="HS256"),
        "sub with spaces": "Bearer "
        + jwt.encode({"sub": "alice smith", "exp": now + 3600}, TEST_SECRET, algorithm="HS256"),
        "sub not a string": "Bearer "
        + _by_hand({"alg": "HS256", "typ": "JWT"}, {"sub": 7, "exp": now + 3600}, TEST_SECRET),
        "missing exp": "Bearer " + jwt.encode({"sub": OWNER}, TEST_SECRET, algorithm="HS256"),
        # Signed and in the future, but not a date Python can hold.
        "exp past year 9999": "Bearer "
        + jwt.encode({"sub": OWNER, "exp": 300_000_000_000}, TEST_SECRET, algorithm="HS256"),
        "exp overflowing": "Bearer "
        + jwt.encode({"sub": OWNER, "exp": 10**20}, TEST_SECRET, algorithm="HS256"),
        "not yet valid": "Bearer "
        + jwt.encode({**good_claims, "nbf": now + 3600}, TEST_SECRET, algorithm="HS256"),
        "garbage": "Bearer garbage",
        "three garbage parts": "Bearer a.b.c",
        "bearer only": "Bearer",
        "bearer dot": "Bearer .",
        "basic scheme": "Basic YWxpY2U6cGFzc3dvcmQ=",
        "raw token, no scheme": valid,
        "huge": "Bearer " + "a" * 6000,
        "no token": None,
    }


BAD_TOKENS = _bad_tokens()


@pytest.fixture(scope="module")
def public_playlist(api: Api) -> str:
    playlist_id = create_playlist(api, title="Secret title", visibility="PUBLIC")
    add(api, playlist_id, [track(1)], base=0)
    return playlist_id


def _as(api: Api, authorization: str | None, query: str, **variables: Any) -> dict[str, Any]:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = api.http.post(
        api.server.url, json={"query": query, "variables": variables}, headers=headers
    )
    assert response.status_code == 200, response.text
    for leak in ("Traceback", "Secret title", "jwt.", "site-packages"):
        assert leak not in response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("kind", list(BAD_TOKENS))
def test_bad_tokens_are_unauthenticated(api: Api, public_playlist: str, kind: str) -> None:
    authorization = BAD_TOKENS[kind]
    before = api.data(READ, OWNER, id=public_playlist)["playlist"]["version"]

    body = _as(api, authorization, "{ viewer { user { id } } }")
    assert "data" not in body, body  # refused before validation: a request error
    assert error_codes(body) == ["UNAUTHENTICATED"]
    assert body["errors"][0]["message"]

    body = _as(api, authorization, READ, id=public_playlist)
    assert "data" not in body, body
    assert set(error_codes(body)) == {"UNAUTHENTICATED"}

    body = _as(api, authorization, '{ searchMedia(query: "love") { totalCount } }')
    assert "data" not in body, body  # refused before validation: a request error
    assert error_codes(body) == ["UNAUTHENTICATED"]

    body = _as(
        api,
        authorization,
        mutation_document("addEntries"),
        input={
            "playlistId": public_playlist,
            "operationId": api.op(),
            "baseVersion": before,
            "mediaIds": [track(2)],
        },
    )
    assert "data" not in body, body  # refused before validation: a request error
    assert error_codes(body) == ["UNAUTHENTICATED"]
    body = _as(
        api,
        authorization,
        mutation_document("createPlaylist"),
        input={"operationId": api.op(), "title": "by nobody"},
    )
    assert "data" not in body, body  # refused before validation: a request error
    assert error_codes(body) == ["UNAUTHENTICATED"]

    assert api.data(READ, OWNER, id=public_playlist)["playlist"]["version"] == before
    titles = api.data(VIEWER_PLAYLISTS, "mallory")["viewer"]["playlists"]["totalCount"]
    assert titles == 0, "no playlist was created for any user"


def test_a_valid_token_for_a_new_user_just_works(api: Api, public_playlist: str) -> None:
    found = api.data(READ, "someone-new@example.org", id=public_playlist)["playlist"]
    assert (found["title"], found["viewerRole"]) == ("Secret title", None)
    body = _as(api, "bearer " + api.token("lowercase-scheme"), "{ viewer { user { id } } }")
    assert "errors" not in body, body
    assert body["data"] == {"viewer": {"user": {"id": "lowercase-scheme"}}}
