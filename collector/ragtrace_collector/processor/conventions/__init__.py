"""Reading RAG requests out of spans written by ragtrace, OpenInference and OTel GenAI instrumentations.

``build_record(trace_id, spans)`` (and ``build_summary``, its text-free part) is the one entry point: ``trace_spans`` classifies a trace's spans
once, and each function of ``extractors`` reads one aspect of the record from them (helped by ``roles``,
``documents`` and ``messages``, which each know one aspect of the peer conventions).
"""

from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions import log_events
from ragtrace_collector.processor.conventions.extractors import is_request as _is_request
from ragtrace_collector.processor.conventions.record_builder import build_record, build_summary
from ragtrace_collector.processor.conventions.trace_spans import classify_spans


def is_request(spans: list[SpanData]) -> bool:
    """Whether a trace's spans are a request that deserves a record (an index build is not one)."""
    return _is_request(classify_spans(spans))


__all__ = ["build_record", "build_summary", "is_request", "log_events"]
