"""``MalformedHttpLog``: aiohttp's records of requests it could not parse, a counted line per kind per minute."""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import BadStatusLine, LineTooLong

from ragtrace_collector.internal.malformed_http import MalformedHttpLog


def _record(error: BaseException | None) -> logging.LogRecord:
    exc_info = (type(error), error, None) if error is not None else None
    return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request", (), exc_info)


def test_a_line_per_kind_per_interval_with_the_count_and_no_traceback():
    now = [0.0]
    log_filter = MalformedHttpLog(interval=60, clock=lambda: now[0])
    first = _record(LineTooLong("a line", "8190", "12000"))
    assert log_filter.filter(first)
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert first.getMessage().startswith("refused 1 malformed HTTP request(s) with 400 (LineTooLong")
    assert not any(log_filter.filter(_record(LineTooLong("a line", "8190", "12000"))) for _ in range(5))
    assert log_filter.filter(_record(BadStatusLine("\\x16\\x03")))  # another kind has its own minute
    now[0] = 61.0
    later = _record(LineTooLong("a line", "8190", "12000"))
    assert log_filter.filter(later) and later.getMessage().startswith("refused 6 malformed")
    assert log_filter.refused == 8


def test_every_other_record_passes_untouched():
    log_filter = MalformedHttpLog()
    other = _record(RuntimeError("a handler's own failure"))
    assert log_filter.filter(other) and other.levelno == logging.ERROR and other.exc_info is not None
    plain = _record(None)
    assert log_filter.filter(plain) and plain.getMessage() == "Error handling request"
