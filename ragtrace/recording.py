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
from .documents import Doc, as_document_list, read_document, read_documents, texts_of
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

    __slots__ = ("attrs", "capture", "left", "max_len", "redact", "span", "truncated")

    def __init__(self, settings: Any, capture: bool, attrs: dict, span: Any = None) -> None:
        self.attrs = attrs
        self.span = span  # the span written to: its ids place recorded documents (see DocumentLedger)
        self.left = settings.max_span_chars
        self.max_len = settings.max_attribute_length
        self.redact = settings.redact
        self.truncated = False
        self.capture = capture

    def text(self, key: str, s: str) -> bool:
        """Write a text value (content): redacted, capped, charged to the span budget; whether it was written
        whole (not cut, not dropped)."""
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
                return False
        n = len(s)
        whole = True
        if n > self.max_len:
            s = s[: self.max_len]
            n = self.max_len
            self.truncated = True
            whole = False
        left = self.left
        if n > left:
            self.truncated = True
            if left <= 0:
                return False
            s = s[:left]
            n = left
            whole = False
        self.left = left - n
        self.attrs[key] = s
        return whole

    def clean(self, s: str) -> str | None:
        """``s`` redacted and cut to the attribute cap, not yet charged to the span budget (text that goes
        into a JSON value); None when the redaction hook failed, so the text must not leave."""
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
                return None
        if len(s) > self.max_len:
            s = s[: self.max_len]
            self.truncated = True
        return s

    def put(self, key: str, s: str) -> None:
        """Write text already made clean by :meth:`clean`, charged to the span budget."""
        n = len(s)
        left = self.left
        if n > left:
            self.truncated = True
            if left <= 0:
                return
            s = s[:left]
            n = left
        self.left = left - n
        self.attrs[key] = s

    def json_value(self, key: str, value: Any, texts: list[tuple[dict, str]]) -> bool:
        """Write ``value`` as JSON, whole, within the attribute cap and the span budget.

        A cut JSON string is unreadable, so when it is too long the texts at ``texts`` (``(dict, key)``
        places inside ``value``) are shortened instead; when even that cannot fit, nothing is written."""
        limit = min(self.max_len, self.left)
        s = _json(value)
        for _ in range(4):
            excess = len(s) - limit
            if excess <= 0:
                self.left -= len(s)
                self.attrs[key] = s
                return True
            self.truncated = True
            total = sum(len(d[k]) for d, k in texts)
            if total == 0:
                break
            keep = max(0.0, 1.0 - (excess + 16) / total)
            for d, k in texts:
                d[k] = d[k][: int(len(d[k]) * keep)]
            s = _json(value)
        return False

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


def write_output_documents(
    w: AttrWriter, prefix: str, result: Any, limit: int, summary: list[str] | None = None
) -> tuple[int, int]:
    """The documents a retriever or reranker returned (as :func:`write_documents`), each text its one copy on the
    wire: what went out whole is remembered (:data:`LEDGER`) for a generator given the same texts to refer to.
    ``summary`` gets each document's GenAI entry (id and score), up to the first document without an id.
    Returns how many documents were written and how many there were."""
    items = as_document_list(result)
    if not items:
        return 0, 0
    total = len(items)
    if total > limit:
        items = items[:limit]
    keys = doc_keys(prefix, len(items))
    attrs = w.attrs
    capture = w.capture
    text = w.text
    sent: list[str | None] = []
    named = summary is not None
    for i, obj in enumerate(items):
        # the usual plain dict (str content and id, finite float score, dict metadata or none) is read as it is;
        # any other shape by read_document, which searches the other key names
        if type(obj) is dict:
            content = obj.get("content")
            did = obj.get("id")
            score = obj.get("score")
            meta = obj.get("metadata")
            if not (
                type(content) is str
                and type(did) is str
                and type(score) is float
                and score - score == 0.0
                and (meta is None or type(meta) is dict)
            ):
                did, content, score, meta = read_document(obj)
        else:
            did, content, score, meta = read_document(obj)
        k_id, k_content, k_score, k_meta = keys[i]
        if did is not None:
            attrs[k_id] = did
            if named:
                head = '{"id":' + _json_str(did)
                summary.append(f'{head},"score":{score!r}}}' if score is not None else head + "}")  # type: ignore[union-attr]
        else:
            named = False
        if score is not None:
            attrs[k_score] = score
        if capture:
            sent.append(content if content and text(k_content, content) else None)
            if meta:
                text(k_meta, _json(meta))
    if total > len(items):
        w.truncated = True
    if sent and w.span is not None:
        LEDGER.remember(w.span, sent)
    return len(items), total


