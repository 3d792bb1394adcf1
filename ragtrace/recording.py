"""Turning call arguments and results into span attributes, within the configured limits.

One :class:`AttrWriter` per span collects attributes into a dict that is set on the span in
one call. It applies, in order: the redaction hook, the per-attribute length cap and the
per-span text budget; anything shortened or dropped sets ``ragtrace.truncated``.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.attributes import BoundedAttributes

from . import attributes as A
from . import safety
from .documents import Doc, read_documents, texts_of
from .usage import ResponseInfo, Usage

# Precomputed attribute keys for the first documents (the hot path formats no strings).
_DOC_KEYS_CACHE: dict[str, list[tuple[str, str, str, str]]] = {}


def doc_keys(prefix: str, n: int) -> list[tuple[str, str, str, str]]:
    keys = _DOC_KEYS_CACHE.get(prefix)
    if keys is None or len(keys) < n:
        keys = [
            (
                A.document_attr(i, "id", prefix),
                A.document_attr(i, "content", prefix),
                A.document_attr(i, "score", prefix),
                A.document_attr(i, "metadata", prefix),
            )
            for i in range(max(n, 64))
        ]
        _DOC_KEYS_CACHE[prefix] = keys
    return keys


try:  # one C encoder built once: json.dumps/JSONEncoder.encode build a new one on every call
    from json.encoder import c_make_encoder as _c_make_encoder  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - pure-Python json
    _c_make_encoder = None

_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":"))
# No circular-reference markers: a shared markers dict is not thread-safe, and the encoder's
# recursion guard catches cycles anyway (RecursionError, handled below).
_C_ENCODE = (
    _c_make_encoder(None, str, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    if _c_make_encoder is not None
    else None
)
_SAFE_ENCODER = json.JSONEncoder(ensure_ascii=False, default=repr, skipkeys=True, separators=(",", ":"))


def _json(v: Any) -> str:
    """Compact JSON, non-ASCII kept, unknown types as ``str()``; never raises.

    Values JSON cannot hold as they are (cycles, tuple keys, objects whose ``str()`` raises)
    get a best-effort encoding: the offending keys skipped, else a placeholder string."""
    try:
        if _C_ENCODE is not None:
            return "".join(_C_ENCODE(v, 0))
        return _ENCODER.encode(v)
    except BaseException as exc:  # str() of a value raised, whatever it raised
        safety.reraise_interrupt(exc)
    try:
        return _SAFE_ENCODER.encode(v)
    except BaseException as exc:
        safety.reraise_interrupt(exc)
        return _ENCODER.encode(f"<unencodable {type(v).__name__}>")


def _json_str(s: str) -> str:
    """A JSON string literal; plain strings (the usual ids) skip the encoder."""
    if s.isprintable() and '"' not in s and "\\" not in s:
        return f'"{s}"'
    return json.encoder.encode_basestring(s)


class AttrWriter:
    """Collects one span's attributes under the size and privacy rules."""

    __slots__ = ("attrs", "capture", "left", "max_len", "redact", "truncated")

    def __init__(self, settings: Any, capture: bool, attrs: dict) -> None:
        self.attrs = attrs
        self.left = settings.max_span_chars
        self.max_len = settings.max_attribute_length
        self.redact = settings.redact
        self.truncated = False
        self.capture = capture

    def text(self, key: str, s: str) -> None:
        """Write a text value (content): redacted, capped, charged to the span budget."""
        r = self.redact
        if r is not None:
            try:
                s = r(s)
                if type(s) is not str:
                    raise TypeError(f"redaction hook returned {type(s).__name__}, not str")
            except BaseException as exc:  # a broken hook must not leak unredacted text
                safety.reraise_interrupt(exc)
                safety.report("redact", exc)
                self.truncated = True
                return
        n = len(s)
        if n > self.max_len:
            s = s[: self.max_len]
            n = self.max_len
            self.truncated = True
        left = self.left
        if n > left:
            self.truncated = True
            if left <= 0:
                return
            s = s[:left]
            n = left
        self.left = left - n
        self.attrs[key] = s

    def finish(self) -> dict:
        if self.truncated:
            self.attrs[A.RAGTRACE_TRUNCATED] = True
        return self.attrs


def query_text(v: Any) -> str | None:
    """The user's query from an argument: a string, a dict with a query field, or chat messages."""
    if v is None:
        return None
    if type(v) is str:
        return v
    if isinstance(v, dict):
        for k in ("query", "question", "input", "user_input", "prompt", "text", "content"):
            q = v.get(k)
            if isinstance(q, str):
                return q
        return None
    if isinstance(v, (list, tuple)) and v and isinstance(v[-1], dict):
        for m in reversed(v):
            if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
                return m["content"]
        return None
    q = getattr(v, "query_str", None) or getattr(v, "query", None) or getattr(v, "text", None)
    return q if isinstance(q, str) else str(v)


def write_documents(w: AttrWriter, prefix: str, result: Any, limit: int) -> tuple[list[Doc], int]:
    """``{prefix}.{i}.document.{id,score,content,metadata}`` for the first ``limit`` documents;
    returns them and the total count (more than ``limit`` marks the span truncated)."""
    docs, total = read_documents(result, limit)
    keys = doc_keys(prefix, len(docs))
    attrs = w.attrs
    capture = w.capture
    text = w.text
    for i, d in enumerate(docs):
        k_id, k_content, k_score, k_meta = keys[i]
        if d.id is not None:
            attrs[k_id] = d.id
        if d.score is not None:
            attrs[k_score] = d.score
        if capture:
            if d.content:
                text(k_content, d.content)
            if d.metadata:
                text(k_meta, _json(d.metadata))
    if total > len(docs):
        w.truncated = True
    return docs, total


