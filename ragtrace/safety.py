"""The "never hurt the app" guard.

Every piece of ragtrace code that runs on the application's call path goes through
:func:`report` when it fails: the error is counted, logged at most once per
``LOG_INTERVAL_S`` per site, and swallowed. The application's own exceptions are never
handled here; the decorators re-raise them unchanged (same object).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

logger = logging.getLogger("ragtrace")

LOG_INTERVAL_S = 60.0

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_last_logged: dict[str, float] = {}


def report(site: str, exc: BaseException | None = None) -> None:
    """Count an internal failure at ``site`` and log it, rate-limited per site.

    Never raises: this is the last line of defence between a bug in ragtrace and the app.
    """
    try:
        now = time.monotonic()
        with _lock:
            _counts[site] += 1
            last = _last_logged.get(site)
            due = last is None or now - last >= LOG_INTERVAL_S
            if due:
                _last_logged[site] = now
            n = _counts[site]
        if due:
            logger.warning(
                "ragtrace internal error in %s (%d so far; the traced call was not affected): %r",
                site,
                n,
                exc,
                exc_info=exc if exc is not None and logger.isEnabledFor(logging.DEBUG) else None,
            )
    except Exception:  # pragma: no cover - logging itself failed; stay silent
        pass


def internal_errors() -> dict[str, int]:
    """Internal failures counted so far, by site (a copy)."""
    with _lock:
        return dict(_counts)


def internal_error_total() -> int:
    """Total internal failures counted so far."""
    with _lock:
        return sum(_counts.values())


def reset() -> None:
    """Forget counts and log times (for tests)."""
    with _lock:
        _counts.clear()
        _last_logged.clear()
