"""The host names the listeners answer (DNS-rebinding defence): parsing Host/Origin and the allowed names."""

from __future__ import annotations

import pytest

from ragtrace_collector.internal.hosts import HOST, ORIGIN, HostPolicy, host_name, is_loopback


@pytest.mark.parametrize(
    "header, name",
    [
        ("collector:9464", "collector"),
        ("Collector.Example.COM.", "collector.example.com"),
        ("[::1]:4318", "::1"),
        ("[::1]", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("::1", "::1"),
    ],
)
def test_host_name(header: str, name: str) -> None:
    assert host_name(header) == name


def test_defaults_answer_ip_literals_and_localhost_only() -> None:
    policy = HostPolicy()
    for ok in ("127.0.0.1:9464", "10.1.2.3", "[::1]:1", "localhost", "LOCALHOST:9464", "grafana.localhost:3000"):
        assert policy.refusal(ok, None) is None, ok
    for bad in ("rebind.test:9464", "localhost.attacker.example", "127.0.0.1.nip.io", "example.com"):
        assert policy.refusal(bad, None) == HOST, bad
    assert policy.refusal(None, None) is None  # HTTP/1.0: no browser sends a request without Host


def test_configured_names_suffixes_and_wildcard() -> None:
    policy = HostPolicy("0.0.0.0", ["collector", ".corp.example"])
    assert policy.allows("collector") and policy.allows("corp.example") and policy.allows("a.b.corp.example")
    assert not policy.allows("collector.attacker.example") and not policy.allows("evilcorp.example")
    assert HostPolicy("0.0.0.0", ["*"]).refusal("anything.example", "https://else.example") is None


def test_bound_name_is_answered() -> None:
    assert HostPolicy("ragtrace.internal").allows("ragtrace.internal")
    assert not HostPolicy("0.0.0.0").allows("0.0.0.0.attacker.example")


def test_origin_must_name_an_answered_host() -> None:
    policy = HostPolicy()
    assert policy.refusal("127.0.0.1:9464", "http://127.0.0.1:9464") is None
    assert policy.refusal("127.0.0.1:9464", "http://localhost:3000") is None  # a local Grafana
    for origin in ("https://attacker.example", "null", "not a url", "http://rebind.test:9464"):
        assert policy.refusal("127.0.0.1:9464", origin) == ORIGIN, origin
    # "null": a form posted under Referrer-Policy no-referrer (its own page) or a sandboxed/file page (another)
    assert policy.refusal("127.0.0.1:9464", "null", "same-origin") is None
    assert policy.refusal("127.0.0.1:9464", "null", "cross-site") == ORIGIN


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("collector", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
