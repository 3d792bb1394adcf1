"""Incomplete records, told to the user: ``ragtrace_record_incomplete_total{service,field}`` and a log line.

The sweep reports each record sampled for scoring that lacks a field, with the cause it found in the spans
(:func:`ragtrace_collector.processor.conventions.completeness.missing_fields`). The counter is by service (the
same bounded label the ingest metrics use, so a client cannot mint series) and field (a fixed set). The log says
it in words, once per service and cause per ``interval`` seconds, with the number of records since its previous
line and the metrics that cannot be scored without the field, e.g.::

    service shop: 12 records had no retrieved contexts — no retriever span found (span kinds seen: LLM, CHAIN);
    faithfulness, context_relevancy cannot be scored
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter

from ragtrace_collector.telemetry.labels import BoundedLabel, LabelSet, series_overflow

log = logging.getLogger(__name__)

# How each field reads in the log line ("12 records had no retrieved contexts").
FIELD_WORDS: dict[str, str] = {
    "user_input": "no question",
    "retrieved_contexts": "no retrieved contexts",
    "response": "no answer",
    "model": "no model name",
    "tokens": "no token counts",
    "ttft": "no time to first token (streamed)",
}


@dataclass
class _Pending:
    """What one (service, cause) saw since its last log line."""

    records: int = 0
    fields: list[str] = field(default_factory=list)
    detail: str = ""
    next_log: float = -math.inf


class IncompleteRecords:
    """Counts incomplete records by service and field; logs each service's causes, rate-limited.

    ``blocked`` maps a field to the configured metrics that need it (built by the service from the metric
    registry); ``interval`` is the least time between two lines of one service and cause.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        service_label: BoundedLabel,
        *,
        interval: float,
        max_series: int,
        idle_seconds: float,
        blocked: Mapping[str, Sequence[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counter = Counter(
            "ragtrace_record_incomplete",
            "Records sampled for scoring that lack a field (user_input, retrieved_contexts, response, model, "
            "tokens, ttft), by service; the collector's log says the cause.",
            ("service", "field"),
            registry=registry,
        )
        self._labels = LabelSet(
            [(self.counter, ((),))],
            (service_label, None),
            max_series=max_series,
            idle_seconds=idle_seconds,
            overflow=series_overflow(registry),
            clock=clock,
        )
        self.service_label = service_label
        self.interval = interval
        self.blocked = {k: list(v) for k, v in (blocked or {}).items()}
        self.clock = clock
        self._pending: dict[tuple[str, str], _Pending] = {}  # bounded: services (bounded) x causes (fixed)
        self._lock = threading.Lock()

    def observe(self, service: str | None, missing: Sequence[tuple[str, str, str]]) -> None:
        """One record of ``service`` lacks the ``(field, cause, detail)`` entries of ``missing``."""
        if not missing:
            return
        label = self.service_label(service)  # bounded: the log's keys cannot grow with the traffic
        for fld, _, _ in missing:
            self._labels.children(service, fld)[0].inc()
        by_cause: dict[str, tuple[list[str], str]] = {}
        for fld, cause, detail in missing:
            fields, _ = by_cause.setdefault(cause, ([], detail))
            fields.append(fld)
        now = self.clock()
        lines = []
        with self._lock:
            for cause, (fields, detail) in by_cause.items():
                p = self._pending.setdefault((label, cause), _Pending())
                p.records += 1
                p.fields.extend(f for f in fields if f not in p.fields)
                p.detail = detail
                if now >= p.next_log:
                    lines.append(self._line(label, p))
                    p.records, p.fields, p.next_log = 0, [], now + self.interval
        for line in lines:
            log.warning("%s", line)

    def _line(self, service: str, p: _Pending) -> str:
        what = ", ".join(FIELD_WORDS.get(f, f) for f in p.fields)
        noun = "record" if p.records == 1 else "records"
        text = f"service {service}: {p.records} {noun} had {what} — {p.detail}"
        metrics = list(dict.fromkeys(m for f in p.fields for m in self.blocked.get(f, ())))
        if metrics:
            text += f"; {', '.join(metrics)} cannot be scored"
        return text
