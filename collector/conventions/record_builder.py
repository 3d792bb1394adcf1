"""One trace's spans → one :class:`RagRecord`, whichever convention wrote them.

The request is the outermost pipeline span (ragtrace ``@pipeline``, an OpenInference CHAIN, an
OpenLLMetry workflow) or else the root span; contexts come from the last reranker's output if there is
one, otherwise from the retrievers in start order; answer, model, tokens and streaming timings come from
the generator spans (the last one wins for text, tokens are summed); the conversation turns from the
answering generator's prompt messages (see :func:`messages.conversation`).
"""

from __future__ import annotations

from typing import Any

from ragtrace import attributes as A

from collector.conventions import documents, messages, roles
from collector.conventions.values import (
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
from collector.receiver.spans import STATUS_ERROR, SpanData
from collector.record import Context, RagRecord, Turn

_TTFT_KEYS = (A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, "gen_ai.server.time_to_first_token", "llm.time_to_first_token")
_TPOT_KEYS = (A.RAGTRACE_TIME_PER_OUTPUT_TOKEN, "gen_ai.server.time_per_output_token")
_INPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_INPUT_TOKENS, A.LLM_TOKEN_COUNT_PROMPT, A.GEN_AI_USAGE_PROMPT_TOKENS)
_OUTPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_OUTPUT_TOKENS, A.LLM_TOKEN_COUNT_COMPLETION, A.GEN_AI_USAGE_COMPLETION_TOKENS)
_MODEL_KEYS = (A.GEN_AI_RESPONSE_MODEL, A.LLM_MODEL_NAME, A.GEN_AI_REQUEST_MODEL)
_PROVIDER_KEYS = (A.GEN_AI_PROVIDER_NAME, A.GEN_AI_SYSTEM, A.LLM_PROVIDER, A.LLM_SYSTEM)
_SESSION_KEYS = (A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, "traceloop.association.properties.session_id")
_USER_KEYS = (A.USER_ID, "traceloop.association.properties.user_id", "enduser.id")
_QUERY_ATTR_KEYS = (A.INPUT_VALUE, "traceloop.entity.input")
_ANSWER_ATTR_KEYS = (A.OUTPUT_VALUE, "traceloop.entity.output")


def _text(attrs: dict[str, Any], keys: tuple[str, ...], wanted: tuple[str, ...]) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            text = text_of(value, wanted)
            if text:
                return text
    return None


def _error_of(span: SpanData) -> str | None:
    for name, ev in span.events:
        if name == "exception":
            etype = ev.get("exception.type")
            msg = ev.get("exception.message")
            if etype or msg:
                return f"{etype}: {msg}" if etype and msg else str(etype or msg)
    if span.status_code == STATUS_ERROR:
        return span.status_message or span.attrs.get("error.type") or "error"
    return None


def _depth_order(spans: list[SpanData]) -> dict[str, int]:
    """Depth of each span in the trace tree (unknown parents count as roots)."""
    by_id = {s.span_id: s for s in spans}
    depth: dict[str, int] = {}

    def walk(span: SpanData) -> int:
        seen = []
        node = span
        d = 0
        while node.parent_id and node.parent_id in by_id and node.span_id not in depth and len(seen) < 256:
            seen.append(node)
            node = by_id[node.parent_id]
        d = depth.get(node.span_id, 0)
        depth.setdefault(node.span_id, d)
        for s in reversed(seen):
            d += 1
            depth[s.span_id] = d
        return depth[span.span_id]

    for s in spans:
        if s.span_id not in depth:
            walk(s)
    return depth


