"""One small reader per aspect of a record, each over a trace's classified spans (:class:`TraceSpans`).

Teaching the collector a new instrumentation convention means adding its attribute names to the one
extractor of the aspect it writes. Where conventions overlap, the earlier one in each extractor wins
(the ragtrace SDK writes OpenInference and OTel GenAI names itself, so it is read through them).

Only :func:`extract_generation`, :func:`extract_request_facts`, :func:`extract_error` and
:func:`extract_timings` run for every trace's text-free summary, and :func:`extract_context_scores` when the
low-score sampling rule reads it; the others read texts and run for full records only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict

from ragtrace import attributes as A
from ragtrace_collector.model.record import Context, ToolCall, Turn
from ragtrace_collector.model.spans import EVENT_TIME, STATUS_ERROR, SpanData
from ragtrace_collector.processor.conventions import documents, evaluations, messages, prompts, roles
from ragtrace_collector.processor.conventions.documents import LANGFUSE_INPUT, LANGFUSE_OUTPUT
from ragtrace_collector.processor.conventions.trace_spans import TraceSpans
from ragtrace_collector.processor.conventions.values import (
    ANSWER_KEYS,
    QUERY_KEYS,
    as_bool,
    as_count,
    as_int,
    as_seconds,
    first,
    json_dict,
    maybe_json,
    text_of,
)

_TTFT_KEYS = (A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, "gen_ai.server.time_to_first_token", "llm.time_to_first_token")
_TPOT_KEYS = (A.RAGTRACE_TIME_PER_OUTPUT_TOKEN, "gen_ai.server.time_per_output_token")
_INPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_INPUT_TOKENS, A.LLM_TOKEN_COUNT_PROMPT, A.GEN_AI_USAGE_PROMPT_TOKENS)
_OUTPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_OUTPUT_TOKENS, A.LLM_TOKEN_COUNT_COMPLETION, A.GEN_AI_USAGE_COMPLETION_TOKENS)
_MODEL_KEYS = (A.GEN_AI_RESPONSE_MODEL, A.LLM_MODEL_NAME, A.GEN_AI_REQUEST_MODEL, "langfuse.observation.model.name")
# Langfuse generations: usage as a JSON object (its own input/output names, or the provider's as received) and the
# first token's time as a JSON-quoted ISO timestamp.
_LANGFUSE_USAGE = "langfuse.observation.usage_details"
_LANGFUSE_COMPLETION_START = "langfuse.observation.completion_start_time"
_USAGE_INPUT = ("input", "prompt_tokens", "input_tokens")
_USAGE_OUTPUT = ("output", "completion_tokens", "output_tokens")
# Where a record's contexts were read; record metadata ``ragtrace.contexts_source`` says ``prompt`` when they were
# only found in the prompt (no retrieval recorded them). The collector's to say, never a span's.
CONTEXTS_SOURCE = "ragtrace.contexts_source"
SOURCE_RERANKER = "reranker"
SOURCE_RETRIEVAL = "retrieval"
SOURCE_FED = "step_output"  # a step's output found whole in the prompt (OpenLLMetry tasks)
SOURCE_GENERATOR = "generator_attribute"  # the SDK's ragtrace.generator.contexts
SOURCE_PROMPT = "prompt"  # passages the prompt labels as context (conventions.prompts)
_PROVIDER_KEYS = (A.GEN_AI_PROVIDER_NAME, A.GEN_AI_SYSTEM, A.LLM_PROVIDER, A.LLM_SYSTEM)
_SESSION_KEYS = (A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, "traceloop.association.properties.session_id")
_USER_KEYS = (A.USER_ID, "traceloop.association.properties.user_id", "enduser.id")
_TAG_KEYS = (A.RAGTRACE_TAGS, A.TAG_TAGS)
_QUERY_ATTR_KEYS = (A.INPUT_VALUE, "traceloop.entity.input", LANGFUSE_INPUT)
_ANSWER_ATTR_KEYS = (A.OUTPUT_VALUE, "traceloop.entity.output", LANGFUSE_OUTPUT)
_RETRIEVAL_QUERY_KEYS = (A.GEN_AI_RETRIEVAL_QUERY_TEXT, A.RERANKER_QUERY)
_STREAM_KEYS = (A.GEN_AI_REQUEST_STREAM, "gen_ai.is_streaming", "llm.is_streaming", "gen_ai.request.is_stream")
# Span events whose time is the first token's: OpenInference's, and OpenLLMetry's first streamed chunk.
_FIRST_TOKEN_EVENTS = ("First Token Stream Event", "gen_ai.content.completion.chunk")
_DOC_OUTPUT_KEYS = ("traceloop.entity.output", A.OUTPUT_VALUE)
# Tool spans: the tool's name and the call's arguments (OTel GenAI, OpenInference, OpenLLMetry), and the tools a
# request was expected to call (a JSON list of names or {"name", "args"} objects, set by the app).
_TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name")
_TOOL_ARGS_KEYS = ("gen_ai.tool.call.arguments", A.INPUT_VALUE, "traceloop.entity.input")
RAGTRACE_REFERENCE_TOOL_CALLS = "ragtrace.reference.tool_calls"


class QuestionAnswer(TypedDict):
    user_input: str | None
    response: str | None


class GenerationFields(TypedDict):
    model: str | None
    provider: str | None
    input_tokens: int | None  # summed over the model calls (nested generator spans once)
    output_tokens: int | None
    ttft_seconds: float | None
    tpot_seconds: float | None
    streamed: bool | None
    generation_duration_seconds: float | None  # summed over the model calls (outermost spans)


class RequestFields(TypedDict):
    pipeline: str | None
    service: str | None
    session_id: str | None
    user_id: str | None
    reference: str | None
    sample_requested: bool


class TimingFields(TypedDict):
    request_duration_seconds: float | None
    retrieval_duration_seconds: float | None  # summed over the retrieval calls (nested spans once)
    start_time_unix_nano: int | None
    end_time_unix_nano: int | None


class ToolFields(TypedDict):
    tools_called: list[ToolCall]
    reference_tool_calls: list[ToolCall] | None


class LabelFields(TypedDict):
    tags: list[str]
    metadata: dict[str, Any]


def _text(attrs: Mapping[str, Any], keys: tuple[str, ...], wanted: tuple[str, ...]) -> str | None:
    """The first non-empty text among ``keys`` (plain, JSON, or nested under one of ``wanted``)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            text = text_of(value, wanted)
            if text and not documents.is_repr(text):  # "<generator object>" is a placeholder, not the text
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