def _summary_entry(d: Doc) -> str:
    """One ``gen_ai.retrieval.documents`` entry: id and score, when known (scores are finite floats)."""
    score = d.score
    if d.id is not None:
        did = _json_str(d.id)
        return f'{{"id":{did},"score":{score!r}}}' if score is not None else f'{{"id":{did}}}'
    return f'{{"score":{score!r}}}' if score is not None else "{}"


def write_retrieval_output(w: AttrWriter, result: Any, limit: int) -> None:
    """The retriever's documents (OpenInference) plus the GenAI summary and the total count."""
    docs, total = write_documents(w, A.RETRIEVAL_DOCUMENTS, result, limit)
    attrs = w.attrs
    attrs[A.GEN_AI_RETRIEVAL_DOCUMENTS] = "[" + ",".join([_summary_entry(d) for d in docs]) + "]"
    attrs[A.RAGTRACE_DOCUMENTS_TOTAL] = total


def write_messages(w: AttrWriter, messages: Any) -> None:
    if not isinstance(messages, (list, tuple)):
        return
    attrs = w.attrs
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else getattr(m, "role", None)
        content = m.get("content") if isinstance(m, dict) else getattr(m, "content", None)
        if role is not None:
            attrs[A.message_attr(i, "role")] = str(role)
        if content is not None:
            w.text(A.message_attr(i, "content"), content if isinstance(content, str) else _json(content))
    w.text(
        A.GEN_AI_INPUT_MESSAGES,
        _json(
            [
                m if isinstance(m, dict) else {"role": getattr(m, "role", None), "content": getattr(m, "content", None)}
                for m in messages
            ]
        ),
    )


def write_contexts(w: AttrWriter, contexts: Any, limit: int) -> None:
    texts = texts_of(contexts, limit)
    if texts:
        r = w.redact
        if r is not None:
            try:
                texts = [r(t) for t in texts]
                if any(type(t) is not str for t in texts):
                    raise TypeError("redaction hook returned a non-str value")
            except BaseException as exc:  # a broken hook must not leak unredacted text
                safety.reraise_interrupt(exc)
                safety.report("redact", exc)
                w.truncated = True
                return
        cap = w.max_len
        if any(len(t) > cap for t in texts):
            texts = [t[:cap] for t in texts]
            w.truncated = True
        # already redacted: charge the budget without running the hook twice
        saved, w.redact = w.redact, None
        try:
            w.text(A.RAGTRACE_CONTEXTS, _json(texts))
        finally:
            w.redact = saved


def write_usage(attrs: dict, usage: Usage | None) -> None:
    if usage is None:
        return
    if usage.input_tokens is not None:
        attrs[A.GEN_AI_USAGE_INPUT_TOKENS] = usage.input_tokens
        attrs[A.LLM_TOKEN_COUNT_PROMPT] = usage.input_tokens
    if usage.output_tokens is not None:
        attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.output_tokens
        attrs[A.LLM_TOKEN_COUNT_COMPLETION] = usage.output_tokens
    if usage.total_tokens is not None:
        attrs[A.LLM_TOKEN_COUNT_TOTAL] = usage.total_tokens


def write_llm_response(w: AttrWriter, info: ResponseInfo) -> None:
    attrs = w.attrs
    if info.model:
        attrs[A.GEN_AI_RESPONSE_MODEL] = info.model
        attrs.setdefault(A.LLM_MODEL_NAME, info.model)
    if info.response_id:
        attrs[A.GEN_AI_RESPONSE_ID] = info.response_id
    if info.finish_reasons:
        attrs[A.GEN_AI_RESPONSE_FINISH_REASONS] = tuple(info.finish_reasons)
    write_usage(attrs, info.usage)
    if w.capture and info.text is not None:
        w.text(A.OUTPUT_VALUE, info.text)
        attrs[A.OUTPUT_MIME_TYPE] = A.MIME_TEXT
        attrs[A.GEN_AI_OUTPUT_MESSAGES] = _json(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": attrs.get(A.OUTPUT_VALUE, "")}],
                    "finish_reason": info.finish_reasons[0] if info.finish_reasons else "stop",
                }
            ]
        )


def set_span_attributes(span: Any, attrs: dict) -> None:
    """Set already-clean attributes on a span, skipping the SDK's second validation pass.

    Every value here was produced by :class:`AttrWriter` and the helpers above (str, bool,
    int, float, tuples of str), and cleaning them again costs as much as the rest of a
    traced call. On the SDK's own span and ``BoundedAttributes`` with no value-length limit
    and room for all of them, they are written straight into its table under both of its
    locks. Any other case (another SDK, a length limit, a full table, an ended span) takes
    the public ``set_attributes``.
    """
    table = getattr(span, "_attributes", None)
    if type(table) is BoundedAttributes and table.max_value_len is None and not getattr(table, "_immutable", True):
        try:
            span_lock = span._lock
            inner = table._dict
            table_lock = table._lock
        except AttributeError:
            span.set_attributes(attrs)
            return
        with span_lock:
            if getattr(span, "_end_time", 1) is None and (
                table.maxlen is None or len(inner) + len(attrs) <= table.maxlen
            ):
                with table_lock:
                    inner.update(attrs)
                return
    span.set_attributes(attrs)