def write_retrieval_output(w: AttrWriter, result: Any, limit: int) -> None:
    """The retriever's documents (OpenInference, their one copy), the total count, and the GenAI summary: each
    document's id and, when known, its score. No summary when a document has no id: GenAI names a document by
    its id, and writing its content there would send the text twice."""
    entries: list[str] = []
    n, total = write_output_documents(w, A.RETRIEVAL_DOCUMENTS, result, limit, entries)
    attrs = w.attrs
    if total > n:  # else it is the number of documents the span holds
        attrs[A.RAGTRACE_DOCUMENTS_TOTAL] = total
    if len(entries) < n:
        return
    summary = "[" + ",".join(entries) + "]"
    if len(summary) <= w.max_len:
        attrs[A.GEN_AI_RETRIEVAL_DOCUMENTS] = summary
    else:  # never cut: a cut JSON list is unreadable
        w.truncated = True


class DocumentLedger:
    """The document texts recent spans sent, by trace, so that a generator given the same texts refers to them
    (``ragtrace.generator.context_documents``) rather than sending them again.

    A text is matched by identity first (an app hands its retriever's strings on), else by equality. Only texts
    sent whole are held (each within the attribute cap), for at most ``cap`` traces: the oldest are forgotten
    first, and an outermost pipeline forgets its trace when it ends, so a pipeline app holds only its requests in
    flight. A generator whose texts are not all found writes them (``ragtrace.generator.contexts``): forgetting
    costs bytes, never correctness."""

    __slots__ = ("cap", "traces")

    def __init__(self, cap: int = 256) -> None:
        self.cap = cap
        # trace id -> [(span id, texts in document order: None where a text did not go out whole)]
        self.traces: dict[int, list[tuple[int, list[str | None]]]] = {}

    def remember(self, span: Any, texts: list[str | None]) -> None:
        ctx = span.get_span_context()
        traces = self.traces
        found = traces.get(ctx.trace_id)
        if found is not None:
            found.append((ctx.span_id, texts))
            return
        traces[ctx.trace_id] = [(ctx.span_id, texts)]
        if len(traces) > self.cap:
            try:
                del traces[next(iter(traces))]
            except (KeyError, RuntimeError, StopIteration):  # another thread changed it first
                pass

    def refer(self, span: Any, texts: list[str]) -> tuple[str, ...] | None:
        """``"<span id>:<index>"`` for each text, naming the document of a span in this trace that sent it (the
        latest such span); None unless every text was found."""
        found = self.traces.get(span.get_span_context().trace_id)
        if not found or not texts:
            return None
        by_id: dict[int, tuple[str, str]] = {}
        for sid, sent in found:
            hexid = f"{sid:016x}"
            for i, t in enumerate(sent):
                if t is not None:
                    by_id[id(t)] = (t, f"{hexid}:{i}")
        refs = []
        by_text: dict[str, str] | None = None
        for t in texts:
            hit = by_id.get(id(t))
            if hit is not None and hit[0] is t:
                refs.append(hit[1])
                continue
            if by_text is None:
                by_text = {sent_text: ref for sent_text, ref in by_id.values()}
            ref = by_text.get(t)
            if ref is None:
                return None
            refs.append(ref)
        return tuple(refs)

    def forget(self, span: Any) -> None:
        self.traces.pop(span.get_span_context().trace_id, None)


LEDGER = DocumentLedger()


# LangChain message types -> chat roles (other types are kept as they are)
_ROLE_OF_TYPE = {"human": "user", "ai": "assistant"}


def _get(m: Any, key: str) -> Any:
    return m.get(key) if isinstance(m, dict) else getattr(m, key, None)


def _role(m: Any) -> str:
    role = _get(m, "role")
    if role is None:
        kind = _get(m, "type")
        role = _ROLE_OF_TYPE.get(kind, kind) if isinstance(kind, str) else None
    return str(role) if role is not None else "user"


