"""Reading RAG requests out of spans written by ragtrace, OpenInference and OTel GenAI instrumentations.

``build_record(trace_id, spans)`` is the one entry point: ``trace_spans`` classifies a trace's spans
once, and each function of ``extractors`` reads one aspect of the record from them (helped by ``roles``,
``documents`` and ``messages``, which each know one aspect of the peer conventions).
"""

from ragtrace_collector.processor.conventions.record_builder import build_record

__all__ = ["build_record"]
