"""The "never hurt the app" guard.

Every piece of ragtrace code that runs on the application's call path goes through
:func:`report` when it fails: the error is counted, logged at most once per
``LOG_INTERVAL_S`` per site, and swallowed. The application's own exceptions are never
handled here; the decorators re-raise them unchanged (same object).

ragtrace calls the app's objects (``str()``, ``repr()``, attribute reads on arguments, results,
documents, chunks, ``annotate`` values; the redaction hook) only to record them, so whatever
those raise is contained, ``BaseException`` included (a custom one, ``GeneratorExit``,
``asyncio.CancelledError``), except :data:`INTERRUPTS`: a Ctrl-C or a signal handler's
``sys.exit`` can land at any bytecode, in ragtrace's code too, and swallowing it would keep
an app running that was asked to stop. Those propagate, after the span is ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

logger = logging.getLogger("ragtrace")

LOG_INTERVAL_S = 60.0

# Raised asynchronously by signal handlers: the app's, never contained. See the module docstring.
INTERRUPTS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_last_logged: dict[str, float] = {}


def report(site: str, exc: BaseException | None = None) -> None:
    """Count an internal failure at ``site`` and log it, rate-limited per site.

    Never raises (but an interrupt landing here): this is the last line of defence between a
    bug in ragtrace and the app. ``exc`` may itself be hostile (its ``repr`` raising).
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
                "ragtrace internal error in %s (%d so far; the traced call was not affected): %s",
                site,
                n,
                _describe(exc),
                exc_info=exc if exc is not None and logger.isEnabledFor(logging.DEBUG) else None,
            )
    except BaseException as e:  # logging itself failed (a hostile exception's traceback): stay silent
        reraise_interrupt(e)


def reraise_interrupt(exc: BaseException) -> None:
    """Re-raise ``exc`` if it is an interrupt (see :data:`INTERRUPTS`); else do nothing."""
    if isinstance(exc, INTERRUPTS):
        raise exc


def _describe(exc: BaseException | None) -> str:
    try:
        return repr(exc)
    except BaseException as e:  # the exception's own repr raised
        reraise_interrupt(e)
        return f"<{type(exc).__name__}, unprintable>"


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