class _Messages:
    """GenAI ``role`` + ``parts`` messages being built, and where their texts are (for
    :meth:`AttrWriter.json_value`, which shortens texts rather than cut the JSON)."""

    __slots__ = ("messages", "texts", "w")

    def __init__(self, w: AttrWriter) -> None:
        self.w = w
        self.messages: list[dict] = []
        self.texts: list[tuple[dict, str]] = []

    def part(self, parts: list, kind: str, key: str, text: str, **extra: Any) -> str | None:
        """Append a part holding ``text`` (cleaned) under ``key``; returns the clean text (None if it may not leave)."""
        clean = self.w.clean(text)
        if clean is not None:
            p = {"type": kind, **extra, key: clean}
            parts.append(p)
            self.texts.append((p, key))
        return clean

    def add(self, m: Any) -> str | None:
        """Add one chat message (dict or object, OpenAI or LangChain shape); returns its text for OpenInference."""
        role = _role(m)
        parts: list[dict] = []
        content = _get(m, "content")
        texts: list[str] = []
        if role == "tool" and content is not None:
            text = content if isinstance(content, str) else _json(content)
            t = self.part(parts, "tool_call_response", "response", text, id=_str_or_none(_get(m, "tool_call_id")))
            if t is not None:
                texts.append(t)
        elif isinstance(content, str):
            t = self.part(parts, "text", "content", content)
            if t is not None:
                texts.append(t)
        elif isinstance(content, (list, tuple)):  # OpenAI content parts
            for item in content:
                if isinstance(item, str):
                    t = self.part(parts, "text", "content", item)
                elif isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                    t = self.part(parts, "text", "content", item["text"])
                else:
                    kind = item.get("type") if isinstance(item, dict) else None
                    self.part(parts, str(kind) if kind else "unknown", "content", _json(item))
                    continue
                if t is not None:
                    texts.append(t)
        elif content is not None:
            t = self.part(parts, "text", "content", _json(content))
            if t is not None:
                texts.append(t)
        for call in _get(m, "tool_calls") or ():
            fn = _get(call, "function")
            name = _get(fn, "name") if fn is not None else _get(call, "name")
            if isinstance(name, str):
                args = _get(fn, "arguments") if fn is not None else _get(call, "args")
                args_text = args if isinstance(args, str) else _json(args)
                self.part(parts, "tool_call", "arguments", args_text, id=_str_or_none(_get(call, "id")), name=name)
        self.messages.append({"role": role, "parts": parts})
        return "\n".join(texts) if texts else None


def _str_or_none(v: Any) -> str | None:
    return v if v is None or isinstance(v, str) else str(v)


def _write_oi_message(w: AttrWriter, i: int, role: str, text: str | None) -> None:
    w.attrs[A.message_attr(i, "role")] = role
    if text is not None:
        w.put(A.message_attr(i, "content"), text)


def write_system(w: AttrWriter, system: str) -> int:
    """Instructions given apart from the chat history: ``gen_ai.system_instructions`` (GenAI) and a first
    ``system`` message (OpenInference has no other place); returns how many OpenInference messages it wrote."""
    b = _Messages(w)
    parts: list[dict] = []
    clean = b.part(parts, "text", "content", system)
    if clean is None:
        return 0
    w.json_value(A.GEN_AI_SYSTEM_INSTRUCTIONS, parts, b.texts)
    _write_oi_message(w, 0, "system", clean)
    return 1


def write_messages(w: AttrWriter, messages: Any, first: int = 0) -> bool:
    """Chat messages as the app passed them: ``llm.input_messages`` and ``gen_ai.input.messages`` (role + parts)."""
    if not isinstance(messages, (list, tuple)):
        return False
    b = _Messages(w)
    for i, m in enumerate(messages):
        text = b.add(m)
        _write_oi_message(w, first + i, b.messages[-1]["role"], text)
    return w.json_value(A.GEN_AI_INPUT_MESSAGES, b.messages, b.texts)


def write_prompt(w: AttrWriter, prompt: str, first: int = 0) -> None:
    """A generator given a prompt (and contexts) rather than messages: the prompt as one user message, in
    ``llm.input_messages`` and ``gen_ai.input.messages``. The contexts are not embedded in it: the prompt the model
    was sent is not known (the app builds it inside), and the contexts are sent once already, as documents or
    ``ragtrace.generator.contexts``."""
    clean = w.clean(prompt)
    if clean is None:
        return
    s = '[{"role":"user","parts":[{"type":"text","content":' + _json_str(clean) + "}]}]"
    if len(s) <= w.max_len and len(s) + len(clean) <= w.left:  # the usual case
        w.left -= len(s) + len(clean)
        w.attrs[A.GEN_AI_INPUT_MESSAGES] = s
        w.attrs[A.message_attr(first, "role")] = "user"
        w.attrs[A.message_attr(first, "content")] = clean
        return
    part = {"type": "text", "content": clean}
    if w.json_value(A.GEN_AI_INPUT_MESSAGES, [{"role": "user", "parts": [part]}], [(part, "content")]):
        _write_oi_message(w, first, "user", part["content"])


def write_contexts(w: AttrWriter, contexts: Any, limit: int) -> None:
    """The contexts a generator was given, once: ``ragtrace.generator.context_documents`` when each is a document
    a span of this trace sent (:class:`DocumentLedger`), else their texts in ``ragtrace.generator.contexts``
    (redacted and capped; none if the hook failed)."""
    texts = texts_of(contexts, limit)
    if not texts:
        return
    if w.span is not None:
        refs = LEDGER.refer(w.span, texts)
        if refs is not None:
            w.attrs[A.RAGTRACE_CONTEXT_DOCUMENTS] = refs
            return
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
    s = "[" + ",".join([_json_str(t) for t in texts]) + "]"
    if len(s) <= cap and len(s) <= w.left:  # the usual case
        w.left -= len(s)
        w.attrs[A.RAGTRACE_CONTEXTS] = s
    else:  # shortened texts, never a cut (unreadable) JSON list
        places: list[tuple[Any, Any]] = [(texts, i) for i in range(len(texts))]
        w.json_value(A.RAGTRACE_CONTEXTS, texts, places)


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


