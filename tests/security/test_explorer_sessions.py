"""Explorer sign-ins are sessions (issue 33, D20), against a real ``ragtrace-collector serve``.

The cookie was a fixed HMAC of the token: the same for every sign-in, valid for ever, no sign-out, never
``Secure``. Now a sign-in is a random id the collector holds: it expires (``auth.session_hours``), sign-out
revokes it at once (a copied cookie stops working), and it is ``Secure`` where the explorer is reached over TLS.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.explorer_stack import TOKEN, Fed, served_collector

LIFETIME_HOURS = 3 / 3600  # three seconds


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    with served_collector(tmp_path_factory.mktemp("sessions"), auth={"session_hours": LIFETIME_HOURS}) as fed:
        yield fed


def _sign_in(fed: Fed, headers: dict[str, str] | None = None) -> httpx.Response:
    reply = httpx.post(fed.base + "/explorer/login", data={"token": TOKEN}, headers=headers or {}, timeout=10)
    assert reply.status_code == 303, reply.text
    return reply


def _reads(fed: Fed, session: str) -> bool:
    reply = httpx.get(fed.base + "/explorer/", cookies={"ragtrace_explorer": session}, timeout=10)
    return reply.status_code == 200


def test_each_sign_in_is_a_new_random_session_with_strict_cookie(fed: Fed) -> None:
    first, second = _sign_in(fed), _sign_in(fed)
    a, b = first.cookies["ragtrace_explorer"], second.cookies["ragtrace_explorer"]
    assert a != b and len(a) >= 40 and TOKEN not in a
    header = first.headers["Set-Cookie"].lower()
    assert "httponly" in header and "samesite=strict" in header and "max-age=3" in header
    assert "secure" not in header.replace("samesite", "")  # plain HTTP: a Secure cookie would never come back
    assert _reads(fed, a) and _reads(fed, b)


def test_secure_over_tls(fed: Fed) -> None:
    behind_tls = _sign_in(fed, {"X-Forwarded-Proto": "https"})
    assert "; secure" in behind_tls.headers["Set-Cookie"].lower()


def test_sign_out_revokes_the_session_everywhere(fed: Fed) -> None:
    session = _sign_in(fed).cookies["ragtrace_explorer"]
    other = _sign_in(fed).cookies["ragtrace_explorer"]
    out = httpx.post(fed.base + "/explorer/logout", cookies={"ragtrace_explorer": session}, timeout=10)
    assert out.status_code == 303 and out.headers["Location"].endswith("/explorer/login")
    assert 'ragtrace_explorer=""' in out.headers["Set-Cookie"] or "max-age=0" in out.headers["Set-Cookie"].lower()
    assert not _reads(fed, session)  # a copy of the cookie kept elsewhere stops working too
    assert _reads(fed, other)  # other sign-ins go on


def test_sessions_expire(fed: Fed) -> None:
    session = _sign_in(fed).cookies["ragtrace_explorer"]
    assert _reads(fed, session)
    deadline = time.monotonic() + 30
    while _reads(fed, session):
        assert time.monotonic() < deadline, "the session never expired"
        time.sleep(0.5)
    assert _reads(fed, _sign_in(fed).cookies["ragtrace_explorer"])  # signing in again works
