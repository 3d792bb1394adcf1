"""Guessing the explorer's token: each client address gets a few wrong tries per window, then 429.

Over real loopback sockets against a real ``ragtrace-collector serve`` (its explorer on the /metrics port,
``auth.bearer_token`` set). Linux routes all of 127.0.0.0/8 to loopback, so a client bound to 127.0.0.2 is
"another address" to the server. The login form and the API's bearer header share one count per address: a
brute force cannot move from one to the other.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.explorer_stack import TOKEN, Fed, served_collector

LIMIT = 3  # auth.max_failed_attempts
WINDOW = 4.0  # auth.failed_attempt_window_seconds


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    auth = {"max_failed_attempts": LIMIT, "failed_attempt_window_seconds": WINDOW}
    with served_collector(tmp_path_factory.mktemp("login"), auth=auth) as running:
        yield running


def client(fed: Fed, address: str) -> httpx.Client:
    """An HTTP client whose connections come from ``address`` (no cookies kept between requests)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=fed.base, transport=transport, timeout=10, follow_redirects=False)


def login(c: httpx.Client, token: str) -> httpx.Response:
    c.cookies.clear()
    return c.post("/explorer/login", data={"token": token, "next": "/explorer/"})


def api(c: httpx.Client, token: str) -> httpx.Response:
    return c.get("/api/v1/records", headers={"Authorization": f"Bearer {token}"})


def counted(fed: Fed, via: str, status: str) -> float:
    text = httpx.get(fed.base + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ragtrace_auth_attempts_total" and sample.labels == {
                "via": via,
                "status": status,
            }:
                return sample.value
    return 0.0


def retry_after(response: httpx.Response) -> int:
    value = int(response.headers["Retry-After"])
    assert 1 <= value <= math.ceil(WINDOW), value
    return value


def test_brute_force_on_the_login_form_gets_429_then_the_window_frees_it(served: Fed):
    with client(served, "127.0.0.1") as attacker, client(served, "127.0.0.2") as colleague:
        for i in range(LIMIT):
            wrong = login(attacker, f"guess-{i}")
            assert wrong.status_code == 401, (i, wrong.status_code)
        limited = login(attacker, "guess-next")
        assert limited.status_code == 429
        wait = retry_after(limited)
        assert "Too many failed sign-ins" in limited.text and limited.headers["Cache-Control"] == "no-store"
        # while limited, even the right token is refused from that address (else 429 vs 303 tells a hit)
        assert login(attacker, TOKEN).status_code == 429
        assert api(attacker, TOKEN).status_code == 429
        # the address is the socket's peer: a forwarding header sent by the client changes nothing
        spoofed = attacker.post(
            "/explorer/login", data={"token": "guess-x"}, headers={"X-Forwarded-For": "203.0.113.9"}
        )
        assert spoofed.status_code == 429
        # another address is not locked out by the attacker
        signed = login(colleague, TOKEN)
        assert signed.status_code == 303 and signed.headers["Location"] == "/explorer/"
        assert api(colleague, TOKEN).status_code == 200
        # a browser already signed in (valid cookie) keeps working from the limited address
        attacker.cookies.set("ragtrace_explorer", signed.cookies["ragtrace_explorer"])
        assert attacker.get("/explorer/").status_code == 200
        # after the window the right token works again
        time.sleep(wait + 0.2)
        again = login(attacker, TOKEN)
        assert again.status_code == 303, again.text
    assert counted(served, "login", "unauthenticated") >= LIMIT
    assert counted(served, "login", "rate_limited") >= 2
    assert counted(served, "bearer", "rate_limited") >= 1
    assert counted(served, "login", "ok") >= 2


def test_brute_force_through_the_api_shares_the_count(served: Fed):
    with client(served, "127.0.0.3") as attacker:
        for i in range(LIMIT):
            assert api(attacker, f"guess-{i}").status_code == 401
        limited = api(attacker, "guess-next")
        assert limited.status_code == 429
        retry_after(limited)
        assert "error" in limited.json()
        assert login(attacker, TOKEN).status_code == 429  # the form does not reopen what the API used up
        assert attacker.get("/api/v1/records").status_code == 401  # no credentials: no guess, plain 401
    assert counted(served, "bearer", "unauthenticated") >= LIMIT


@pytest.mark.parametrize(
    "body", [b"\xff\xfe=\xff", b"token=%ED%A0%80&next=%ED%A0%80", b"token=%FF"], ids=["raw", "surrogate", "invalid"]
)
def test_a_login_form_that_is_no_utf_8_is_a_wrong_token_not_a_500(served: Fed, body: bytes):
    # aiohttp's form parser raised UnicodeDecodeError on raw non-UTF-8 bytes: a 500 and a traceback for anyone
    with client(served, "127.0.5.1") as c:
        reply = c.post("/explorer/login", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert reply.status_code in (401, 429), reply.status_code