# litellm's routing prefixes (``openai/gpt-4o-mini``): the provider, not part of the model's name. Only these
# are split off: in ``meta-llama/Llama-3-8B`` the prefix is part of the model id a server serves.
# fmt: off
LITELLM_PROVIDERS = frozenset(
    {
        "openai", "text-completion-openai", "custom_openai", "azure", "azure_ai", "azure_text", "anthropic", "bedrock",
        "bedrock_converse", "sagemaker", "vertex_ai", "vertex_ai_beta", "gemini", "palm", "cohere", "cohere_chat",
        "mistral", "codestral", "groq", "together_ai", "fireworks_ai", "deepinfra", "deepseek", "perplexity",
        "openrouter", "anyscale", "huggingface", "replicate", "ollama", "ollama_chat", "hosted_vllm", "vllm",
        "lm_studio", "xai", "cerebras", "sambanova", "databricks", "watsonx", "watsonx_text", "nvidia_nim", "ai21",
        "ai21_chat", "cloudflare", "friendliai", "github", "litellm_proxy", "predibase", "clarifai", "baseten",
        "triton", "dashscope", "moonshot", "novita", "nebius", "llamafile", "featherless_ai", "meta_llama"
    }
)
# fmt: on


def split_model(model: str) -> tuple[str | None, str]:
    """``(provider, model name)`` of a litellm model string; ``(None, model)`` without a known prefix."""
    head, sep, rest = model.partition("/")
    if sep and rest and head in LITELLM_PROVIDERS:
        return head, rest
    return None, model


def write_llm_response(w: AttrWriter, info: ResponseInfo) -> None:
    """What the model answered. The finish reason is the model's own, or absent: a stream that was abandoned
    or raised did not "stop" (the error itself is the span's status)."""
    attrs = w.attrs
    if info.model:
        served = split_model(info.model)[1]
        attrs[A.GEN_AI_RESPONSE_MODEL] = served
        attrs[A.LLM_MODEL_NAME] = served
    if info.response_id:
        attrs[A.GEN_AI_RESPONSE_ID] = info.response_id
    if info.finish_reasons:
        attrs[A.GEN_AI_RESPONSE_FINISH_REASONS] = tuple(info.finish_reasons)
    write_usage(attrs, info.usage)
    if w.capture and info.text is not None:
        w.text(A.OUTPUT_VALUE, info.text)
        out = attrs.get(A.OUTPUT_VALUE)
        if out is None:
            return
        part = {"type": "text", "content": out}
        message: dict[str, Any] = {"role": "assistant", "parts": [part]}
        if info.finish_reasons:
            message["finish_reason"] = info.finish_reasons[0]
        w.json_value(A.GEN_AI_OUTPUT_MESSAGES, [message], [(part, "content")])


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


_JSON_SCALARS = (int, float, bool, type(None))
_MAX_JSON_DEPTH = 16
_MAX_JSON_ITEMS = 256


def clean_json(w: AttrWriter, value: Any, texts: list[tuple[Any, Any]], depth: int = 0) -> Any:
    """A JSON-ready copy of ``value`` (tool arguments, results, expected tool calls): every text run through
    the redaction hook and the attribute cap, other objects as their ``str()``; containers cut at
    ``_MAX_JSON_ITEMS`` entries and ``_MAX_JSON_DEPTH`` levels. ``texts`` gets each text's place, for
    :meth:`AttrWriter.json_value` to shorten. What the app's objects raise propagates (the caller contains it)."""
    t = type(value)
    if t is str:
        return w.clean(value) if w.redact is not None or len(value) > w.max_len else value
    if t in _JSON_SCALARS:
        return value
    if depth >= _MAX_JSON_DEPTH:
        w.truncated = True
        return "<nested too deep>"
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= _MAX_JSON_ITEMS:
                w.truncated = True
                break
            key = k if type(k) is str else str(k)
            out[key] = clean_json(w, v, texts, depth + 1)
            if type(out[key]) is str:
                texts.append((out, key))
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items: list[Any] = []
        for i, v in enumerate(value):
            if i >= _MAX_JSON_ITEMS:
                w.truncated = True
                break
            items.append(clean_json(w, v, texts, depth + 1))
            if type(items[-1]) is str:
                texts.append((items, len(items) - 1))
        return items
    return w.clean(str(value))
