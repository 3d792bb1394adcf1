"""GenAI log events folded into the span they belong to, so every reader sees them as it sees span data.

The OpenTelemetry GenAI conventions write message content in log events, not on the span:
``gen_ai.client.inference.operation.details`` (every attribute of the call: messages, model, usage; in the
instrumentations' ``event_only`` mode the only place the content is), the older per-message events
(``gen_ai.system.message``, ``gen_ai.user.message``, ``gen_ai.choice``...) and others' ``gen_ai.evaluation.result``.
The receivers keep them as carriers (``SpanData.is_log_carrier``) that wait in assembly beside the trace's spans;
when the trace completes, :func:`fold` appends each carrier's events to its span (the events the conventions already
read on spans) and lays the details event's attributes under the span's own (a span attribute wins: it is the
instrumentation's own record of the call). A carrier whose span never came is left out and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragtrace_collector.model.spans import EVENT_TIME, SpanData

#: The event holding a whole inference call (OTel GenAI semantic conventions 1.37+).
OPERATION_DETAILS = "gen_ai.client.inference.operation.details"


@dataclass(frozen=True)
class Folded:
    """A trace's spans with their log events folded in, and how many events joined a span or found none."""

    spans: list[SpanData]
    joined: int
    unmatched: int


def _clamped(attrs: dict[str, Any], span: SpanData) -> dict[str, Any]:
    """The event's time kept within its span: a log clock that drifted must not stretch the call's duration."""
    at = attrs.get(EVENT_TIME)
    if isinstance(at, int) and span.start and span.end and not span.start <= at <= span.end:
        return {**attrs, EVENT_TIME: min(max(at, span.start), span.end)}
    return attrs


def fold(spans: list[SpanData]) -> Folded:
    """``spans`` less the carriers, each span that had carriers replaced by a copy holding their events."""
    carriers = [s for s in spans if s.is_log_carrier]
    if not carriers:
        return Folded(spans, 0, 0)
    by_id = {s.span_id: s for s in spans if not s.is_log_carrier}
    events: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    unmatched = 0
    for carrier in sorted(carriers, key=lambda c: c.start):
        if carrier.span_id in by_id:
            events.setdefault(carrier.span_id, []).extend(carrier.events)
        else:
            unmatched += len(carrier.events)
    out: list[SpanData] = []
    joined = 0
    for s in spans:
        if s.is_log_carrier:
            continue
        added = events.get(s.span_id)
        if added:
            s = _with_events(s, added)
            joined += len(added)
        out.append(s)
    return Folded(out, joined, unmatched)


def _with_events(span: SpanData, added: list[tuple[str, dict[str, Any]]]) -> SpanData:
    """A copy of ``span`` with ``added`` appended to its events and the details events' attributes beneath its own."""
    attrs = dict(span.attrs)
    for name, ev in added:
        if name == OPERATION_DETAILS:
            for key, value in ev.items():
                if key != EVENT_TIME:
                    attrs.setdefault(key, value)
    return SpanData(
        span.trace_id,
        span.span_id,
        span.parent_id,
        span.name,
        span.start,
        span.end,
        span.status_code,
        span.status_message,
        attrs,
        [*span.events, *((name, _clamped(ev, span)) for name, ev in added)],
        span.service,
        span.nbytes,
    )
