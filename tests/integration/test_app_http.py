"""The ASGI app's HTTP edges that need no database: CORS."""

from __future__ import annotations

import httpx

from chorus.app import create_app
from chorus.settings import Settings

SECRET = "s" * 40


async def test_cors_preflight_for_a_configured_origin() -> None:
    app = create_app(Settings(jwt_secret=SECRET, cors_origins="http://localhost:5173"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        allowed = await client.options(
            "/graphql",
            headers={
                "Origin": "http://localhost:5173",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        other = await client.options(
            "/graphql",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-origin" not in other.headers


async def test_no_cors_headers_unless_configured() -> None:
    app = create_app(Settings(jwt_secret=SECRET))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.options(
            "/graphql",
            headers={"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST"},
        )
    assert "access-control-allow-origin" not in response.headers