def _embedded_query(ts: TraceSpans) -> str | None:
    """The text embedded to search with: the last embedding span starting before the first retrieval ended
    (OpenLIT's vector-store spans keep only the query vector; OpenInference's embedding spans the text)."""
    if not ts.retrievers:
        return None
    end = ts.retrievers[0].end
    for s in reversed([e for e in ts.embeddings if e.start <= end]):
        text = _text(s.attrs, (A.INPUT_VALUE,), QUERY_KEYS) or messages.last_user_message(
            messages.input_messages(s.attrs, s.events)
        )
        if text:
            return text
    return None


def extract_question_answer(ts: TraceSpans) -> QuestionAnswer:
    """Question/answer: pipeline span (OpenInference, OpenLLMetry), retriever query (OTel GenAI), the embedded
    search text (OpenLIT), LLM messages (all); a generator's output messages before its ``output.value``."""
    question = answer = None
    if ts.top is not None:
        question = _text(ts.top.attrs, _QUERY_ATTR_KEYS, QUERY_KEYS)
        answer = _text(ts.top.attrs, _ANSWER_ATTR_KEYS, ANSWER_KEYS)
    if question is None:
        for s in ts.retrievers + ts.rerankers:
            # a number or an array is an app's mistake, read as text all the same (never a non-string question)
            question = text_of(first(s.attrs, _RETRIEVAL_QUERY_KEYS), QUERY_KEYS) or _text(
                s.attrs, _QUERY_ATTR_KEYS, QUERY_KEYS
            )
            if question:
                break
    if question is None:
        question = _embedded_query(ts)
    if answer is None:  # the latest generator with a completion (messages first: output.value may be prefixed)
        for s, msgs in zip(reversed(ts.generators), reversed(ts.generator_messages)):
            answer = messages.last_assistant_message(msgs.outputs) or _text(s.attrs, (A.OUTPUT_VALUE,), ANSWER_KEYS)
            if answer:
                break
    if question is None:  # else the prompt's last user message (a stuffed template: conversation() cuts it), or the
        for s, msgs in zip(ts.generators, ts.generator_messages):  # question the template labels in it
            question = (
                messages.last_user_message(msgs.inputs) if msgs.inputs else _text(s.attrs, (A.INPUT_VALUE,), QUERY_KEYS)
            )
            if question:
                question = prompts.read(question).question or question
                break
    return {"user_input": question, "response": answer}


