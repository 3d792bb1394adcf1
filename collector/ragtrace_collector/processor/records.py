"""A completed trace, past the joins, read as a record: the text-free summary every trace gets, the whole record
for the sampled ones, with what the collector itself derives (why the trace completed, the span scores annotate).
"""

from __future__ import annotations

from ragtrace_collector.model.record import RagRecord, RecordSummary
from ragtrace_collector.processor.assembly.state import REASON_ROOT, CompletedTrace
from ragtrace_collector.processor.conventions import build_record, build_summary

#: Record metadata the collector writes (why a trace completed, the span scores annotate); never from span content.
DERIVED_METADATA = ("ragtrace.assembly", "root_span_id")


def summary_of(completed: CompletedTrace) -> RecordSummary:
    """The text-free summary of a completed trace (see ``build_summary``), from its one classification."""
    return build_summary(completed.trace_id, completed.classified())


def record_of(completed: CompletedTrace, sampling_weight: float = 1.0) -> RagRecord:
    """The record of a completed trace, with the sampler's weight, from its one classification."""
    record = build_record(completed.trace_id, completed.classified(), sampling_weight)
    # Keys the collector derives: a span's own metadata (OpenInference ``metadata``) never sets them, or a
    # traced request would choose the span its scores annotate.
    for key in DERIVED_METADATA:
        record.metadata.pop(key, None)
    if completed.reason != REASON_ROOT:
        record.metadata["ragtrace.assembly"] = completed.reason
    # The evaluation events (ragtrace_collector.exporter.otlp_events) hang under the trace's root span.
    root = next((s for s in completed.spans if not s.parent_id), None)
    if root is not None and root.span_id:
        record.metadata["root_span_id"] = root.span_id
    return record
