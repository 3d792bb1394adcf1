"""One small reader per aspect of a record, each over a trace's classified spans (:class:`TraceSpans`).

Teaching the collector a new instrumentation convention means adding its attribute names to the one
extractor of the aspect it writes. Where conventions overlap, the earlier one in each extractor wins
(the ragtrace SDK writes OpenInference and OTel GenAI names itself, so it is read through them).

Only :func:`extract_context_scores`, :func:`extract_generation`, :func:`extract_request_facts`,
:func:`extract_error` and :func:`extract_timings` run for the text-free summary; the others read texts
and run for full records only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from ragtrace import attributes as A
from ragtrace_collector.model.record import Context, Turn
from ragtrace_collector.model.spans import STATUS_ERROR, SpanData
from ragtrace_collector.processor.conventions import documents, messages
from ragtrace_collector.processor.conventions.trace_spans import TraceSpans
from ragtrace_collector.processor.conventions.values import (
    ANSWER_KEYS,
    QUERY_KEYS,
    as_bool,
    as_float,
    as_int,
    first,
    json_dict,
    maybe_json,
    text_of,
)

_TTFT_KEYS = (A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, "gen_ai.server.time_to_first_token", "llm.time_to_first_token")
_TPOT_KEYS = (A.RAGTRACE_TIME_PER_OUTPUT_TOKEN, "gen_ai.server.time_per_output_token")
_INPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_INPUT_TOKENS, A.LLM_TOKEN_COUNT_PROMPT, A.GEN_AI_USAGE_PROMPT_TOKENS)
_OUTPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_OUTPUT_TOKENS, A.LLM_TOKEN_COUNT_COMPLETION, A.GEN_AI_USAGE_COMPLETION_TOKENS)
_MODEL_KEYS = (A.GEN_AI_RESPONSE_MODEL, A.LLM_MODEL_NAME, A.GEN_AI_REQUEST_MODEL)
_PROVIDER_KEYS = (A.GEN_AI_PROVIDER_NAME, A.GEN_AI_SYSTEM, A.LLM_PROVIDER, A.LLM_SYSTEM)
_SESSION_KEYS = (A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, "traceloop.association.properties.session_id")
_USER_KEYS = (A.USER_ID, "traceloop.association.properties.user_id", "enduser.id")
_TAG_KEYS = (A.RAGTRACE_TAGS, A.TAG_TAGS)
_QUERY_ATTR_KEYS = (A.INPUT_VALUE, "traceloop.entity.input")
_ANSWER_ATTR_KEYS = (A.OUTPUT_VALUE, "traceloop.entity.output")
_RETRIEVAL_QUERY_KEYS = (A.GEN_AI_RETRIEVAL_QUERY_TEXT, A.RERANKER_QUERY)


class QuestionAnswer(TypedDict):
    user_input: str | None
    response: str | None


class GenerationFields(TypedDict):
    model: str | None
    provider: str | None
    input_tokens: int | None  # summed over the generator spans
    output_tokens: int | None
    ttft_seconds: float | None
    tpot_seconds: float | None
    streamed: bool | None
    generation_duration_seconds: float | None  # summed over the generator spans


class RequestFields(TypedDict):
    pipeline: str | None
    service: str | None
    session_id: str | None
    user_id: str | None
    reference: str | None
    sample_requested: bool


class TimingFields(TypedDict):
    request_duration_seconds: float | None
    retrieval_duration_seconds: float | None  # summed over the retriever spans
    start_time_unix_nano: int | None
    end_time_unix_nano: int | None


class LabelFields(TypedDict):
    tags: list[str]
    metadata: dict[str, Any]


def _text(attrs: Mapping[str, Any], keys: tuple[str, ...], wanted: tuple[str, ...]) -> str | None:
    """The first non-empty text among ``keys`` (plain, JSON, or nested under one of ``wanted``)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            text = text_of(value, wanted)
            if text:
                return text
    return None


def _error_of(span: SpanData) -> str | None:
    """A span's error: its ``exception`` event (type: message), else its error status."""
    for name, ev in span.events:
        if name == "exception":
            etype = ev.get("exception.type")
            msg = ev.get("exception.message")
            if etype or msg:
                return f"{etype}: {msg}" if etype and msg else str(etype or msg)
    if span.status_code == STATUS_ERROR:
        return span.status_message or span.attrs.get("error.type") or "error"
    return None