def _retrieved(ts: TraceSpans) -> list[dict[str, Any]]:
    """Every retrieval call's documents, in start order; a call is read once, from its outermost span that has
    documents (a LlamaIndex ``retrieve`` wrapping ``_retrieve`` is one retrieval, not two)."""
    docs: list[dict[str, Any]] = []
    for call in ts.calls(ts.retrievers):
        for s in call:
            found = documents.retrieved_documents(s.attrs)
            if found:
                docs.extend(found)
                break
    return docs


def _fed_documents(ts: TraceSpans) -> tuple[SpanData | None, list[dict[str, Any]]]:
    """Documents a step returned that the answering generator was given: the latest non-generator span before it
    whose output is a document list with every passage in the generator's prompt (an OpenLLMetry ``@task`` that
    retrieves, whatever it is named), and that span. Steps returning documents (objects with an id or a score)
    come before steps returning bare strings: OpenLLMetry's LlamaIndex spans show both the retriever's nodes and,
    later, the response synthesizer's ``TokenTextSplitter`` repacking the same passages into one text chunk."""
    if not ts.generators or not ts.generator_messages[-1].inputs:
        return None, []
    generator = ts.generators[-1]
    prompt = "\n".join(content for _, content in ts.generator_messages[-1].inputs)
    generated = {s.span_id for s in ts.generators}
    fallback: tuple[SpanData | None, list[dict[str, Any]]] = (None, [])
    for s in reversed(ts.spans):
        if s.span_id in generated or s.start > generator.start:
            continue
        for key in _DOC_OUTPUT_KEYS:
            docs = [d for d in documents.documents_from_json(s.attrs.get(key)) if d["content"].strip()]
            if docs and all(d["content"] in prompt for d in docs):
                if any(d["id"] is not None or d["score"] is not None for d in docs):
                    return s, docs
                fallback = fallback if fallback[0] is not None else (s, docs)
    return fallback


def _prompt_passages(ts: TraceSpans) -> list[dict[str, Any]]:
    """Passages the answering generator's system and user messages label as context (``conventions.prompts``)."""
    for msgs in reversed(ts.generator_messages):
        found: list[str] = []
        for role, content in msgs.inputs:
            if role.lower() in ("system", "user", "human", "developer", ""):
                found.extend(p for p in prompts.read(content).passages if p not in found)
        if found:
            return [{"content": p, "id": None, "score": None, "metadata": {}} for p in found]
    return []


def extract_contexts_with_source(ts: TraceSpans) -> tuple[list[Context], str | None]:
    """Contexts and where they were read: last reranker's output (OpenInference), retrievals (OpenInference, GenAI,
    OpenLLMetry, Langfuse), else the documents a step handed the generator (OpenLLMetry tasks), else the SDK's
    ``ragtrace.generator.contexts``, else the passages the prompt labels as context; ``None`` when none."""
    docs: list[dict[str, Any]] = []
    source = None
    if ts.rerankers:
        docs, source = documents.reranked_documents(ts.rerankers[-1].attrs), SOURCE_RERANKER
    if not docs:
        docs, source = _retrieved(ts), SOURCE_RETRIEVAL
    if not docs:
        docs, source = _fed_documents(ts)[1], SOURCE_FED
    if not docs:  # else the first generator's ragtrace.generator.contexts
        source = SOURCE_GENERATOR
        for s in ts.generators:
            docs = documents.generator_contexts(s.attrs)
            if docs:
                break
    if not docs:
        docs, source = _prompt_passages(ts), SOURCE_PROMPT
    contexts = [
        Context.model_construct(content=d["content"], id=d["id"], score=d["score"], metadata=d["metadata"] or {})
        for d in docs
    ]
    return contexts, source if contexts else None


def extract_contexts(ts: TraceSpans) -> list[Context]:
    """The record's contexts (see :func:`extract_contexts_with_source`)."""
    return extract_contexts_with_source(ts)[0]


