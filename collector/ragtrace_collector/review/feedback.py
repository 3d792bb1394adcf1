"""End-user feedback in: the SDK's ``ragtrace.feedback`` spans (and the explorer API's items) into the label store.

Feedback rides the span export (same exporter, endpoint and credentials as the app's spans), as one small span in
the trace it is about. Such a span is a label, not part of the request: :func:`split_feedback` takes it out of the
decoded request before assembly, so it never becomes (or delays, or joins) a record, and it is stored whether its
trace was assembled already, arrives later, or is never sampled. Re-sent spans (an exporter's retry, the journal's
replay) are stored once: the span id is the feedback id.

:class:`FeedbackIntake` stores a request's feedback in one transaction on the event loop, before the reply (so a 200
means stored); the receivers' admission control bounds how often that happens. It counts what is new in
``ragtrace_feedback_total{service,pipeline,name,value}`` — the value bucketed to quarters and the traffic labels
bounded as the ingest metrics' are (:mod:`ragtrace_collector.telemetry.labels`) — and what it turned away in
``ragtrace_feedback_refused_total{reason}``; a refused span is also refused in the request's partial success.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter

from ragtrace import attributes as A
from ragtrace_collector.config import LimitsConfig
from ragtrace_collector.model.spans import DecodedRequest, SpanData
from ragtrace_collector.review.labels import MAX_NAME_CHARS, BadLabel, Feedback, LabelStore, feedback_value
from ragtrace_collector.telemetry.labels import UNKNOWN, BoundedLabel, LabelSet, series_overflow
from ragtrace_collector.telemetry.slots import Reclaim

log = logging.getLogger(__name__)

# The value label: the nearest quarter, so a float value cannot mint series.
VALUE_BUCKETS = ("0", "0.25", "0.5", "0.75", "1")
MAX_NAMES = 20  # distinct feedback names on /metrics; later ones are "other"
# refusal reasons (ragtrace_feedback_refused_total{reason}; the partial success says "feedback: <reason>")
BAD_VALUE = "bad_value"  # missing, not a number, or outside [0, 1]
BAD_NAME = "bad_name"  # not a non-empty string
UNWRITABLE = "unwritable"  # the label store refused the write (a full or locked disk)
_LOG_INTERVAL = 60.0


def value_bucket(value: float) -> str:
    """The nearest of :data:`VALUE_BUCKETS` to ``value`` (in [0, 1])."""
    return VALUE_BUCKETS[min(4, max(0, math.floor(value * 4 + 0.5)))]


def is_feedback(span: SpanData) -> bool:
    """A ``ragtrace.feedback`` span: role ``feedback``, or the span's name where a tracer dropped the role."""
    return span.attrs.get(A.RAGTRACE_SPAN_ROLE) == A.ROLE_FEEDBACK or span.name == A.RAGTRACE_FEEDBACK_SPAN


@dataclass
class FeedbackSpans:
    """What :func:`split_feedback` took out of a request: the feedback, each item's pipeline where the span named
    it, and the spans refused by reason."""

    items: list[Feedback] = field(default_factory=list)
    pipelines: list[str | None] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)


def split_feedback(decoded: DecodedRequest, received_at: float | None = None) -> FeedbackSpans:
    """Remove the feedback spans from ``decoded.traces`` (a trace left empty goes too) and return them as
    :class:`Feedback` (source ``sdk``, id the span id). A malformed one is refused (counted in ``decoded`` as a
    rejected span, so the sender's partial success says so), never raised."""
    out = FeedbackSpans()
    now = time.time() if received_at is None else received_at
    for trace_id in [t for t, spans in decoded.traces.items() if any(is_feedback(s) for s in spans)]:
        rest = []
        for span in decoded.traces[trace_id]:
            if not is_feedback(span):
                rest.append(span)
                continue
            item, pipeline, reason = _feedback_of(span, now)
            if item is None:
                out.refused[reason] = out.refused.get(reason, 0) + 1
                decoded.accepted -= 1
                decoded.reject(f"feedback: {reason}")
                continue
            out.items.append(item)
            out.pipelines.append(pipeline)
        if rest:
            decoded.traces[trace_id] = rest
        else:
            del decoded.traces[trace_id]
    return out


def _feedback_of(span: SpanData, received_at: float) -> tuple[Feedback | None, str | None, str]:
    attrs = span.attrs
    try:
        value = feedback_value(attrs.get(A.RAGTRACE_FEEDBACK_VALUE))
    except BadLabel:
        return None, None, BAD_VALUE
    name = attrs.get(A.RAGTRACE_FEEDBACK_NAME, "user_feedback")
    if not isinstance(name, str) or not name.strip():
        return None, None, BAD_NAME
    comment = attrs.get(A.RAGTRACE_FEEDBACK_COMMENT)
    pipeline = attrs.get(A.RAGTRACE_PIPELINE_NAME)
    item = Feedback(
        trace_id=span.trace_id,
        value=value,
        name=name.strip()[:MAX_NAME_CHARS],
        comment=comment if isinstance(comment, str) and comment else None,
        source="sdk",
        feedback_id=span.span_id,
        service=span.service,
        received_at=received_at,
    )
    return item, pipeline if isinstance(pipeline, str) and pipeline else None, ""