def _summed(values: Sequence[float | None]) -> float | None:
    """The sum of the known values; None when none is known."""
    total = None
    for value in values:
        if value is not None:
            total = (total or 0.0) + value
    return total


def extract_question_answer(ts: TraceSpans) -> QuestionAnswer:
    """Question/answer: pipeline span (OpenInference, OpenLLMetry), retriever query (OTel GenAI), LLM messages (all)."""
    question = answer = None
    if ts.top is not None:
        question = _text(ts.top.attrs, _QUERY_ATTR_KEYS, QUERY_KEYS)
        answer = _text(ts.top.attrs, _ANSWER_ATTR_KEYS, ANSWER_KEYS)
    if question is None:
        for s in ts.retrievers + ts.rerankers:
            question = first(s.attrs, _RETRIEVAL_QUERY_KEYS) or _text(s.attrs, _QUERY_ATTR_KEYS, QUERY_KEYS)
            if question:
                break
    last = ts.generators[-1] if ts.generators else None
    for s, msgs in zip(ts.generators, ts.generator_messages):
        if answer is None and s is last:  # the answering (last) generator's output
            text = _text(s.attrs, (A.OUTPUT_VALUE,), ANSWER_KEYS) or messages.last_assistant_message(msgs.outputs)
            if text:
                answer = text
        if question is None:
            question = (
                messages.last_user_message(msgs.inputs) if msgs.inputs else _text(s.attrs, (A.INPUT_VALUE,), QUERY_KEYS)
            )
    if answer is None:  # else the latest generator with a completion
        for msgs in reversed(ts.generator_messages):
            text = messages.last_assistant_message(msgs.outputs)
            if text:
                answer = text
                break
    return {"user_input": question, "response": answer}


def extract_contexts(ts: TraceSpans) -> list[Context]:
    """Contexts: last reranker's output (OpenInference), retrievers' (OpenInference, GenAI, OpenLLMetry), SDK's."""
    docs: list[dict[str, Any]] = []
    if ts.rerankers:
        docs = documents.reranked_documents(ts.rerankers[-1].attrs)
    if not docs:  # else every retriever's, in start order
        docs = [d for s in ts.retrievers for d in documents.retrieved_documents(s.attrs)]
    if not docs:  # else the first generator's ragtrace.generator.contexts
        for s in ts.generators:
            docs = documents.generator_contexts(s.attrs)
            if docs:
                break
    return [
        Context.model_construct(content=d["content"], id=d["id"], score=d["score"], metadata=d["metadata"] or {})
        for d in docs
    ]


def extract_context_scores(ts: TraceSpans) -> list[float | None]:
    """Context scores only (summary): last reranker's, else the retrievers' (OpenInference ``document.score``)."""
    scores: list[float | None] = []
    if ts.rerankers:
        scores = documents.document_scores(ts.rerankers[-1].attrs, A.RERANKER_OUTPUT_DOCUMENTS)
    if not scores:
        for s in ts.retrievers:
            scores.extend(documents.document_scores(s.attrs, A.RETRIEVAL_DOCUMENTS))
    return scores


def extract_generation(ts: TraceSpans) -> GenerationFields:
    """Model, tokens, TTFT, TPOT, streaming, generation time (OTel GenAI, OpenInference, OpenLLMetry, OpenLIT, SDK)."""
    model = provider = None
    input_tokens = output_tokens = None
    ttft = tpot = None
    streamed = None
    for s in ts.generators:  # the last generator stating a value wins; tokens and durations are summed
        a = s.attrs
        model = first(a, _MODEL_KEYS) or model
        provider = first(a, _PROVIDER_KEYS) or provider
        it = as_int(first(a, _INPUT_TOKEN_KEYS))
        ot = as_int(first(a, _OUTPUT_TOKEN_KEYS))
        if it is not None:
            input_tokens = (input_tokens or 0) + it
        if ot is not None:
            output_tokens = (output_tokens or 0) + ot
        ttft = as_float(first(a, _TTFT_KEYS)) if first(a, _TTFT_KEYS) is not None else ttft
        tpot = as_float(first(a, _TPOT_KEYS)) if first(a, _TPOT_KEYS) is not None else tpot
        stream = as_bool(a.get(A.GEN_AI_REQUEST_STREAM))
        streamed = stream if stream is not None else streamed
    duration = _summed([s.duration_seconds for s in ts.generators])
    if (
        tpot is None
        and ttft is not None
        and duration is not None
        and output_tokens
        and output_tokens > 1
        and duration > ttft  # OTel's definition: time per token after the first one
    ):
        tpot = (duration - ttft) / (output_tokens - 1)
    return {
        "model": str(model) if model else None,
        "provider": str(provider) if provider else None,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "ttft_seconds": ttft,
        "tpot_seconds": tpot,
        "streamed": streamed,
        "generation_duration_seconds": duration,
    }


