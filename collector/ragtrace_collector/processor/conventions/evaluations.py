"""Other tools' evaluations of a request (``gen_ai.evaluation.result`` events), kept as the peer's, never as ours.

An app or tool that judges its own answers (OpenLIT's ``openlit.log_score``, any code following the OTel GenAI
conventions) writes one ``gen_ai.evaluation.result`` event per verdict — on the evaluated span, as an OTLP log
event naming that span, or both for one verdict (OpenLIT does both). They reach a span's events either way
(``conventions.log_events`` folds the log events in). The record keeps them under its metadata key
:data:`PEER_EVALUATIONS`, a list of ``{"name", "score", "label", "explanation", "span_id", "response_id",
"attributes"}`` in event-time order, each verdict once: what the peer concluded, shown beside the record, never
read by our metrics and never stored or exported as our scores (those are ``MetricResult`` rows of the results
store). The collector's own ``gen_ai.evaluation.result`` events (they carry ``ragtrace.evaluation.id``) are not a
peer's verdict and are skipped, should a deployment send them back to the collector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragtrace_collector.model.spans import EVENT_TIME, SpanData
from ragtrace_collector.processor.conventions.values import as_float

#: The record metadata key holding the peer's evaluations (the collector's to write, never a span's).
PEER_EVALUATIONS = "ragtrace.peer_evaluations"
EVALUATION_RESULT = "gen_ai.evaluation.result"
_NAME = "gen_ai.evaluation.name"
_SCORE = "gen_ai.evaluation.score.value"
_LABEL = "gen_ai.evaluation.score.label"
_EXPLANATION = "gen_ai.evaluation.explanation"
_RESPONSE_ID = "gen_ai.response.id"
_OURS = "ragtrace.evaluation.id"  # what exporter/otlp_events.py stamps on each of our own events
_READ = {_NAME, _SCORE, _LABEL, _EXPLANATION, _RESPONSE_ID, EVENT_TIME}
# Bounds: a record's metadata is stored and shown whole; a span's events are already bounded by the receiver.
MAX_EVALUATIONS = 64
MAX_TEXT = 1000  # characters of an explanation or label
MAX_EXTRA = 16  # other attributes of an event kept (the tool's own metadata), scalars only


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)[:MAX_TEXT]


def _extra(ev: dict[str, Any]) -> dict[str, Any]:
    """The event's other scalar attributes (OpenLIT puts a score's ``metadata`` there), bounded."""
    out: dict[str, Any] = {}
    for key, value in ev.items():
        if key in _READ or not isinstance(value, (str, int, float, bool)):
            continue
        out[key] = value[:MAX_TEXT] if isinstance(value, str) else value
        if len(out) >= MAX_EXTRA:
            break
    return out


def peer_evaluations(spans: Sequence[SpanData]) -> list[dict[str, Any]]:
    """Every peer ``gen_ai.evaluation.result`` of the trace's spans, once each, in event-time order (see module)."""
    found: list[tuple[int, dict[str, Any]]] = []
    seen: set[tuple[Any, ...]] = set()
    for span in spans:
        for name, ev in span.events:
            if name != EVALUATION_RESULT or ev.get(_OURS) is not None:
                continue
            verdict = {
                "name": _text(ev.get(_NAME)),
                "score": as_float(ev.get(_SCORE)),
                "label": _text(ev.get(_LABEL)),
                "explanation": _text(ev.get(_EXPLANATION)),
                "span_id": span.span_id,
                "response_id": _text(ev.get(_RESPONSE_ID)),
                "attributes": _extra(ev),
            }
            if verdict["name"] is None and verdict["score"] is None and verdict["label"] is None:
                continue  # names nothing and concludes nothing
            key = (span.span_id, verdict["name"], verdict["score"], verdict["label"], verdict["explanation"])
            if key in seen:  # the same verdict as a span event and as a log event
                continue
            seen.add(key)
            at = ev.get(EVENT_TIME)
            found.append((at if isinstance(at, int) else 0, verdict))
    found.sort(key=lambda item: item[0])
    return [verdict for _, verdict in found[:MAX_EVALUATIONS]]
