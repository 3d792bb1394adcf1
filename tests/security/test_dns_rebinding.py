"""DNS rebinding (issue 33, D1): with the defaults (loopback, no token) a web page whose name was rebound to
127.0.0.1 must not read the explorer API, ``/metrics`` or anything else from the collector's listeners.

A real collector (``ragtrace-collector serve``) is attacked over real sockets: requests naming a host the
collector is not known by get 421, cross-site ``Origin`` gets 403, both counted; and in real Chromium, through
:class:`tests.support.rebinding.RebindingProxy`, the attacker's page reads nothing. The same page against a
collector told the attacker's name (``listen.allowed_hosts``) does read the records: the harness reproduces the
attack, so the refusal is what stops it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.browser import headless_chromium, wait_shown
from tests.support.explorer_stack import Fed, served_collector
from tests.support.net import free_port
from tests.support.rebinding import NAME, RebindingProxy

# What the attacker's page does once the name points at 127.0.0.1: read same-origin, show what it got (a real
# attacker would post it home).
ATTACK_PAGE = """<!doctype html><html><body><pre id="out">reading</pre><script>
async function grab(path) {
  try { const r = await fetch(path); return {path, status: r.status, body: (await r.text()).slice(0, 4000)}; }
  catch (e) { return {path, status: 0, body: String(e)}; }
}
(async () => {
  const got = [await grab('/api/v1/records?limit=5'), await grab('/metrics'), await grab('/explorer/')];
  document.getElementById('out').textContent = 'done ' + JSON.stringify(got);
})();
</script></body></html>"""


def _count(fed: Fed, listener: str, reason: str) -> float:
    text = httpx.get(fed.base + "/metrics", timeout=10).text
    for line in text.splitlines():
        labelled = f'listener="{listener}"' in line and f'reason="{reason}"' in line
        if line.startswith("ragtrace_http_requests_refused_total{") and labelled:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    """The collector as a new user runs it: loopback, no token (the record list itself is what a page would steal)."""
    with served_collector(tmp_path_factory.mktemp("rebinding"), token=None) as fed:
        yield fed


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_foreign_host_is_misdirected_on_every_http_listener(fed: Fed) -> None:
    metrics_port, otlp_port = _port(fed.base), _port(fed.otlp)
    before = (_count(fed, "metrics", "host"), _count(fed, "otlp_http", "host"))
    for base, port, paths in (
        (fed.base, metrics_port, ["/api/v1/records", "/metrics", "/explorer/", "/readyz"]),
        (fed.otlp, otlp_port, ["/healthz", "/readyz"]),
    ):
        for path in paths:
            r = httpx.get(base + path, headers={"Host": f"{NAME}:{port}"}, timeout=10)
            assert r.status_code == 421, (path, r.status_code, r.text[:200])
            assert "allowed_hosts" in r.text and "ragtrace_" not in r.text
    posted = httpx.post(
        fed.otlp + "/v1/traces",
        content=b"{}",
        headers={"Host": f"{NAME}:{otlp_port}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert posted.status_code == 421
    assert _count(fed, "metrics", "host") == before[0] + 4
    assert _count(fed, "otlp_http", "host") == before[1] + 3


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "app.localhost", "[::1]"])
def test_known_names_are_answered(fed: Fed, host: str) -> None:
    port = _port(fed.base)
    r = httpx.get(fed.base + "/api/v1/records", headers={"Host": f"{host}:{port}"}, timeout=10)
    assert r.status_code == 200 and "records" in r.json()
    posted = httpx.post(
        fed.otlp + "/v1/traces",
        content=b"{}",
        headers={"Host": f"{host}:{_port(fed.otlp)}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert posted.status_code == 200


def test_cross_site_origin_is_forbidden(fed: Fed) -> None:
    before = _count(fed, "metrics", "origin")
    for origin in (f"http://{NAME}:{_port(fed.base)}", "https://attacker.example", "null"):
        r = httpx.get(fed.base + "/api/v1/records", headers={"Origin": origin}, timeout=10)
        assert r.status_code == 403, (origin, r.status_code)
    posted = httpx.post(
        fed.otlp + "/v1/traces",
        content=b"{}",
        headers={"Origin": "https://attacker.example", "Content-Type": "application/json"},
        timeout=10,
    )
    assert posted.status_code == 403
    assert _count(fed, "metrics", "origin") == before + 3
    same_site = httpx.get(fed.base + "/api/v1/records", headers={"Origin": fed.base}, timeout=10)
    assert same_site.status_code == 200


def test_grpc_listener_answers_no_http1_request(tmp_path: Path) -> None:
    """Browsers speak HTTP/1.1 or TLS HTTP/2 only; the OTLP/gRPC port (cleartext HTTP/2) gives a page nothing."""
    grpc_port = free_port()
    with served_collector(tmp_path, token=None, listen={"grpc_port": grpc_port}):
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=5) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: {NAME}:{grpc_port}\r\n\r\n".encode())
            try:
                reply = s.recv(4096)
            except (TimeoutError, ConnectionResetError):
                reply = b""
        assert not reply.startswith(b"HTTP/1"), reply[:200]


def _attack(port: int) -> list[dict]:
    """Open the attacker's page in real Chromium, its name rebound to 127.0.0.1 in front of ``port``."""
    with RebindingProxy(port, ATTACK_PAGE) as proxy:
        with headless_chromium(1000, 800, flags=[f"--host-resolver-rules={proxy.resolver_rule}"]) as driver:
            driver.get(proxy.page_url)
            shown = wait_shown(driver, "#out", "done ", timeout=60)
        assert proxy.forwarded, "the page's requests never reached the collector"
        assert all(f"Host: {NAME}:{proxy.port}".encode() in head for head in proxy.forwarded)
    return json.loads(shown.split("done ", 1)[1])


def test_rebound_page_reads_nothing_in_chromium(fed: Fed) -> None:
    got = _attack(_port(fed.base))
    assert [g["status"] for g in got] == [421, 421, 421], got
    assert not any("ragtrace_" in g["body"] or '"records"' in g["body"] for g in got), got


def test_same_page_reads_records_where_its_name_is_allowed(tmp_path: Path) -> None:
    """The control: told the attacker's name, the collector answers, and the page reads the records and
    metrics, so the test above fails without the check."""
    with served_collector(tmp_path, token=None, listen={"allowed_hosts": [NAME]}) as fed:
        got = _attack(_port(fed.base))
    assert [g["status"] for g in got[:2]] == [200, 200], got
    assert '"records"' in got[0]["body"] and "ragtrace_" in got[1]["body"]
