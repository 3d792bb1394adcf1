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

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions.extractors import (
    CONTEXTS_SOURCE,
    SOURCE_PROMPT,
    QuestionAnswer,
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
from ragtrace_collector.processor.conventions.trace_spans import classify_spans

_NO_TEXT: QuestionAnswer = {"user_input": None, "response": None}


def build_record(trace_id: str, spans: list[SpanData], full: bool = True) -> RagRecord:
    """Assemble a record from every span of a trace (any order, any mix of conventions).

    ``full=False`` builds the cheap summary every record needs (latencies, tokens, model, names,
    error, reference, sampling flag, context scores) and leaves out the texts (query, answer, context
    contents and metadata): the collector builds the full record only for the sampled ones.
    """
    ts = classify_spans(spans)
    qa = extract_question_answer(ts) if full else _NO_TEXT
    fields: dict[str, Any] = {
        "id": trace_id,
        "trace_id": trace_id,
        **qa,
        **extract_generation(ts),
        **extract_request_facts(ts),
        **extract_timings(ts),
        "error": extract_error(ts),
    }
    if not full:
        return RecordSummary(scores=extract_context_scores(ts), metadata={}, **fields)  # type: ignore[return-value]
    contexts, source = extract_contexts_with_source(ts)
    labels = extract_labels(ts)
    if source == SOURCE_PROMPT:  # read from the prompt, not a retrieval the trace recorded: the record says so
        labels["metadata"][CONTEXTS_SOURCE] = source
    return RagRecord.model_construct(
        retrieved_contexts=contexts,
        turns=extract_turns(ts, qa, contexts),
        prompt_messages=extract_prompt_messages(ts),
        sampling_weight=1.0,
        **labels,
        **extract_tools(ts),
        **fields,
    )


class ScoredContext:
    """A context in a summary: its score only."""

    __slots__ = ("score",)

    def __init__(self, score: float | None) -> None:
        self.score = score


class RecordSummary:
    """The text-free summary of a record (``build_record(..., full=False)``): the attributes the latency
    metrics and the sampler read, named as on :class:`RagRecord`, at a fraction of its cost."""

    __slots__ = (
        "end_time_unix_nano",
        "error",
        "generation_duration_seconds",
        "id",
        "input_tokens",
        "metadata",
        "model",
        "output_tokens",
        "pipeline",
        "provider",
        "reference",
        "request_duration_seconds",
        "response",
        "retrieval_duration_seconds",
        "retrieved_contexts",
        "sample_requested",
        "sampling_weight",
        "service",
        "session_id",
        "start_time_unix_nano",
        "streamed",
        "tpot_seconds",
        "trace_id",
        "ttft_seconds",
        "user_id",
        "user_input",
    )

    def __init__(self, scores: list[float | None], metadata: dict[str, Any], **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)
        self.retrieved_contexts = [ScoredContext(s) for s in scores]
        self.metadata = metadata
        self.sampling_weight = 1.0
