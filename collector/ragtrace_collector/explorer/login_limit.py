"""Failed token attempts per client address: a few wrong guesses per window, then 429 until it passes.

The explorer's token (``auth.bearer_token``) can be guessed through the login form or an API request's
``Authorization: Bearer`` header; both count here, per client address (an IPv6 address by its /64, the
smallest block one client is usually given). An address with ``max_failures`` failures inside the last
``window_seconds`` is limited until the oldest of them leaves the window: every token it sends meanwhile,
the right one too, is answered 429 (were the right one let through, 303 against 429 would tell a hit).

Memory is bounded: at most ``max_addresses`` addresses are tracked, each with at most ``max_failures``
timestamps; past the cap the address whose last failure is oldest is forgotten. Used from the event loop
only (the explorer's handlers), so it takes no lock.
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


class LoginLimiter:
    """``failed``/``succeeded`` record an attempt's outcome; ``retry_after`` says whether to refuse the next."""

    def __init__(
        self,
        max_failures: int,
        window_seconds: float,
        max_addresses: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max(1, max_failures)
        self.window = window_seconds
        self.max_addresses = max(1, max_addresses)
        self.clock = clock
        # key -> times of its latest failures (oldest first); keys least recently failed first
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def retry_after(self, address: str | None) -> int | None:
        """Whole seconds until ``address`` may try again, or None when it may try now."""
        times = self._failures.get(client_key(address))
        if times is None or len(times) < self.max_failures:
            return None
        left = times[0] + self.window - self.clock()
        return math.ceil(left) if left > 0 else None

    def failed(self, address: str | None) -> None:
        now = self.clock()
        key = client_key(address)
        times = self._failures.get(key)
        if times is None:
            self._forget_expired(now)
            while len(self._failures) >= self.max_addresses:
                self._failures.popitem(last=False)
            times = self._failures[key] = deque(maxlen=self.max_failures)
        else:
            self._failures.move_to_end(key)
        times.append(now)

    def succeeded(self, address: str | None) -> None:
        self._failures.pop(client_key(address), None)

    def _forget_expired(self, now: float) -> None:
        """Drop the addresses whose latest failure left the window (the least recent come first)."""
        cutoff = now - self.window
        while self._failures:
            times = next(iter(self._failures.values()))
            if times[-1] > cutoff:
                break
            self._failures.popitem(last=False)
