"""``ragtrace.feedback()``: what the end user thought of an answer, sent to the collector beside the request's spans.

Feedback travels as one small span (``ragtrace.feedback``) in the trace it is about, so it uses the app's span
export as is — the same exporter, endpoint and credentials, batching and retries — and needs no second client. The
collector takes such spans out before assembly and stores them as labels by trace id, whether the trace was
assembled, is still on its way, or was never sampled. Its parent is the request's root span when this process still
remembers it (:mod:`ragtrace.recent`), so a trace backend shows it under the request.

Like every SDK call on the app's path it never raises or blocks: a bad value or trace id, no current trace, no
tracing set up → a warning (once per kind) and nothing sent.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
from numbers import Real
from typing import Any

from opentelemetry import trace
from opentelemetry.context import get_value
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from . import attributes as A
from . import safety
from .config import REDACTED, SETTINGS
from .decorators import current_trace_id
from .recent import RECENT
from .roles import PIPELINE_NAME_KEY

logger = logging.getLogger("ragtrace")

MAX_COMMENT_CHARS = 4000  # the collector's bound too
MAX_NAME_CHARS = 64
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def feedback(
    value: bool | float,
    *,
    trace_id: str | None = None,
    name: str = "user_feedback",
    comment: str | None = None,
) -> None:
    """Record an end user's feedback on a request: ``value`` a bool (thumbs up is ``True``) or a number in
    [0, 1]; ``trace_id`` the request's (32 hex digits, e.g. saved from :func:`ragtrace.current_trace_id` when
    the answer was given), default the current trace; ``name`` which signal (``user_feedback``, ``thumbs``, ...);
    ``comment`` the user's words (cut at 4,000 characters; redacted and dropped like other text content).

    Sent as a span with the app's other spans. Never raises: what cannot be sent is logged once per kind."""
    try:
        _send(value, trace_id, name, comment)
    except BaseException as exc:  # a hostile value's __float__ / __str__
        safety.reraise_interrupt(exc)
        safety.report("feedback", exc)


def _send(value: Any, trace_id: Any, name: Any, comment: Any) -> None:
    number = _value(value)
    if number is None:
        _warn("value", f"ragtrace.feedback: value must be a bool or a number in [0, 1] (got {type(value).__name__})")
        return
    if not isinstance(name, str) or not name.strip():
        _warn("name", "ragtrace.feedback: name must be a non-empty string")
        return
    in_request = trace_id is None
    if in_request:
        trace_id = current_trace_id()
        if trace_id is None:
            _warn("no_trace", "ragtrace.feedback: no current trace; pass trace_id= (saved from current_trace_id())")
            return
    if not isinstance(trace_id, str) or not _TRACE_ID.fullmatch(trace_id) or int(trace_id, 16) == 0:
        _warn("trace_id", "ragtrace.feedback: trace_id must be 32 hex digits, not all zero")
        return
    tid = int(trace_id, 16)
    root, pipeline = RECENT.get(tid)
    if pipeline is None and in_request:
        known = get_value(PIPELINE_NAME_KEY)
        pipeline = known if isinstance(known, str) else None
    attrs: dict[str, Any] = {
        A.RAGTRACE_SPAN_ROLE: A.ROLE_FEEDBACK,
        A.RAGTRACE_FEEDBACK_NAME: name.strip()[:MAX_NAME_CHARS],
        A.RAGTRACE_FEEDBACK_VALUE: number,
    }
    if pipeline is not None:
        attrs[A.RAGTRACE_PIPELINE_NAME] = pipeline
    text = _comment(comment)
    if text is not None:
        attrs[A.RAGTRACE_FEEDBACK_COMMENT] = text
    parent = SpanContext(
        tid, root or random.getrandbits(64) or 1, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    span = SETTINGS.tracer.start_span(
        A.RAGTRACE_FEEDBACK_SPAN,
        context=trace.set_span_in_context(NonRecordingSpan(parent)),
        kind=SpanKind.INTERNAL,
        attributes=attrs,
    )
    if not span.is_recording():  # the global no-op tracer: neither init() nor the app set tracing up
        _warn("not_initialised", "ragtrace.feedback: tracing is not set up (call ragtrace.init()); not sent")
    span.end()


def _value(value: Any) -> float | None:
    """The value sent: a bool as 1.0 / 0.0, a finite real number in [0, 1] as is; None for anything else."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, Real):
        number = float(value)
        if math.isfinite(number) and 0.0 <= number <= 1.0:
            return number
    return None


def _comment(comment: Any) -> str | None:
    """The comment as sent: none when content capture is off, redacted, cut at :data:`MAX_COMMENT_CHARS`."""
    if comment is None or not SETTINGS.capture_content:
        return None
    text = str(comment)
    redact = SETTINGS.redact
    if redact is not None:
        try:
            text = redact(text)
        except Exception as exc:  # the app's hook failed: send no text rather than unredacted text
            safety.report("redact", exc)
            text = REDACTED
    return text if len(text) <= MAX_COMMENT_CHARS else text[: MAX_COMMENT_CHARS - 1] + "…"


def _warn(kind: str, message: str) -> None:
    """Log ``message`` the first time feedback is not sent for ``kind`` of reason (a bad call repeats per request)."""
    with _warned_lock:
        if kind in _warned:
            return
        _warned.add(kind)
    logger.warning(message)
