"""Why a built record is incomplete: which field it lacks and what in its trace's spans explains that.

A user whose faithfulness is never scored needs to hear *why* (no retriever span, a retriever that records no
documents, an LLM span without output...), not just see the metric skipped. :func:`missing_fields` compares a
full record with its spans and names, per missing field, one cause from a fixed set (:data:`CAUSES`, so the
metric and the log stay bounded) with a short human detail (span kinds seen, retriever span names). It reads
the spans only when a field is missing, so complete records cost a few attribute checks.
"""

from __future__ import annotations

from typing import NamedTuple

from ragtrace import attributes as A
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions.trace_spans import TraceSpans, classify_spans

# The fields checked, in report order (label values of ragtrace_record_incomplete_total{field}).
USER_INPUT = "user_input"
RETRIEVED_CONTEXTS = "retrieved_contexts"
RESPONSE = "response"
MODEL = "model"
TOKENS = "tokens"
TTFT = "ttft"
FIELDS: tuple[str, ...] = (USER_INPUT, RETRIEVED_CONTEXTS, RESPONSE, MODEL, TOKENS, TTFT)

# The causes, short codes (the log's rate-limit key); the detail beside each says what was seen.
NO_QUESTION = "no_question"
NO_RETRIEVER = "no_retriever_span"
RETRIEVER_EMPTY = "retriever_without_documents"
NO_LLM = "no_llm_span"
LLM_NO_OUTPUT = "llm_without_output"
LLM_NO_MODEL = "llm_without_model"
LLM_NO_TOKENS = "llm_without_token_counts"
STREAM_NO_FIRST_TOKEN = "stream_without_first_token"
REQUEST_FAILED = "request_failed"
CAUSES: tuple[str, ...] = (
    NO_QUESTION,
    NO_RETRIEVER,
    RETRIEVER_EMPTY,
    NO_LLM,
    LLM_NO_OUTPUT,
    LLM_NO_MODEL,
    LLM_NO_TOKENS,
    STREAM_NO_FIRST_TOKEN,
    REQUEST_FAILED,
)

_MAX_NAMES = 3
_MAX_KINDS = 8
_MAX_NAME_CHARS = 64


class Missing(NamedTuple):
    """One missing field of a record: ``field`` (of :data:`FIELDS`), ``cause`` (of :data:`CAUSES`), ``detail``."""

    field: str
    cause: str
    detail: str


def _absent(record: RagRecord, field: str) -> bool:
    if field == USER_INPUT:
        return not (record.user_input or "").strip()
    if field == RETRIEVED_CONTEXTS:
        return not any(c.content.strip() for c in record.retrieved_contexts)
    if field == RESPONSE:
        return not (record.response or "").strip()
    if field == MODEL:
        return not record.model
    if field == TOKENS:
        return record.input_tokens is None and record.output_tokens is None
    # TTFT is expected only of a streamed call (a non-streamed one has no first token to time)
    return record.streamed is True and record.ttft_seconds is None


def _printable(text: object) -> str:
    """A span-supplied name made safe for one log line: printable, capped."""
    s = str(text)[:_MAX_NAME_CHARS]
    return s if s.isprintable() else "".join(c if c.isprintable() else "_" for c in s)


def span_kinds(ts: TraceSpans) -> str:
    """The kinds the trace's spans declare (OpenInference kind, GenAI operation, OpenLLMetry kind, ragtrace role),
    distinct, in start order: what the user's instrumentation wrote, for the log."""
    kinds: list[str] = []
    for s in ts.spans:
        a = s.attrs
        kind = (
            a.get(A.OPENINFERENCE_SPAN_KIND)
            or a.get(A.RAGTRACE_SPAN_ROLE)
            or (f"gen_ai.operation.name={a[A.GEN_AI_OPERATION_NAME]}" if a.get(A.GEN_AI_OPERATION_NAME) else None)
            or (f"traceloop.span.kind={a['traceloop.span.kind']}" if a.get("traceloop.span.kind") else None)
            or "unmarked"
        )
        text = _printable(kind)
        if text not in kinds:
            kinds.append(text)
        if len(kinds) >= _MAX_KINDS:
            kinds.append("...")
            break
    return ", ".join(kinds) or "none"


def _names(spans: tuple[SpanData, ...]) -> str:
    names = list(dict.fromkeys(_printable(s.name) for s in spans))
    more = f" and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else ""
    return ", ".join(repr(n) for n in names[:_MAX_NAMES]) + more


def _explain(field: str, ts: TraceSpans, record: RagRecord) -> Missing:
    kinds = f"span kinds seen: {span_kinds(ts)}"
    if record.error and field in (RESPONSE, TOKENS, TTFT, MODEL):
        return Missing(field, REQUEST_FAILED, f"the request failed ({_printable(record.error)})")
    if field == RETRIEVED_CONTEXTS:
        if ts.retrievers or ts.rerankers:
            return Missing(
                field,
                RETRIEVER_EMPTY,
                f"retriever span(s) {_names(ts.retrievers + ts.rerankers)} recorded no documents, and the prompt"
                " labels no passage as context",
            )
        return Missing(
            field, NO_RETRIEVER, f"no retriever span found, nor a passage labelled as context in the prompt ({kinds})"
        )
    if field == USER_INPUT:
        return Missing(
            field,
            NO_QUESTION,
            f"no question on the request span, a retriever or the LLM prompt's user message ({kinds})",
        )
    if not ts.generators:
        return Missing(field, NO_LLM, f"no LLM span found ({kinds})")
    names = _names(ts.generators)
    if field == RESPONSE:
        return Missing(field, LLM_NO_OUTPUT, f"LLM span(s) {names} recorded no output messages or output value")
    if field == MODEL:
        return Missing(field, LLM_NO_MODEL, f"LLM span(s) {names} recorded no model name")
    if field == TOKENS:
        return Missing(field, LLM_NO_TOKENS, f"LLM span(s) {names} recorded no token counts (whole numbers, 0 to 10^9)")
    return Missing(
        field,
        STREAM_NO_FIRST_TOKEN,
        f"LLM span(s) {names} streamed but recorded no first-token event or time-to-first-chunk attribute (0 to 24 h)",
    )


def missing_fields(record: RagRecord, spans: list[SpanData]) -> list[Missing]:
    """The fields of :data:`FIELDS` that ``record`` (built in full from ``spans``) lacks, each with its cause."""
    absent = [f for f in FIELDS if _absent(record, f)]
    if not absent:
        return []
    ts = classify_spans(spans)
    return [_explain(f, ts, record) for f in absent]
