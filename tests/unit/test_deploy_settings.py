"""Settings for a load balancer in front (proxies, drain, pings) and their uvicorn options."""

from __future__ import annotations

import asyncio
import signal

import pytest
import uvicorn
from pydantic import ValidationError

from chorus.cli.process import load_balancer_options
from chorus.drain import Drain, DrainingServer
from chorus.middleware import CloseWhileDraining
from chorus.settings import Settings


def _settings(**env: str) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[arg-type]


def test_by_default_no_proxy_is_trusted_and_sockets_are_pinged_every_20_s() -> None:
    options = load_balancer_options(_settings())
    assert options["proxy_headers"] is False  # uvicorn alone would trust 127.0.0.1
    assert options["ws_ping_interval"] == 20.0
    assert options["ws_ping_timeout"] == 20.0
    assert options["timeout_graceful_shutdown"] == 10.0
    assert _settings().drain_s == 5.0


def test_trusted_proxies_become_uvicorn_networks_with_their_ipv4_mapped_form() -> None:
    options = load_balancer_options(_settings(trusted_proxies="10.0.0.0/8, 192.0.2.1,fd00::/8"))
    assert options["proxy_headers"] is True
    assert options["forwarded_allow_ips"] == [
        "10.0.0.0/8",
        "::ffff:a00:0/104",
        "192.0.2.1/32",
        "::ffff:c000:201/128",
        "fd00::/8",
    ]
    assert load_balancer_options(_settings(trusted_proxies="*"))["forwarded_allow_ips"] == ["*"]


def test_no_pings_is_zero() -> None:
    assert load_balancer_options(_settings(ws_ping_s="0"))["ws_ping_interval"] is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("trusted_proxies", "10.0.0.1/8", "did you mean 10.0.0.0/8"),
        ("trusted_proxies", "proxy.internal", "not an IP address or network"),
        ("trusted_proxies", "10.0.0.0/33", "not an IP address or network"),
        ("trusted_proxies", "*, 10.0.0.1", "goes alone"),
        ("drain_s", "-1", "greater than or equal to 0"),
        ("drain_s", "3601", "less than or equal to 3600"),
        ("drain_s", "inf", "finite"),
        ("shutdown_timeout_s", "0", "greater than or equal to 0.1"),
        ("ws_ping_s", "-0.5", "greater than or equal to 0"),
        ("ws_ping_timeout_s", "0", "greater than or equal to 0.1"),
        ("ws_ping_s", "0.1", "0 (no pings) or at least 0.25 seconds"),
    ],
)
def test_bad_values_are_refused_with_the_reason(field: str, value: str, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        _settings(**{field: value})
    assert message in str(refused.value)


async def test_close_while_draining_adds_connection_close_only_once_draining() -> None:
    sent: list[dict[str, object]] = []

    async def app(scope: object, receive: object, send: object) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"connection", b"keep-alive")],
            }
        )  # type: ignore[operator]

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    drain = Drain()
    wrapped = CloseWhileDraining(app, drain)  # type: ignore[arg-type]
    await wrapped({"type": "http"}, None, send)  # type: ignore[arg-type]
    drain.start()
    await wrapped({"type": "http"}, None, send)  # type: ignore[arg-type]
    assert sent[0]["headers"] == [(b"connection", b"keep-alive")]
    assert sent[1]["headers"] == [(b"connection", b"close")]


async def test_sigterm_drains_for_drain_s_and_sigint_stops_at_once() -> None:
    config = uvicorn.Config(app=None)  # type: ignore[arg-type]
    drain = Drain()
    server = DrainingServer(config, drain, drain_s=0.3)
    server.handle_exit(signal.SIGTERM, None)
    assert drain.draining
    assert not server.should_exit
    assert not await server.on_tick(0)
    await asyncio.sleep(0.35)
    assert await server.on_tick(1)

    stopped = DrainingServer(config, Drain(), drain_s=30)
    stopped.handle_exit(signal.SIGINT, None)
    assert stopped.drain.draining
    assert stopped.should_exit
