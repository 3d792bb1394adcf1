"""How a traced call's span ends: with what was collected, and the app's exception where it raised.

Each helper contains its own failures (reported to :mod:`ragtrace.safety`): ending a span must never
replace the app's result or exception with ragtrace's."""

from __future__ import annotations

import traceback
from typing import Any

from opentelemetry.trace import Status, StatusCode

from . import attributes as A
from . import safety
from .config import REDACTED, SETTINGS
from .recording import AttrWriter


def _redacted(redact: Any, text: str) -> str:
    try:
        out = redact(text)
        return out if type(out) is str else REDACTED
    except BaseException as exc:
        safety.reraise_interrupt(exc)
        safety.report("redact", exc)
        return REDACTED


def record_error(span: Any, exc: BaseException) -> None:
    """Status ERROR, ``error.type`` and an ``exception`` event; the redaction hook also runs on
    the exception's message and stack trace, since an app's error text may quote its input."""
    try:
        if span.is_recording():
            span.set_attribute(A.ERROR_TYPE, type(exc).__qualname__)
            message = str(exc)
            extra = None
            redact = SETTINGS.redact
            if redact is not None:
                message = _redacted(redact, message)
                stack = _redacted(redact, "".join(traceback.format_exception(exc)))
                extra = {"exception.message": message, "exception.stacktrace": stack}
            span.record_exception(exc, attributes=extra)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"[:1024]))
    except BaseException as e:  # the app's exception's __str__ raised: the app still gets its exception
        safety.reraise_interrupt(e)
        safety.report("record_error", e)


def set_collected(span: Any, w: AttrWriter) -> None:
    try:
        if span.is_recording():
            span.set_attributes(w.finish())
    except Exception as e:
        safety.report("record_inputs", e)


def end(span: Any) -> None:
    try:
        span.end()
    except Exception as e:
        safety.report("span.end", e)


def end_with(span: Any, w: AttrWriter) -> None:
    """End the span with the attributes collected so far (after a failure inside ragtrace)."""
    set_collected(span, w)
    end(span)


def fail(span: Any, exc: BaseException, w: AttrWriter) -> None:
    """The app raised: record what was collected and the exception, end the span."""
    try:
        set_collected(span, w)
        record_error(span, exc)
    finally:
        end(span)
