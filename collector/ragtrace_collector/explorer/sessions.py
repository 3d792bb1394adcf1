"""Explorer sign-ins: a random id in the browser's cookie, its scopes and expiry kept by the collector.

A cookie derived from the token (the first design) never expires and cannot be revoked short of changing the
token. Here a sign-in lasts ``auth.session_hours``, ends at once on sign-out, and ends for everyone when the
collector restarts (sessions are held in memory: nothing to steal from disk). At most ``max_sessions`` are
held; past it the oldest sign-in ends. Used from the event loop only, so no lock.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from ragtrace_collector.internal.credentials import Scope

MAX_SESSIONS = 10_000


class Sessions:
    """``start`` a sign-in with the scopes of the token given; ``scopes`` of a cookie's id; ``end`` one."""

    def __init__(
        self, lifetime_seconds: float, max_sessions: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lifetime = lifetime_seconds
        self.max_sessions = max(1, max_sessions)
        self.clock = clock
        self._held: OrderedDict[str, tuple[float, frozenset[Scope]]] = OrderedDict()  # id -> (expiry, scopes)

    def __len__(self) -> int:
        return len(self._held)

    def start(self, scopes: frozenset[Scope]) -> str:
        """A new session id (256 random bits) holding ``scopes`` until the lifetime passes."""
        session_id = secrets.token_urlsafe(32)
        self._held[session_id] = (self.clock() + self.lifetime, scopes)
        while len(self._held) > self.max_sessions:
            self._held.popitem(last=False)
        return session_id

    def scopes(self, session_id: str | None) -> frozenset[Scope]:
        """The scopes of a live session (none for an unknown, ended or expired one)."""
        if not session_id:
            return frozenset()
        held = self._held.get(session_id)
        if held is None:
            return frozenset()
        expiry, scopes = held
        if self.clock() >= expiry:
            del self._held[session_id]
            return frozenset()
        return scopes

    def end(self, session_id: str | None) -> None:
        if session_id:
            self._held.pop(session_id, None)