def extract_context_scores(ts: TraceSpans) -> list[float | None]:
    """The record's context scores (for the summary's low-score rule): read from the flattened OpenInference
    ``document.score`` attributes of the last reranker, else of each retrieval call, without touching any text;
    where a convention keeps scores only inside documents' JSON (GenAI, OpenLLMetry, Langfuse), from the contexts
    themselves, as the full record reads them."""
    scores: list[float | None] = []
    if ts.rerankers:
        scores = documents.document_scores(ts.rerankers[-1].attrs, A.RERANKER_OUTPUT_DOCUMENTS)
    if not scores:
        for call in ts.calls(ts.retrievers):
            for s in call:
                found = documents.document_scores(s.attrs, A.RETRIEVAL_DOCUMENTS)
                if found:
                    scores.extend(found)
                    break
    if not scores:
        scores = [c.score for c in extract_contexts(ts)]
    return scores


def _stream_flag(span: SpanData) -> bool | None:
    """Whether the call streamed, as the span says: GenAI/OpenLLMetry/OpenLIT flags, OpenInference's invocation
    parameters, or a first-token event (only streams have one)."""
    a = span.attrs
    for key in _STREAM_KEYS:
        flag = as_bool(a.get(key))
        if flag is not None:
            return flag
    params = json_dict(a.get(A.LLM_INVOCATION_PARAMETERS))
    if "stream" in params:
        return as_bool(params["stream"])
    if _first_token_time(span) is not None:
        return True
    return None


def _first_token_time(span: SpanData) -> int | None:
    """Unix ns of the span's first-token event (OpenInference), first streamed chunk event (OpenLLMetry), or
    Langfuse's completion start time."""
    times = [ev.get(EVENT_TIME) for name, ev in span.events if name in _FIRST_TOKEN_EVENTS]
    known = [t for t in times if isinstance(t, int) and t > 0]
    if not known:
        started = _iso_ns(span.attrs.get(_LANGFUSE_COMPLETION_START))
        return started if started is not None and started >= span.start else None
    return min(known)


def _iso_ns(value: Any) -> int | None:
    """Unix ns of an ISO 8601 timestamp, plain or JSON-quoted (``"2025-01-01T00:00:00.123456Z"``); None otherwise."""
    text = maybe_json(value)
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None  # a local time of unknown zone: no duration can be read from it
    return int(moment.timestamp()) * 10**9 + moment.microsecond * 1000


