"""ragtrace: trace a live RAG pipeline with a few decorators, export over OTLP.

    import ragtrace
    ragtrace.init(service_name="support-bot")          # OTLP http/protobuf to 127.0.0.1:4318

    @ragtrace.retriever
    def search(query: str) -> list[dict]: ...

    @ragtrace.generator(model="openai/gpt-4o-mini")
    def answer(question: str, contexts: list[str]): ...  # may yield tokens: TTFT/TPOT recorded

    @ragtrace.tool
    def weather(city: str) -> dict: ...                  # GenAI execute_tool span, arguments and result

    @ragtrace.pipeline(name="support")
    def handle(question: str) -> str:
        ragtrace.annotate(session_id="s1", expected_tools=["weather"])
        return "".join(answer(question, search(question)))

    ragtrace.feedback(True, trace_id=saved_trace_id)     # the user's thumbs up, later: stored by the collector

The span contract (every attribute name) is :mod:`ragtrace.attributes`.
"""

from __future__ import annotations

from . import attributes
from .config import TracingHandle, configure_limits, init
from .decorators import annotate, current_trace_id, generator, pipeline, reranker, retriever, tool
from .feedback import feedback
from .safety import internal_errors
from .version import __version__ as __version__

__all__ = [
    "TracingHandle",
    "annotate",
    "attributes",
    "configure_limits",
    "current_trace_id",
    "feedback",
    "generator",
    "init",
    "internal_errors",
    "pipeline",
    "reranker",
    "retriever",
    "tool",
]
