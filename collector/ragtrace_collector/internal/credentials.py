"""Who may do what: the collector's bearer credentials, checked the same way by every listener.

Three scopes, each with its own tokens (``auth.ingest_tokens``, ``auth.read_tokens``, ``auth.review_tokens``;
several of each, so one can be rotated while the other still works): *ingest* sends spans (the OTLP receivers),
*read* reads records (the explorer's pages and API), *review* records human verdicts and reads. Every app holds an
ingest token, so an ingest token reads nothing. ``auth.bearer_token`` is the one-token setup: it holds every scope.
A scope with no token at all is open (the loopback default).

A credential is checked in constant time against every configured token, and each wrong one is a guess counted
per client address by one :class:`~ragtrace_collector.internal.credential_limit.CredentialLimiter` shared by all
listeners and transports; an address past its limit is refused before its credential is looked at. Every check is
counted in ``ragtrace_auth_attempts_total{via,status}``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from enum import Enum

from prometheus_client import CollectorRegistry, Counter

from ragtrace_collector.config import AuthConfig
from ragtrace_collector.internal.credential_limit import CredentialLimiter


class Scope(str, Enum):
    INGEST = "ingest"
    READ = "read"
    REVIEW = "review"


class Outcome(str, Enum):
    """A check's result (label ``status`` of ``ragtrace_auth_attempts_total``)."""

    OK = "ok"
    MISSING = "missing"  # no credential sent: not a guess
    UNAUTHENTICATED = "unauthenticated"  # a wrong credential: a guess, counted against the address
    FORBIDDEN = "forbidden"  # a right credential without the scope asked for
    RATE_LIMITED = "rate_limited"  # the address is past its limit: nothing was checked


#: Where a credential came from (label ``via``).
VIA_OTLP_HTTP, VIA_OTLP_GRPC, VIA_LOGIN, VIA_BEARER = "otlp_http", "otlp_grpc", "login", "bearer"


def _scopes_by_token(auth: AuthConfig) -> dict[bytes, frozenset[Scope]]:
    table: dict[bytes, set[Scope]] = {}

    def grant(tokens: Iterable[str], *scopes: Scope) -> None:
        for token in tokens:
            table.setdefault(token.encode(), set()).update(scopes)

    grant([auth.bearer_token] if auth.bearer_token else [], *Scope)
    grant(auth.ingest_tokens, Scope.INGEST)
    grant(auth.read_tokens, Scope.READ)
    grant(auth.review_tokens, Scope.REVIEW, Scope.READ)
    return {token: frozenset(scopes) for token, scopes in table.items()}


def open_scopes(auth: AuthConfig) -> list[Scope]:
    """The scopes no configured token guards (anyone who reaches the listener has them)."""
    guarded = set().union(*_scopes_by_token(auth).values())
    return [s for s in Scope if s not in guarded]


class CredentialGuard:
    """Checks presented credentials for a scope (see the module docstring); one per collector process."""

    def __init__(self, auth: AuthConfig | None = None, registry: CollectorRegistry | None = None) -> None:
        auth = auth if auth is not None else AuthConfig()
        self._tokens = _scopes_by_token(auth)
        self._open = frozenset(open_scopes(auth))
        self.limiter = CredentialLimiter(
            auth.max_failed_attempts,
            auth.failed_attempt_window_seconds,
            auth.max_tracked_addresses,
            auth.max_failed_attempts_total,
        )
        self.attempts = Counter(
            "ragtrace_auth_attempts",
            "Credentials checked, by where they came from (otlp_http, otlp_grpc, login, bearer) and outcome (ok,"
            " missing, unauthenticated, forbidden, rate_limited: the address sent auth.max_failed_attempts wrong"
            " ones in the window).",
            ("via", "status"),
            registry=registry if registry is not None else CollectorRegistry(),
        )

    def required(self, scope: Scope) -> bool:
        """Whether ``scope`` needs a credential at all."""
        return scope not in self._open

    def scopes_of(self, token: str) -> frozenset[Scope]:
        """The scopes ``token`` holds (none for a wrong one), compared in constant time against every token."""
        try:
            given = token.strip().encode()
        except UnicodeEncodeError:  # a header that is not text (aiohttp hands raw bytes over as surrogates)
            given = b""
        found: frozenset[Scope] = frozenset()
        for known, scopes in self._tokens.items():
            if hmac.compare_digest(given, known):
                found = scopes
        return found

    def retry_after(self, address: str | None) -> int | None:
        """Seconds until ``address`` may present a credential again (None: now)."""
        return self.limiter.retry_after(address)

    def check_token(self, token: str | None, scope: Scope, address: str | None, via: str) -> Outcome:
        """Check a bare token (the login form's) for ``scope`` from ``address``, limited and counted."""
        outcome = self._check(token, scope, address)
        self.attempts.labels(via, outcome.value).inc()
        return outcome

    def check_header(self, header: str | None, scope: Scope, address: str | None, via: str) -> Outcome:
        """Check an ``Authorization`` header (``Bearer`` matched case-insensitively, RFC 7235 §2.1)."""
        if not self.required(scope):
            return Outcome.OK
        if not header or not header.strip():
            return self.check_token(None, scope, address, via)
        method, _, credentials = header.strip().partition(" ")
        token = credentials if method.lower() == "bearer" else ""
        return self.check_token(token or "\0", scope, address, via)

    def _check(self, token: str | None, scope: Scope, address: str | None) -> Outcome:
        if not self.required(scope):
            return Outcome.OK
        if token is None or not token.strip():
            return Outcome.MISSING
        if self.limiter.retry_after(address) is not None:  # before the token: a hit must look like a miss
            return Outcome.RATE_LIMITED
        scopes = self.scopes_of(token)
        if not scopes:
            self.limiter.failed(address)
            return Outcome.UNAUTHENTICATED
        self.limiter.succeeded(address)
        return Outcome.OK if scope in scopes else Outcome.FORBIDDEN