def _langfuse_tokens(attrs: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(input, output) tokens of a Langfuse generation's ``usage_details``."""
    usage = json_dict(attrs.get(_LANGFUSE_USAGE))
    if not usage:
        return None, None
    return as_int(first(usage, _USAGE_INPUT)), as_int(first(usage, _USAGE_OUTPUT))


_CALL_KEYS = (
    ("model", _MODEL_KEYS),
    ("provider", _PROVIDER_KEYS),
    ("input_tokens", _INPUT_TOKEN_KEYS),
    ("output_tokens", _OUTPUT_TOKEN_KEYS),
    ("ttft", _TTFT_KEYS),
    ("tpot", _TPOT_KEYS),
)


def _call_generation(call: list[SpanData]) -> dict[str, Any]:
    """One model call, written by one or more nested spans: each value from the innermost span stating it (the
    one closest to the wire), the duration from the outermost; TTFT and TPOT only when the call streamed."""
    inner_first = call[::-1]
    out: dict[str, Any] = {}
    for name, keys in _CALL_KEYS:
        value = None
        for s in inner_first:
            value = first(s.attrs, keys)
            if value is not None:
                break
        out[name] = value
    if out["input_tokens"] is None and out["output_tokens"] is None:
        usage = next((u for s in inner_first if (u := _langfuse_tokens(s.attrs)) != (None, None)), (None, None))
        out["input_tokens"], out["output_tokens"] = usage
    out["streamed"] = next((f for f in map(_stream_flag, inner_first) if f is not None), None)
    ttft = as_seconds(out["ttft"])
    if ttft is None:
        for s in inner_first:
            t = _first_token_time(s)
            if t is not None and s.start and t >= s.start:
                ttft = as_seconds((t - s.start) / 1e9)  # an app-written time (Langfuse's) may be years off
                break
    if out["streamed"] is False:  # a non-streamed call has no first token to time (OpenLIT writes one anyway)
        ttft = None
        out["tpot"] = None
    out["ttft"] = ttft
    # a stream can outlive its span (LlamaIndex ends it when the generator is handed back): the call lasts until
    # its last recorded event, so TTFT never exceeds the generation time
    outer = call[0]
    last = max(
        [s.end for s in call] + [t for s in call for _, ev in s.events if isinstance(t := ev.get(EVENT_TIME), int)]
    )
    out["duration"] = (last - outer.start) / 1e9 if outer.start and last >= outer.start else outer.duration_seconds
    return out


def extract_generation(ts: TraceSpans) -> GenerationFields:
    """Model, tokens, TTFT, TPOT, streaming, generation time (OTel GenAI, OpenInference, OpenLLMetry, OpenLIT, SDK).

    Spans nested in another generator span are the same model call (read once, see ``TraceSpans.calls``); over
    the calls tokens and durations are summed and the last call stating model, TTFT or streaming wins."""
    model = provider = None
    input_tokens = output_tokens = None
    ttft = tpot = None
    streamed = None
    durations: list[float | None] = []
    for call in ts.calls(ts.generators):
        c = _call_generation(call)
        model = c["model"] or model
        provider = c["provider"] or provider
        it, ot = as_count(c["input_tokens"]), as_count(c["output_tokens"])
        if it is not None:
            input_tokens = (input_tokens or 0) + it
        if ot is not None:
            output_tokens = (output_tokens or 0) + ot
        if c["streamed"] is not None:
            streamed = c["streamed"]
            ttft, tpot = c["ttft"], as_seconds(c["tpot"])
        elif c["ttft"] is not None:
            ttft, tpot = c["ttft"], as_seconds(c["tpot"])
        durations.append(c["duration"])
    duration = as_seconds(_summed(durations))  # past a day: calls whose clocks disagree, no generation (as timings)
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


_CONVENTION_KEYS = (
    A.OPENINFERENCE_SPAN_KIND,
    "traceloop.span.kind",
    A.GEN_AI_OPERATION_NAME,
    "db.system",
    "db.system.name",
)


def is_request(ts: TraceSpans) -> bool:
    """Whether the trace is a request that deserves a record. It is when it generated, retrieved or reranked, is
    a ragtrace pipeline, failed, or its request span carries a question. A trace of recognised peer spans with
    none of these is work outside any request (LlamaIndex's splitting and embedding at index build, a
    vector-store write) and makes no record, nor does a trace whose root is an embedding call (its nested steps
    may carry the embedded text as if a question); spans of no known convention keep making one."""
    if ts.generators or ts.retrievers or ts.rerankers:
        return True
    if ts.root is not None and roles.span_role(ts.root.attrs) == roles.EMBEDDING:
        return False  # a trace that is one embedding call (OpenLLMetry's LlamaIndex ``<Model>.workflow``: indexing)
    if any(s.attrs.get(A.RAGTRACE_SPAN_ROLE) == roles.PIPELINE for s in ts.pipelines):
        return True
    if any(_error_of(s) for s in ts.spans):
        return True
    if not any(first(s.attrs, _CONVENTION_KEYS) is not None for s in ts.spans):
        return True
    request = ts.request
    return request is not None and _text(request.attrs, _QUERY_ATTR_KEYS, QUERY_KEYS) is not None


def extract_error(ts: TraceSpans) -> str | None:
    """The request's error, else the first failed span's (OTel ``exception`` events, span status, ``error.type``)."""
    error = _error_of(ts.request) if ts.request is not None else None
    if error is None:
        for s in ts.spans:
            error = _error_of(s)
            if error:
                break
    return str(error) if error else None


def _retrieval_duration(ts: TraceSpans) -> float | None:
    """Retrieval calls' durations summed (nested spans once), else the step whose documents fed the generator."""
    if ts.retrievers:
        return _summed([call[0].duration_seconds for call in ts.calls(ts.retrievers)])
    span = _fed_documents(ts)[0]
    return span.duration_seconds if span is not None else None


def _request_duration(ts: TraceSpans, start: int | None, end: int | None) -> float | None:
    """The request span's duration. When no span present encloses the request, it lasted at least as long as its
    spans, first start to last end: the request span's parent never arrived (OpenLLMetry's LlamaIndex spans of a
    streamed query: the workflow span waits for a stream-end event that never comes, is never ended nor exported),
    or the trace has several roots (a retrieval and the call it fed, traced apart and joined by assembly)."""
    request = ts.request
    if request is None:
        return None
    duration = request.duration_seconds
    orphan = bool(request.parent_id) and not ts.ancestors(request)
    unenclosed = orphan or ts.unenclosed > 1
    if unenclosed and start is not None and end is not None and end >= start:
        return max(duration or 0.0, (end - start) / 1e9)
    return duration


def extract_timings(ts: TraceSpans) -> TimingFields:
    """Request and retrieval durations and the trace's time range, from span timestamps (every convention)."""
    starts = [s.start for s in ts.spans if s.start]
    ends = [s.end for s in ts.spans if s.end]
    return {
        # each span is at most a day long; a range or sum past a day is spans whose clocks disagree (or a hostile
        # trace), never a request: no duration rather than one a latency histogram's sum keeps for good
        "request_duration_seconds": as_seconds(
            _request_duration(ts, min(starts, default=None), max(ends, default=None))
        ),
        "retrieval_duration_seconds": as_seconds(_retrieval_duration(ts)),
        "start_time_unix_nano": min(starts) if starts else None,
        "end_time_unix_nano": max(ends) if ends else None,
    }


def _tool_args(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call's arguments: a JSON object (OpenLLMetry's ``{"args": [...], "kwargs": {...}}`` unwrapped to its
    keyword arguments, positional ones under ``args``), else a plain input as ``{"input": text}``."""
    for key in _TOOL_ARGS_KEYS:
        value = maybe_json(attrs.get(key))
        if isinstance(value, dict):
            if key == "traceloop.entity.input" and set(value) <= {"args", "kwargs"}:
                kwargs = value.get("kwargs")
                out = dict(kwargs) if isinstance(kwargs, dict) else {}
                if value.get("args"):
                    out["args"] = value["args"]
                return out
            return dict(value)
        if isinstance(value, str) and value.strip():
            return {"input": value}
    return {}


def extract_tools(ts: TraceSpans) -> ToolFields:
    """Tools the request executed, in start order (a tool span nested in another is the same call, named by the
    innermost span that states a name), and the tools it was expected to call (``ragtrace.reference.tool_calls``,
    the request span first). A trace without tool spans called no tool."""
    called: list[ToolCall] = []
    for call in ts.calls(ts.tools):
        inner_first = list(reversed(call))
        name = next((n for s in inner_first if (n := first(s.attrs, _TOOL_NAME_KEYS))), None)
        if not name:
            continue
        args = next((a for s in inner_first if (a := _tool_args(s.attrs))), {})
        called.append(ToolCall.model_construct(name=str(name), args=args))
    expected: list[ToolCall] | None = None
    for s in ts.request_first():
        value = maybe_json(s.attrs.get(RAGTRACE_REFERENCE_TOOL_CALLS))
        if isinstance(value, (list, tuple)):
            try:
                expected = [ToolCall.model_validate(v) for v in value]
            except ValueError:
                continue  # malformed: as if absent, never a guessed reference
            break
    return {"tools_called": called, "reference_tool_calls": expected}


def extract_labels(ts: TraceSpans) -> LabelFields:
    """Tags, merged (ragtrace SDK ``ragtrace.tags``, OpenInference ``tag.tags``), metadata (OpenInference), and the
    peer's own ``gen_ai.evaluation.result`` verdicts under ``ragtrace.peer_evaluations`` (``conventions.evaluations``)."""
    tags: list[str] = []
    metadata: dict[str, Any] = {}
    for s in ts.request_first():
        for key in _TAG_KEYS:
            value = maybe_json(s.attrs.get(key))
            if isinstance(value, list):
                tags.extend(str(t) for t in value if str(t) not in tags)
        if not metadata:  # the first span that has any, the request span first
            metadata = dict(json_dict(s.attrs.get(A.METADATA)))
    metadata.pop(CONTEXTS_SOURCE, None)  # the collector's to say (record_builder), never a span's
    metadata.pop(evaluations.PEER_EVALUATIONS, None)  # likewise: read from the events below, never from a span
    verdicts = evaluations.peer_evaluations(ts.spans)
    if verdicts:
        metadata[evaluations.PEER_EVALUATIONS] = verdicts
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


def extract_prompt_messages(ts: TraceSpans) -> list[Turn]:
    """The last generator prompt with messages, as sent (role, content): what SelfCheckGPT re-samples and
    where prompt alignment finds the template's instructions. Empty when no span recorded its prompt."""
    prompt: list[messages.Message] = []
    for msgs in ts.generator_messages:
        prompt = msgs.inputs or prompt
    return [Turn.model_construct(role=role, content=content) for role, content in prompt if content.strip()]
