"""One request traced as two traces: its retrieval in one, the model call it fed in another.

OpenLIT's LangChain instrumentation (1.45.0) makes no span for an LCEL chain (a ``RunnableSequence`` is an internal
chain to it, skipped) and starts its retrieval and chat spans with no parent (``tracer.start_span`` with the parent
run's span as context, and there is none), so each step of the request starts a trace of its own: a ``retrieval``
span (``gen_ai.operation.name = retrieval``, the question in ``gen_ai.retrieval.query.text``, the passages in
``gen_ai.retrieval.documents``) and a ``chat`` span (the stuffed prompt, the answer, tokens, first-token time).

The two are halves of one request when, in the same service, a trace that only retrieved (retriever spans, no
generator, no pipeline span) returned passages that every one appear in the prompt of a trace that only called a
model (generators and spans of no role, no retriever, no pipeline span), and the call started after the retrieval
ended, within :data:`MAX_GAP_NS`. A join (``joins/split_requests.py``) joins them: the call's spans move into the
retrieval's trace, one record. Passages in the prompt is what makes a RAG request (the retrieval fed the call); a
call whose prompt lacks any of them is left alone, and so is a retrieval no call used.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions.extractors import extract_contexts
from ragtrace_collector.processor.conventions.trace_spans import TraceSpans, classify_spans

# how long (ns) after a retrieval ended the call it fed may start; both come from one process's clock
MAX_GAP_NS = 10_000_000_000
SLACK_NS = 100_000_000  # a call may start this much before the retrieval's end (clock rounding)


@dataclass(frozen=True)
class RetrievalHalf:
    """A trace that only retrieved: its service, its passages, when the retrieval ended."""

    trace_id: str
    service: str | None
    passages: tuple[str, ...]
    end: int


@dataclass(frozen=True)
class AnswerHalf:
    """A trace that only called a model: its service, its prompt's text, when the first call started."""

    trace_id: str
    service: str | None
    prompt: str
    start: int


def _service(ts: TraceSpans) -> str | None:
    return next((s.service for s in ts.spans if s.service), None)


def retrieval_half(trace_id: str, spans: list[SpanData]) -> RetrievalHalf | None:
    """The trace as a retrieval half (retriever spans with passages, no generator, no pipeline span), else None."""
    ts = classify_spans(spans)
    if not ts.retrievers or ts.generators or ts.pipelines:
        return None
    passages = tuple(c.content for c in extract_contexts(ts) if c.content.strip())
    if not passages:
        return None
    return RetrievalHalf(trace_id, _service(ts), passages, max(s.end for s in ts.retrievers))


def answer_half(trace_id: str, spans: list[SpanData]) -> AnswerHalf | None:
    """The trace as an answer half (generator spans with a prompt, no retriever, reranker or pipeline span)."""
    ts = classify_spans(spans)
    if not ts.generators or ts.retrievers or ts.rerankers or ts.pipelines:
        return None
    prompt = "\n".join(content for msgs in ts.generator_messages for _, content in msgs.inputs)
    if not prompt.strip():
        return None
    return AnswerHalf(trace_id, _service(ts), prompt, min(s.start for s in ts.generators))


def fed(retrieval: RetrievalHalf, answer: AnswerHalf) -> bool:
    """Whether ``retrieval`` fed ``answer``: same service, every passage in the prompt, the call started after the
    retrieval ended (within :data:`MAX_GAP_NS`)."""
    return (
        retrieval.service == answer.service
        and retrieval.end - SLACK_NS <= answer.start <= retrieval.end + MAX_GAP_NS
        and all(p in answer.prompt for p in retrieval.passages)
    )


def join(retrieval_spans: list[SpanData], answer_spans: list[SpanData], trace_id: str) -> list[SpanData]:
    """Both halves' spans in the retrieval's trace ``trace_id`` (the answer's spans copied: the originals stay as
    they were received); each half keeps its own root."""
    out = list(retrieval_spans)
    for s in answer_spans:
        moved = SpanData.from_dict(s.to_dict())
        moved.trace_id = trace_id
        out.append(moved)
    return out
