"""Settings for a load balancer in front (proxies, drain, pings) and their uvicorn options."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest
import uvicorn
from pydantic import ValidationError

from chorus.cli.process import load_balancer_options, transport_options
from chorus.drain import Drain, DrainingServer
from chorus.middleware import CloseWhileDraining, ForwardedClient, forwarded_address
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


def test_an_idle_connection_is_kept_longer_than_clients_keep_it() -> None:
    """The client closes an idle connection first: a server that closes it just as the
    client reuses it fails that request (httpx ``ReadError``, "Connection reset by peer",
    reproduced at 4.999 s idle against uvicorn's 5 s, the old default). httpx keeps one
    5 s, undici 4 s, aiohttp 15 s (its ``keepalive_timeout``)."""
    kept = _settings().keep_alive_timeout_s
    assert kept > httpx.Limits().keepalive_expiry
    assert kept > 15.0
    assert transport_options(_settings())["timeout_keep_alive"] == kept


def test_trusted_proxies_are_networks_with_their_ipv4_mapped_form_read_by_chorus() -> None:
    settings = _settings(trusted_proxies="10.0.0.0/8, 192.0.2.1,fd00::/8")
    # uvicorn's proxy headers stay off: ForwardedClient reads them (issue 30).
    assert load_balancer_options(settings)["proxy_headers"] is False
    assert settings.trusted_proxy_list == (
        "10.0.0.0/8",
        "::ffff:a00:0/104",
        "192.0.2.1/32",
        "::ffff:c000:201/128",
        "fd00::/8",
    )
    assert _settings(trusted_proxies="*").trusted_proxy_list == ("*",)


@pytest.mark.parametrize(
    ("item", "address"),
    [
        ("203.0.113.7", "203.0.113.7"),
        (" 203.0.113.7:4711 ", "203.0.113.7"),
        ("[2001:db8::7]:4711", "2001:db8::7"),
        ("[2001:DB8::7]", "2001:db8::7"),
        ("::ffff:10.0.0.5", "10.0.0.5"),  # IPv4-mapped: the IPv4 client
        ("[::ffff:127.0.0.1]:80", "127.0.0.1"),
        ("203.0.113.7:65535", "203.0.113.7"),
        ("203.0.113.7:65536", None),  # no such port
        ("[2001:db8::7]:99999", None),
        ("evil-host", None),
        ("unknown", None),
        ("_hidden", None),
        ("fe80::1%eth0", None),
        ("[fe80::1%eth0]:80", None),
        ("203.0.113.7:", None),
        ("203.0.113.7:http", None),
        ("[203.0.113.7]:80", None),
        ("[2001:db8::7]80", None),
        ("1" * 5_000, None),
        ('1.2.3.4"}{', None),
        ("", None),
    ],
)
def test_only_an_ip_address_is_a_forwarded_address(item: str, address: str | None) -> None:
    assert forwarded_address(item) == address


def test_the_client_is_read_from_the_right_and_stops_at_what_is_not_an_address() -> None:
    proxies = ForwardedClient(lambda *a: None, ("10.0.0.0/8",))  # type: ignore[arg-type]
    assert proxies.client_of("198.51.100.1, 203.0.113.7, 10.1.2.3") == "203.0.113.7"
    assert proxies.client_of("10.9.9.9, 10.1.2.3") == "10.9.9.9"  # all trusted: the leftmost
    assert proxies.client_of("203.0.113.7, evil, 10.1.2.3") == "10.1.2.3"
    assert proxies.client_of("203.0.113.7, evil") is None  # the TCP peer stays
    everyone = ForwardedClient(lambda *a: None, ("*",))  # type: ignore[arg-type]
    assert everyone.client_of("198.51.100.1, 203.0.113.7") == "198.51.100.1"
    assert everyone.client_of("evil, 203.0.113.7") == "203.0.113.7"


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


def test_unknown_chorus_variables_are_named_with_a_close_setting() -> None:
    from chorus.settings import unknown_variables

    lines = unknown_variables(
        {
            "CHORUS_RATE_LIMT_PER_MINUTE": "5",  # a typo
            "CHORUS_port": "9",  # read case-insensitively
            "CHORUS_NOTHING_LIKE_IT": "1",
            "CHORUS_PORT": "8000",  # a setting
            "CHORUS_TEST_POSTGRES_URL": "x",  # the tests'
            "CHORUS_TOKEN": "t",  # the README's watch.mjs
            "PATH": "/bin",
        }
    )
    assert lines == [
        "CHORUS_NOTHING_LIKE_IT is not a Chorus setting and is ignored",
        "CHORUS_RATE_LIMT_PER_MINUTE is not a Chorus setting and is ignored "
        "(did you mean CHORUS_RATE_LIMIT_PER_MINUTE?)",
        "CHORUS_port is read as CHORUS_PORT: write setting names in upper case",
    ]
