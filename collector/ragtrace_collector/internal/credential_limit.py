"""Failed credentials per client address, for every listener: a few wrong guesses per window, then 429.

A token can be guessed through any listener that checks one: OTLP/HTTP, OTLP/gRPC, the explorer's login form and
its API's ``Authorization: Bearer`` header. All of them count here, per client address (an IPv6 address by its
/64, the smallest block one client is usually given), so a guesser cannot move from one to another. An address
with ``max_failures`` failures inside the last ``window_seconds`` is limited until the oldest of them leaves the
window: every credential it sends meanwhile, the right one too, is refused (were the right one let through, a
200 against a 429 would tell a hit).

Rotating addresses: at most ``max_addresses`` addresses are tracked, and a limited one is never forgotten to make
room (forgetting it would free it). When every tracked address is limited, a new one is not tracked, but every
failure also counts in one window for all addresses together: past ``max_total_failures`` there, an address that
has not presented a good credential within the window is refused too, until the window drains. Clients that
signed in or exported with the right credential lately go on (they are remembered, ``max_addresses`` of them).

Used from the event loop only (the listeners' handlers run there), so it takes no lock.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable


def client_key(address: str | None) -> str:
    """The key an address is counted under: IPv4 as is, IPv6 by its /64 (an IPv4-mapped one as IPv4)."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


class CredentialLimiter:
    """``failed``/``succeeded`` record a credential's outcome; ``retry_after`` says whether to refuse the next."""

    def __init__(
        self,
        max_failures: int,
        window_seconds: float,
        max_addresses: int,
        max_total_failures: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max(1, max_failures)
        self.window = window_seconds
        self.max_addresses = max(1, max_addresses)
        self.clock = clock
        # key -> times of its latest failures (oldest first); keys least recently failed first
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._all_failures: deque[float] = deque(maxlen=max(1, max_total_failures))
        self._good: OrderedDict[str, float] = OrderedDict()  # key -> when it last presented a good credential
        self._full_until = 0.0  # every tracked address is limited until then (spares a scan per new guesser)

    def __len__(self) -> int:
        return len(self._failures)

    def retry_after(self, address: str | None) -> int | None:
        """Whole seconds until ``address`` may try again, or None when it may try now."""
        now = self.clock()
        key = client_key(address)
        waits = [self._limited_for(self._failures.get(key), self.max_failures, now)]
        if not self._recently_good(key, now):
            waits.append(self._limited_for(self._all_failures, self._all_failures.maxlen or 1, now))
        left = max((w for w in waits if w is not None), default=None)
        return math.ceil(left) if left is not None else None

    def failed(self, address: str | None) -> None:
        now = self.clock()
        self._all_failures.append(now)
        key = client_key(address)
        times = self._failures.get(key)
        if times is None:
            if not self._make_room(now):
                return  # every tracked address is limited: this one is left to the global window
            times = self._failures[key] = deque(maxlen=self.max_failures)
        else:
            self._failures.move_to_end(key)
        times.append(now)

    def succeeded(self, address: str | None) -> None:
        key = client_key(address)
        if self._failures.pop(key, None) is not None:
            self._full_until = 0.0
        self._good[key] = self.clock()
        self._good.move_to_end(key)
        while len(self._good) > self.max_addresses:
            self._good.popitem(last=False)

    def _limited_for(self, times: deque[float] | None, limit: int, now: float) -> float | None:
        if times is None or len(times) < limit:
            return None
        left = times[0] + self.window - now
        return left if left > 0 else None

    def _recently_good(self, key: str, now: float) -> bool:
        seen = self._good.get(key)
        return seen is not None and now - seen <= self.window

    def _make_room(self, now: float) -> bool:
        """Room for one more address: forget those whose latest failure left the window, then the least
        recently failed address that is not limited. False when every tracked address is limited."""
        cutoff = now - self.window
        while self._failures:
            times = next(iter(self._failures.values()))
            if times[-1] > cutoff:
                break
            self._failures.popitem(last=False)
        if len(self._failures) < self.max_addresses:
            return True
        if now < self._full_until:
            return False
        frees = []
        for key, times in self._failures.items():
            left = self._limited_for(times, self.max_failures, now)
            if left is None:
                del self._failures[key]
                return True
            frees.append(now + left)
        self._full_until = min(frees)
        return False
