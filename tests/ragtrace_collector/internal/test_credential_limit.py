"""The failed-credential limiter shared by every listener: per address, bounded, and not reset by rotation."""

from __future__ import annotations

from ragtrace_collector.internal.credential_limit import CredentialLimiter


def _clock(start: float = 1000.0) -> list[float]:
    return [start]


def test_the_limit_is_per_address_and_stays_bounded() -> None:
    now = _clock()
    limiter = CredentialLimiter(2, 60.0, max_addresses=100, max_total_failures=1_000_000, clock=lambda: now[0])
    for i in range(10_000):
        limiter.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(limiter) <= 100
    limiter.failed("192.0.2.1")
    assert limiter.retry_after("192.0.2.1") is None
    limiter.failed("192.0.2.1")
    assert limiter.retry_after("192.0.2.1") == 60
    now[0] += 30.5
    assert limiter.retry_after("192.0.2.1") == 30
    now[0] += 30
    assert limiter.retry_after("192.0.2.1") is None
    # IPv6: one /64 is one client (an attacker holds the whole prefix)
    limiter.failed("2001:db8::1")
    limiter.failed("2001:db8::ffff:2")
    assert limiter.retry_after("2001:db8::3") is not None
    assert limiter.retry_after("2001:db8:0:1::1") is None
    # a success forgets the address's failures
    limiter.failed("198.51.100.7")
    limiter.succeeded("198.51.100.7")
    limiter.failed("198.51.100.7")
    assert limiter.retry_after("198.51.100.7") is None


def test_rotating_addresses_never_free_a_limited_one() -> None:
    """D12: max_addresses + 1 (or + 10,000) other addresses failing must not evict a limited address."""
    now = _clock()
    limiter = CredentialLimiter(3, 300.0, max_addresses=5, max_total_failures=1_000_000, clock=lambda: now[0])
    for _ in range(3):
        limiter.failed("203.0.113.1")
    assert limiter.retry_after("203.0.113.1") is not None
    for i in range(10_000):
        limiter.failed(f"10.0.{i // 256}.{i % 256}")
        now[0] += 0.001
    assert limiter.retry_after("203.0.113.1") is not None
    assert len(limiter) <= 5


def test_a_table_full_of_limited_addresses_falls_back_to_the_global_window() -> None:
    now = _clock()
    limiter = CredentialLimiter(2, 300.0, max_addresses=4, max_total_failures=50, clock=lambda: now[0])
    limiter.succeeded("192.0.2.50")  # a client that exported with the right token a moment ago
    for i in range(4):  # the table fills with limited addresses
        limiter.failed(f"10.0.0.{i}")
        limiter.failed(f"10.0.0.{i}")
    for i in range(100):  # each new address is untracked: without the global window, a guess each for ever
        limiter.failed(f"10.1.0.{i}")
    assert limiter.retry_after("10.9.9.9") is not None  # a fresh rotating address is refused
    assert limiter.retry_after("192.0.2.50") is None  # the client that presented a good token goes on
    now[0] += 301
    assert limiter.retry_after("10.9.9.9") is None  # the window drained


def test_full_table_scan_is_not_repeated_per_guess() -> None:
    """Once every tracked address is limited, a new guesser costs no scan until one could be freed."""
    now = _clock()
    limiter = CredentialLimiter(1, 300.0, max_addresses=1000, max_total_failures=10**9, clock=lambda: now[0])
    for i in range(1000):
        limiter.failed(f"10.0.{i // 256}.{i % 256}")
    limiter.failed("10.200.0.1")  # scans once, finds none to free
    assert limiter._full_until > now[0]
    for i in range(1000):
        limiter.failed(f"10.201.{i // 256}.{i % 256}")  # no scan: constant time each
    assert len(limiter) == 1000