def extract_request_facts(ts: TraceSpans) -> RequestFields:
    """Pipeline, service, session, user, reference, sample flag (ragtrace SDK, OpenInference, GenAI, OpenLLMetry)."""
    pipeline = session_id = user_id = reference = None
    sample_requested = False
    for s in ts.request_first():  # the first span stating a value wins, the request span first
        a = s.attrs
        session_id = session_id or first(a, _SESSION_KEYS)
        user_id = user_id or first(a, _USER_KEYS)
        reference = reference or a.get(A.RAGTRACE_REFERENCE)
        pipeline = pipeline or a.get(A.RAGTRACE_PIPELINE_NAME) or a.get("traceloop.workflow.name")
        if as_bool(a.get(A.RAGTRACE_SAMPLE)):
            sample_requested = True
    if pipeline is None and ts.top is not None:  # else the pipeline span's own name
        pipeline = ts.top.attrs.get("traceloop.entity.name") or ts.top.name
    request = ts.request
    service = (request.service if request is not None else None) or next(
        (s.service for s in ts.spans if s.service), None
    )
    return {
        "pipeline": str(pipeline) if pipeline else None,
        "service": service,
        "session_id": str(session_id) if session_id is not None else None,
        "user_id": str(user_id) if user_id is not None else None,
        "reference": str(reference) if reference is not None else None,
        "sample_requested": sample_requested,
    }


def extract_error(ts: TraceSpans) -> str | None:
    """The request's error, else the first failed span's (OTel ``exception`` events, span status, ``error.type``)."""
    error = _error_of(ts.request) if ts.request is not None else None
    if error is None:
        for s in ts.spans:
            error = _error_of(s)
            if error:
                break
    return str(error) if error else None


def extract_timings(ts: TraceSpans) -> TimingFields:
    """Request and retrieval durations and the trace's time range, from span timestamps (every convention)."""
    request = ts.request
    starts = [s.start for s in ts.spans if s.start]
    ends = [s.end for s in ts.spans if s.end]
    return {
        "request_duration_seconds": request.duration_seconds if request is not None else None,
        "retrieval_duration_seconds": _summed([s.duration_seconds for s in ts.retrievers]),
        "start_time_unix_nano": min(starts) if starts else None,
        "end_time_unix_nano": max(ends) if ends else None,
    }


def extract_labels(ts: TraceSpans) -> LabelFields:
    """Tags, merged (ragtrace SDK ``ragtrace.tags``, OpenInference ``tag.tags``), and metadata (OpenInference)."""
    tags: list[str] = []
    metadata: dict[str, Any] = {}
    for s in ts.request_first():
        for key in _TAG_KEYS:
            value = maybe_json(s.attrs.get(key))
            if isinstance(value, list):
                tags.extend(str(t) for t in value if str(t) not in tags)
        if not metadata:  # the first span that has any, the request span first
            metadata = dict(json_dict(s.attrs.get(A.METADATA)))
    return {"tags": tags, "metadata": metadata}


def extract_turns(ts: TraceSpans, qa: QuestionAnswer, contexts: Sequence[Context]) -> list[Turn]:
    """Conversation turns from the last generator prompt with messages (OpenInference, GenAI, OpenLLMetry, OpenLIT)."""
    prompt: list[messages.Message] = []
    for msgs in ts.generator_messages:
        prompt = msgs.inputs or prompt
    return [
        Turn.model_construct(role=role, content=content)
        for role, content in messages.conversation(
            prompt, qa["user_input"], qa["response"], [c.content for c in contexts]
        )
    ]