def build_record(trace_id: str, spans: list[SpanData], full: bool = True) -> RagRecord:
    """Assemble a record from every span of a trace (any order, any mix of conventions).

    ``full=False`` builds the cheap summary every record needs (latencies, tokens, model, names,
    error, reference, sampling flag, context scores) and leaves out the texts (query, answer, context
    contents and metadata): the collector builds the full record only for the sampled ones.
    """
    spans = sorted(spans, key=lambda s: (s.start, s.end))
    depth = _depth_order(spans)
    classified = [(s, roles.span_role(s.attrs, s.name)) for s in spans]

    pipelines = [s for s, r in classified if r == roles.PIPELINE]
    retrievers = [s for s, r in classified if r == roles.RETRIEVER]
    rerankers = [s for s, r in classified if r == roles.RERANKER]
    generators = [s for s, r in classified if r == roles.GENERATOR]
    roots = [s for s in spans if depth.get(s.span_id, 0) == 0]

    explicit = [s for s in pipelines if s.attrs.get(A.RAGTRACE_SPAN_ROLE) == roles.PIPELINE]
    candidates = explicit or pipelines
    top = min(candidates, key=lambda s: (depth.get(s.span_id, 0), s.start)) if candidates else None
    root = min(roots, key=lambda s: s.start) if roots else (spans[0] if spans else None)
    request_span = top or root

    # --- query and answer ---
    query = None
    answer = None
    if full and top is not None:
        query = _text(top.attrs, _QUERY_ATTR_KEYS, QUERY_KEYS)
        answer = _text(top.attrs, _ANSWER_ATTR_KEYS, ANSWER_KEYS)
    if full and query is None:
        for s in retrievers + rerankers:
            query = first(s.attrs, (A.GEN_AI_RETRIEVAL_QUERY_TEXT, A.RERANKER_QUERY)) or _text(
                s.attrs, _QUERY_ATTR_KEYS, QUERY_KEYS
            )
            if query:
                break

    # --- contexts ---
    docs: list[dict[str, Any]] = []
    scores: list[float | None] = []
    if not full:
        if rerankers:
            scores = documents.document_scores(rerankers[-1].attrs, A.RERANKER_OUTPUT_DOCUMENTS)
        if not scores:
            for s in retrievers:
                scores.extend(documents.document_scores(s.attrs, A.RETRIEVAL_DOCUMENTS))
    elif rerankers:
        docs = documents.reranked_documents(rerankers[-1].attrs)
    if full and not docs:
        for s in retrievers:
            docs.extend(documents.retrieved_documents(s.attrs))
    if full and not docs:
        for s in generators:
            docs = documents.generator_contexts(s.attrs)
            if docs:
                break

    # --- generation ---
    model = provider = None
    input_tokens = output_tokens = None
    ttft = tpot = None
    streamed = None
    gen_duration = None
    prompt: list[messages.Message] = []  # the answering generator's input messages, for the turns
    for s in generators:
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
        d = s.duration_seconds
        if d is not None:
            gen_duration = (gen_duration or 0.0) + d
        if not full:
            continue
        in_msgs = messages.input_messages(a, s.events)
        prompt = in_msgs or prompt
        out_msgs = messages.output_messages(a, s.events)
        text = _text(a, (A.OUTPUT_VALUE,), ANSWER_KEYS) or messages.last_assistant_message(out_msgs)
        if answer is None and text and s is generators[-1]:
            answer = text
        if query is None:
            query = _text(a, (A.INPUT_VALUE,), QUERY_KEYS) if not in_msgs else messages.last_user_message(in_msgs)
    if full and answer is None and generators:
        for s in reversed(generators):
            text = messages.last_assistant_message(messages.output_messages(s.attrs, s.events))
            if text:
                answer = text
                break
    if tpot is None and ttft is not None and gen_duration is not None and output_tokens and output_tokens > 1:
        if gen_duration > ttft:  # OTel's definition: time per token after the first one
            tpot = (gen_duration - ttft) / (output_tokens - 1)

    retrieval_duration = None
    for s in retrievers:
        d = s.duration_seconds
        if d is not None:
            retrieval_duration = (retrieval_duration or 0.0) + d

    # --- request-level facts ---
    error = None
    if request_span is not None:
        error = _error_of(request_span)
    if error is None:
        for s in spans:
            error = _error_of(s)
            if error:
                break
    ordered = ([request_span] if request_span is not None else []) + [s for s in spans if s is not request_span]
    session_id = user_id = reference = None
    tags: list[str] = []
    metadata: dict[str, Any] = {}
    sample_requested = False
    pipeline_name = None
    for s in ordered:
        a = s.attrs
        session_id = session_id or first(a, _SESSION_KEYS)
        user_id = user_id or first(a, _USER_KEYS)
        reference = reference or a.get(A.RAGTRACE_REFERENCE)
        pipeline_name = pipeline_name or a.get(A.RAGTRACE_PIPELINE_NAME) or a.get("traceloop.workflow.name")
        for key in (A.RAGTRACE_TAGS, A.TAG_TAGS):
            value = maybe_json(a.get(key))
            if isinstance(value, list):
                tags.extend(str(t) for t in value if str(t) not in tags)
        if full and not metadata:
            metadata = dict(json_dict(a.get(A.METADATA)))
        if as_bool(a.get(A.RAGTRACE_SAMPLE)):
            sample_requested = True
    if pipeline_name is None and top is not None:
        pipeline_name = top.attrs.get("traceloop.entity.name") or top.name
    service = (request_span.service if request_span is not None else None) or next(
        (s.service for s in spans if s.service), None
    )

    starts = [s.start for s in spans if s.start]
    ends = [s.end for s in spans if s.end]
    fields = dict(
        id=trace_id,
        trace_id=trace_id,
        service=service,
        pipeline=str(pipeline_name) if pipeline_name else None,
        user_input=query,
        response=answer,
        reference=str(reference) if reference is not None else None,
        model=str(model) if model else None,
        provider=str(provider) if provider else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        ttft_seconds=ttft,
        tpot_seconds=tpot,
        request_duration_seconds=request_span.duration_seconds if request_span is not None else None,
        retrieval_duration_seconds=retrieval_duration,
        generation_duration_seconds=gen_duration,
        streamed=streamed,
        session_id=str(session_id) if session_id is not None else None,
        user_id=str(user_id) if user_id is not None else None,
        error=str(error) if error else None,
        sample_requested=sample_requested,
        start_time_unix_nano=min(starts) if starts else None,
        end_time_unix_nano=max(ends) if ends else None,
    )
    if not full:
        return RecordSummary(scores=scores, metadata={}, **fields)  # type: ignore[return-value]
    turns = [
        Turn.model_construct(role=role, content=content)
        for role, content in messages.conversation(prompt, query, answer, [d["content"] for d in docs])
    ]
    contexts = [
        Context.model_construct(content=d["content"], id=d["id"], score=d["score"], metadata=d["metadata"] or {})
        for d in docs
    ]
    return RagRecord.model_construct(
        retrieved_contexts=contexts, turns=turns, tags=tags, metadata=metadata, sampling_weight=1.0, **fields
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
        "id", "trace_id", "service", "pipeline", "user_input", "response", "reference", "model", "provider",
        "input_tokens", "output_tokens", "ttft_seconds", "tpot_seconds", "request_duration_seconds",
        "retrieval_duration_seconds", "generation_duration_seconds", "streamed", "session_id", "user_id",
        "error", "sample_requested", "start_time_unix_nano", "end_time_unix_nano", "retrieved_contexts",
        "metadata", "sampling_weight",
    )

    def __init__(self, scores: list[float | None], metadata: dict[str, Any], **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)
        self.retrieved_contexts = [ScoredContext(s) for s in scores]
        self.metadata = metadata
        self.sampling_weight = 1.0
