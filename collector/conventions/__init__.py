"""Reading RAG requests out of spans written by ragtrace, OpenInference and OTel GenAI instrumentations.

``build_record(trace_id, spans)`` is the one entry point; ``roles``, ``documents`` and ``messages``
each know one aspect of the peer conventions.
"""

from collector.conventions.record_builder import build_record

__all__ = ["build_record"]