class FeedbackIntake:
    """Stores feedback and counts it; thread-safe (the receivers call :meth:`take` on the event loop, the explorer's
    API :meth:`add` from its threads).

    ``pipeline_of(trace_id)`` names the pipeline of feedback whose span did not (the stored record's, from the
    results store); ``service_label`` / ``pipeline_label`` are the ingest metrics' bounded labels where given, so
    feedback shares their slots, else new ones bounded by ``limits``. ``relay``: what is stored new also goes into the
    outbox the feedback relay sends to the other hosts (scaled out on Redis; it is counted here, where it arrived)."""

    def __init__(
        self,
        store: LabelStore,
        registry: CollectorRegistry,
        pipeline_of: Callable[[str], str | None] | None = None,
        *,
        limits: LimitsConfig | None = None,
        service_label: BoundedLabel | None = None,
        pipeline_label: BoundedLabel | None = None,
        clock: Callable[[], float] = time.monotonic,
        relay: bool = False,
    ) -> None:
        self.store = store
        self.pipeline_of = pipeline_of
        self.relay = relay  # what is stored also goes to the other hosts (review/feedback_relay.py: scaled out)
        limits = limits if limits is not None else LimitsConfig()
        idle = limits.label_idle_seconds
        reclaim = Reclaim(limits.label_reclaim_hits, limits.label_reclaim_window_seconds)
        self.total = Counter(
            "ragtrace_feedback",
            "End-user feedback stored (new items only; a re-sent one is not counted), by service, pipeline, "
            "feedback name and value (to the nearest quarter).",
            ("service", "pipeline", "name", "value"),
            registry=registry,
        )
        self.refused = Counter(
            "ragtrace_feedback_refused",
            "Feedback not stored, by reason (bad_value, bad_name, unwritable).",
            ("reason",),
            registry=registry,
        )
        self._labels = LabelSet(
            [(self.total, ((),))],
            (
                service_label if service_label is not None else BoundedLabel(20, idle, clock, reclaim),
                pipeline_label if pipeline_label is not None else BoundedLabel(50, idle, clock, reclaim),
                BoundedLabel(MAX_NAMES, idle, clock, reclaim),
                None,
            ),
            max_series=limits.max_series_per_label_set,
            idle_seconds=idle,
            overflow=series_overflow(registry),
            clock=clock,
            reclaim=reclaim,
        )
        self._complained = -math.inf
        self._complain_lock = threading.Lock()

    def take(self, decoded: DecodedRequest) -> None:
        """Take the feedback spans out of ``decoded`` and store them (one transaction); what remains is the
        request's other spans. A store that refuses the write refuses the request's feedback (counted, in its
        partial success, logged once a minute): the rest of the request still goes on."""
        spans = split_feedback(decoded)
        for reason, n in spans.refused.items():
            self.refused.labels(reason).inc(n)
        if not spans.items:
            return
        try:
            self._store(spans.items, spans.pipelines)
        except (sqlite3.Error, OSError) as exc:
            n = len(spans.items)
            self.refused.labels(UNWRITABLE).inc(n)
            decoded.accepted -= n
            for _ in range(n):
                decoded.reject(f"feedback: {UNWRITABLE}")
            self._complain(exc)

    def add(self, items: Sequence[Feedback]) -> list[bool]:
        """Store ``items`` in one transaction and count the new ones; ``True`` where new (a repeated
        ``feedback_id`` is not). Raises :class:`~ragtrace_collector.review.labels.BadLabel` for an invalid value,
        storing none of them."""
        return self._store(items, [None] * len(items))

    def _store(self, items: Sequence[Feedback], pipelines: Sequence[str | None]) -> list[bool]:
        added = self.store.add_feedback(items, relay=self.relay)
        for item, pipeline, new in zip(items, pipelines, added):
            if new:
                pipeline = pipeline or self._pipeline(item.trace_id)
                (counter,) = self._labels.children(item.service, pipeline, item.name, value_bucket(item.value))
                counter.inc()
        return added

    def _pipeline(self, trace_id: str) -> str:
        """The stored record's pipeline, else ``unknown`` (a lookup that fails is only a label lost)."""
        if self.pipeline_of is None:
            return UNKNOWN
        try:
            return self.pipeline_of(trace_id) or UNKNOWN
        except Exception as exc:
            self._complain(exc, "looking up a feedback's pipeline")
            return UNKNOWN

    def _complain(self, exc: BaseException, doing: str = "storing feedback") -> None:
        now = time.monotonic()
        with self._complain_lock:
            if now - self._complained < _LOG_INTERVAL:
                return
            self._complained = now
        log.error(
            "feedback: failed %s (%s: %s); counted in ragtrace_feedback_refused_total", doing, type(exc).__name__, exc
        )
