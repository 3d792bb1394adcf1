"""Malformed HTTP requests in the log: a line a minute per kind, with the count, never a traceback each.

aiohttp answers a request it cannot parse (a request line past 8 KiB, bytes no HTTP parser takes, a header with a
forbidden character) with 400 before any of our handlers runs, and logs it on ``aiohttp.server`` at ERROR with a
traceback: any client could fill the collector's log, a kilobyte a request. :class:`MalformedHttpLog` is a logging
filter on that logger: such a record becomes one WARNING line per kind of error per ``interval`` seconds, saying how
many were refused since the last line (the clients still get their 400); every other record passes untouched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from aiohttp.http_exceptions import HttpProcessingError

LOGGER = "aiohttp.server"
INTERVAL_SECONDS = 60.0


class MalformedHttpLog(logging.Filter):
    """Rewrites aiohttp's records of requests it could not parse (see the module docstring); thread-safe."""

    def __init__(self, interval: float = INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # kind -> when its last line was let through
        self._since: dict[str, int] = {}  # kind -> refused since that line
        self.refused = 0  # all of them, for tests and a debugger

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        kind = type(error).__name__
        now = self._clock()
        with self._lock:
            self.refused += 1
            self._since[kind] = self._since.get(kind, 0) + 1
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                return False
            count, self._since[kind] = self._since[kind], 0
            self._last[kind] = now
        detail = str(getattr(error, "message", "") or error).splitlines()[0][:120]
        record.msg = "refused %d malformed HTTP request(s) with 400 (%s: %s), at most one such line a minute"
        record.args = (count, kind, detail)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info = record.exc_text = None
        return True


def install(interval: float = INTERVAL_SECONDS) -> MalformedHttpLog:
    """Put the filter on aiohttp's server logger (once per process: a second call returns the first)."""
    logger = logging.getLogger(LOGGER)
    for existing in logger.filters:
        if isinstance(existing, MalformedHttpLog):
            return existing
    log_filter = MalformedHttpLog(interval)
    logger.addFilter(log_filter)
    return log_filter
