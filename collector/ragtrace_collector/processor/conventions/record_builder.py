"""One trace's spans → one :class:`RagRecord`, whichever convention wrote them.

The request is the outermost pipeline span (ragtrace ``@pipeline``, an OpenInference CHAIN, an
OpenLLMetry workflow) or else the root span; contexts come from the last reranker's output if there is
one, otherwise from the retrievers in start order; answer, model, tokens and streaming timings come from
the generator spans (the last one wins for text, tokens are summed); the conversation turns from the
answering generator's prompt messages (see :func:`messages.conversation`). Each aspect is read by one
extractor in :mod:`extractors` over the spans classified once by :func:`trace_spans.classify_spans`.
"""

from __future__ import annotations

from typing import Any

from ragtrace_collector.model.record import RagRecord, RecordSummary
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions.extractors import (
    CONTEXTS_SOURCE,
    SOURCE_PROMPT,
    extract_context_scores,
    extract_contexts_with_source,
    extract_error,
    extract_generation,
    extract_labels,
    extract_prompt_messages,
    extract_question_answer,
    extract_request_facts,
    extract_timings,
    extract_tools,
    extract_turns,
)
from ragtrace_collector.processor.conventions.trace_spans import TraceSpans, classify_spans


def _classified(spans: list[SpanData] | TraceSpans) -> TraceSpans:
    return spans if isinstance(spans, TraceSpans) else classify_spans(spans)


def build_summary(trace_id: str, spans: list[SpanData] | TraceSpans) -> RecordSummary:
    """The text-free summary every trace gets (latencies, tokens, model, names, error, reference, sampling flag;
    context scores only when the low-score rule reads them): no query, answer, context text or metadata is read
    (the collector builds the full record only for the sampled traces). Pass the :class:`TraceSpans` already classified to classify once."""
    ts = _classified(spans)
    return RecordSummary(
        trace_id,
        **extract_generation(ts),
        **extract_request_facts(ts),
        **extract_timings(ts),
        error=extract_error(ts),
        scores_source=lambda: extract_context_scores(ts),
    )


def build_record(trace_id: str, spans: list[SpanData] | TraceSpans, sampling_weight: float = 1.0) -> RagRecord:
    """Assemble a record from every span of a trace (any order, any mix of conventions); ``sampling_weight`` is
    the sampler's (1 / inclusion probability). Pass the :class:`TraceSpans` already classified to classify once."""
    ts = _classified(spans)
    qa = extract_question_answer(ts)
    contexts, source = extract_contexts_with_source(ts)
    labels = extract_labels(ts)
    if source == SOURCE_PROMPT:  # read from the prompt, not a retrieval the trace recorded: the record says so
        labels["metadata"][CONTEXTS_SOURCE] = source
    fields: dict[str, Any] = {
        "id": trace_id,
        "trace_id": trace_id,
        **qa,
        **extract_generation(ts),
        **extract_request_facts(ts),
        **extract_timings(ts),
        "error": extract_error(ts),
    }
    return RagRecord.model_construct(
        retrieved_contexts=contexts,
        turns=extract_turns(ts, qa, contexts),
        prompt_messages=extract_prompt_messages(ts),
        sampling_weight=sampling_weight,
        **labels,
        **extract_tools(ts),
        **fields,
    )
