"""``@pipeline``, ``@retriever``, ``@reranker``, ``@generator``: one wrapper factory per
function kind (sync, ``async def``, generator, async generator), built on ``wrapt`` so
signatures, ``inspect.iscoroutinefunction``/``isasyncgenfunction`` and method binding are
preserved.

Everything that can be worked out once per decorated function (span name, static
attributes, where the query/messages/contexts arguments sit) is worked out at decoration
time in :class:`_Spec`; a call only reads arguments by position or name.

Contract with the app: a failure inside ragtrace is reported to :mod:`ragtrace.safety`
and the call proceeds untraced; the app's own exceptions propagate as the same object and
are recorded on the span (status ERROR, ``exception`` event, ``error.type``). What the app's
objects raise while ragtrace reads them is contained, ``BaseException`` included, except
interrupts (see :mod:`ragtrace.safety`), which end the span and propagate.
"""

from __future__ import annotations

import inspect
import json
import traceback
import types
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

import wrapt
from opentelemetry import trace
from opentelemetry.context import attach, create_key, detach, get_value, set_value
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context

from . import attributes as A
from . import safety
from .config import REDACTED, SETTINGS
from .recording import (
    LEDGER,
    AttrWriter,
    _json,
    clean_json,
    query_text,
    set_span_attributes,
    split_model,
    write_contexts,
    write_documents,
    write_llm_response,
    write_messages,
    write_output_documents,
    write_prompt,
    write_retrieval_output,
    write_system,
)
from .streaming import StreamProxy, StreamState, new_private_context, traced_async_generator, traced_generator
from .usage import read_chunks, read_response

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


class Decorator(Protocol):
    """What ``@ragtrace.retriever(name=...)`` (and the other decorators called with options)
    returns: a decorator that keeps the decorated function's signature."""

    @overload
    def __call__(self, fn: classmethod[_T, _P, _R], /) -> classmethod[_T, _P, _R]: ...
    @overload
    def __call__(self, fn: staticmethod[_P, _R], /) -> staticmethod[_P, _R]: ...
    @overload
    def __call__(self, fn: Callable[_P, _R], /) -> Callable[_P, _R]: ...


PIPELINE_SPAN_KEY = create_key("ragtrace.pipeline-span")
PIPELINE_NAME_KEY = create_key("ragtrace.pipeline-name")  # its name, known before the span ends

_MISSING = object()
_SELF_NAMES = ("self", "cls")
_QUERY_NAMES = ("query", "question", "user_input", "q", "input", "prompt", "query_str", "text")
_MESSAGES_NAMES = ("messages",)
_SYSTEM_NAMES = ("system", "system_prompt", "system_instructions", "instructions")
_PROMPT_NAMES = ("prompt", "query", "question", "user_input", "input", "text")
_CONTEXT_NAMES = (
    "contexts",
    "context",
    "documents",
    "docs",
    "passages",
    "chunks",
    "retrieved_contexts",
    "sources",
    "nodes",
)
_RERANK_DOC_NAMES = ("documents", "docs", "nodes", "contexts", "passages", "candidates", "chunks")
_TOPK_NAMES = ("top_k", "top_n", "k", "n")
_PLAIN_TYPES = frozenset({str, bytes, dict, list, tuple, int, float, bool, type(None), set, frozenset})


class _ArgRef:
    """Where one parameter sits: read it from kwargs by name or args by position."""

    __slots__ = ("default", "i_bound", "i_unbound", "name")

    def __init__(self, name: str, index: int | None, self_like: bool, default: Any = None) -> None:
        self.name = name
        self.default = default
        self.i_unbound = index
        self.i_bound = None if index is None else (index - 1 if self_like else index)

    def get(self, bound: bool, args: tuple, kwargs: dict) -> Any:
        if kwargs:
            v = kwargs.get(self.name, _MISSING)
            if v is not _MISSING:
                return v
        i = self.i_bound if bound else self.i_unbound
        if i is not None and 0 <= i < len(args):
            return args[i]
        return self.default


def _params(fn: Any) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []


def _find(
    params: list[inspect.Parameter], names: tuple[str, ...] | str | int | None, fallback_first: bool, self_like: bool
) -> _ArgRef | None:
    """Locate a parameter by explicit name/index, else by conventional names, else (optionally) the first one."""
    positional_ok = True
    index_of: dict[str, int | None] = {}
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    for i, p in enumerate(params):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            positional_ok = False
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        index_of[p.name] = i if positional_ok and p.kind is not inspect.Parameter.KEYWORD_ONLY else None
    if isinstance(names, int):
        return _ArgRef(f"__arg{names}", names + (1 if self_like else 0), self_like)
    if isinstance(names, str):
        return _ArgRef(names, index_of.get(names), self_like, defaults.get(names))
    if names:
        for n in names:
            if n in index_of:
                return _ArgRef(n, index_of[n], self_like, defaults.get(n))
    if fallback_first:
        start = 1 if self_like else 0
        for p in params[start:]:
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                return _ArgRef(p.name, index_of.get(p.name), self_like, defaults.get(p.name))
            if p.kind is inspect.Parameter.KEYWORD_ONLY:
                return _ArgRef(p.name, None, self_like, defaults.get(p.name))
    return None


def _int64(v: Any) -> bool:
    return type(v) is int and -(1 << 63) <= v < 1 << 63


def _clean_static(v: Any) -> Any:
    """Decorator options go on every span without the SDK's cleaning: make them valid OTLP values."""
    if type(v) in (str, bool, float) or _int64(v):
        return v
    return str(v)


def _provider_from_model(model: str | None) -> str | None:
    return split_model(model)[0] if model else None


class _Spec:
    """Everything about one decorated function that does not change between calls."""

    def __init__(
        self,
        fn: Any,
        role: str,
        *,
        name: str | None = None,
        query_arg: Any = None,
        capture_content: bool | None = None,
        model: str | None = None,
        provider: str | None = None,
        contexts_arg: Any = None,
        messages_arg: Any = None,
        documents_arg: Any = None,
        data_source: str | None = None,
        top_k: int | None = None,
        pipeline_name: str | None = None,
        operation: str | None = None,
        description: str | None = None,
    ) -> None:
        target = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
        self.role = role
        qual = getattr(target, "__qualname__", "") or getattr(target, "__name__", "call")
        if "<locals>" in qual:  # a function defined inside another: its own name reads better
            qual = qual.rsplit("<locals>.", 1)[-1]
        self.name = name or qual
        self.tool_params: list[tuple[str, int | None, bool]] | None = None
        self.capture = capture_content
        self.model = model
        self.provider = provider or _provider_from_model(model)
        params = _params(target)
        self_like = bool(params) and params[0].name in _SELF_NAMES and not isinstance(fn, staticmethod)
        self.query = _find(
            params,
            query_arg if query_arg is not None else _QUERY_NAMES,
            fallback_first=role != A.ROLE_GENERATOR,
            self_like=self_like,
        )
        self.messages = self.contexts = self.documents = self.model_ref = self.top_k_ref = self.system = None
        static: dict[str, Any] = {A.RAGTRACE_SPAN_ROLE: role}
        self.kind = SpanKind.INTERNAL
        if role == A.ROLE_PIPELINE:
            static[A.OPENINFERENCE_SPAN_KIND] = A.SPAN_KIND_CHAIN
            static[A.RAGTRACE_PIPELINE_NAME] = pipeline_name or self.name
            static[A.GEN_AI_OPERATION_NAME] = operation or A.GEN_AI_OPERATION_WORKFLOW
        elif role == A.ROLE_RETRIEVER:
            static[A.OPENINFERENCE_SPAN_KIND] = A.SPAN_KIND_RETRIEVER
            static[A.GEN_AI_OPERATION_NAME] = A.GEN_AI_OPERATION_RETRIEVAL
            if data_source:
                static[A.GEN_AI_DATA_SOURCE_ID] = data_source
        elif role == A.ROLE_RERANKER:
            static[A.OPENINFERENCE_SPAN_KIND] = A.SPAN_KIND_RERANKER
            if model:
                static[A.RERANKER_MODEL_NAME] = model
            if top_k is not None:
                static[A.RERANKER_TOP_K] = top_k
            self.documents = _find(
                params,
                documents_arg if documents_arg is not None else _RERANK_DOC_NAMES,
                fallback_first=False,
                self_like=self_like,
            )
            self.top_k_ref = None if top_k is not None else _find(params, _TOPK_NAMES, False, self_like)
        elif role == A.ROLE_GENERATOR:
            self.kind = SpanKind.CLIENT
            static[A.OPENINFERENCE_SPAN_KIND] = A.SPAN_KIND_LLM
            static[A.GEN_AI_OPERATION_NAME] = operation or A.GEN_AI_OPERATION_CHAT
            if model:
                static[A.GEN_AI_REQUEST_MODEL] = model
                static[A.LLM_MODEL_NAME] = split_model(model)[1]
            else:
                self.model_ref = _find(params, ("model", "model_name"), False, self_like)
            if self.provider:
                static[A.GEN_AI_PROVIDER_NAME] = self.provider
                static[A.LLM_PROVIDER] = self.provider
            self.messages = _find(
                params, messages_arg if messages_arg is not None else _MESSAGES_NAMES, False, self_like
            )
            self.query = _find(params, query_arg if query_arg is not None else _PROMPT_NAMES, False, self_like)
            self.contexts = _find(
                params, contexts_arg if contexts_arg is not None else _CONTEXT_NAMES, False, self_like
            )
            self.system = _find(params, _SYSTEM_NAMES, False, self_like)
        elif role == A.ROLE_TOOL:
            tool_name = name or getattr(target, "__name__", None) or self.name
            self.name = f"{A.GEN_AI_OPERATION_EXECUTE_TOOL} {tool_name}"  # the GenAI span name
            self.query = None
            static[A.OPENINFERENCE_SPAN_KIND] = A.SPAN_KIND_TOOL
            static[A.GEN_AI_OPERATION_NAME] = A.GEN_AI_OPERATION_EXECUTE_TOOL
            static[A.GEN_AI_TOOL_NAME] = static[A.TOOL_NAME] = tool_name
            static[A.GEN_AI_TOOL_TYPE] = "function"
            if description:
                static[A.GEN_AI_TOOL_DESCRIPTION] = static[A.TOOL_DESCRIPTION] = description
            static[A.TOOL_PARAMETERS] = _json(_parameters_schema(params, self_like))
            self.tool_params = _tool_params(params, self_like)
        self.static = {k: _clean_static(v) for k, v in static.items()}
        self.is_pipeline = role == A.ROLE_PIPELINE
        self.self_like = self_like

    # --- call start -----------------------------------------------------------------------
    def start(self, instance: Any, args: tuple, kwargs: dict) -> tuple[Any, Any, AttrWriter]:
        """Start the span and collect its input attributes; returns (span, otel context, writer).

        Input attributes are kept in the writer and set on the span together with the
        output ones when it ends: one pass through the SDK's attribute cleaning, not two."""
        s = SETTINGS
        capture = s.capture_content if self.capture is None else self.capture
        span = s.tracer.start_span(self.name, kind=self.kind)
        ctx = set_span_in_context(span)
        ledger_span = span  # the outermost pipeline forgets its trace's documents when it ends (DocumentLedger)
        if self.is_pipeline:
            if get_value(PIPELINE_SPAN_KEY, ctx) is not None:
                ledger_span = None
            ctx = set_value(PIPELINE_SPAN_KEY, span, ctx)
            ctx = set_value(PIPELINE_NAME_KEY, self.static[A.RAGTRACE_PIPELINE_NAME], ctx)  # for feedback()
        if not span.is_recording():  # no provider yet, or sampled out: read nothing
            return span, ctx, AttrWriter(s, capture, {})
        w = AttrWriter(s, capture, self.static.copy(), ledger_span)
        try:
            self._read_inputs(w, instance, args, kwargs, capture, s)
        except BaseException as exc:  # a hostile argument: keep the span, with what was read
            if isinstance(exc, safety.INTERRUPTS):  # Ctrl-C before the call: end the span, let it through
                _end_with(span, w)
                raise
            safety.report("inputs", exc)
        return span, ctx, w

    def _read_inputs(self, w: AttrWriter, instance: Any, args: tuple, kwargs: dict, capture: bool, s: Any) -> None:
        attrs = w.attrs
        bound = instance is not None and self.self_like
        q = self.query.get(bound, args, kwargs) if self.query is not None else None
        role = self.role
        if role == A.ROLE_GENERATOR:
            self._generator_input(w, bound, instance, args, kwargs, q, capture, s)
        elif role == A.ROLE_TOOL:
            if capture and self.tool_params is not None:
                self._tool_input(w, bound, args, kwargs)
        elif q is not None:
            text = query_text(q)
            if text is not None and capture:
                w.text(A.INPUT_VALUE, text)  # text: OpenInference's default mime type, not written
                if role == A.ROLE_RETRIEVER:
                    attrs[A.GEN_AI_RETRIEVAL_QUERY_TEXT] = attrs.get(A.INPUT_VALUE, "")
                elif role == A.ROLE_RERANKER:
                    attrs[A.RERANKER_QUERY] = attrs.get(A.INPUT_VALUE, "")
        if role == A.ROLE_RERANKER:
            if self.documents is not None:
                docs = self.documents.get(bound, args, kwargs)
                if docs is not None:
                    write_documents(w, A.RERANKER_INPUT_DOCUMENTS, docs, s.max_documents)
            if self.top_k_ref is not None:
                k = self.top_k_ref.get(bound, args, kwargs)
                if _int64(k):
                    attrs[A.RERANKER_TOP_K] = k

    def _tool_input(self, w: AttrWriter, bound: bool, args: tuple, kwargs: dict) -> None:
        """The call's arguments by parameter name (as passed: defaults are not filled in), as one JSON object in
        ``gen_ai.tool.call.arguments`` and ``input.value``; extra positional ones under ``args``."""
        called: dict[str, Any] = {}
        skip = 1 if self.self_like and not bound else 0  # an unbound method call passes self first
        positional = list(args[skip:])
        rest: list[Any] = []
        for pname, index, var in cast("list[tuple[str, int | None, bool]]", self.tool_params):
            if var:  # *args: whatever positional arguments are left
                rest = positional
                positional = []
            elif index is not None and positional:
                called[pname] = positional.pop(0)
        for k, v in kwargs.items():
            called[k] = v
        if rest or positional:
            called["args"] = rest + positional
        texts: list[tuple[Any, Any]] = []
        value = clean_json(w, called, texts)
        if w.json_value(A.GEN_AI_TOOL_CALL_ARGUMENTS, value, texts):
            w.put(A.INPUT_VALUE, w.attrs[A.GEN_AI_TOOL_CALL_ARGUMENTS])
            w.attrs[A.INPUT_MIME_TYPE] = A.MIME_JSON

    def _generator_input(
        self, w: AttrWriter, bound: bool, instance: Any, args: tuple, kwargs: dict, q: Any, capture: bool, s: Any
    ) -> None:
        attrs = w.attrs
        if self.model is None:
            m = self.model_ref.get(bound, args, kwargs) if self.model_ref is not None else None
            if m is None and instance is not None:
                m = getattr(instance, "model", None) or getattr(instance, "model_name", None)
            if isinstance(m, str) and m:
                p, name = split_model(m)
                attrs[A.GEN_AI_REQUEST_MODEL] = m
                attrs[A.LLM_MODEL_NAME] = name
                if self.provider is None and p:
                    attrs[A.GEN_AI_PROVIDER_NAME] = p
                    attrs[A.LLM_PROVIDER] = p
        if not capture:
            return
        if self.contexts is not None:
            c = self.contexts.get(bound, args, kwargs)
            if c is not None:
                write_contexts(w, c, s.max_documents)
        first = 0
        if self.system is not None:
            system = self.system.get(bound, args, kwargs)
            if isinstance(system, str) and system:
                first = write_system(w, system)
        # the input is the messages (OpenInference and GenAI), not again in input.value
        msgs = self.messages.get(bound, args, kwargs) if self.messages is not None else None
        if isinstance(msgs, (list, tuple)):
            write_messages(w, msgs, first)
        else:
            text = query_text(q) if q is not None else None
            if text is not None:
                write_prompt(w, text, first)

    # --- call end ---------------------------------------------------------------------------
    def output_attributes(self, result: Any, w: AttrWriter) -> dict:
        """Add what the result says to the call's writer; returns all the span's attributes."""
        s = SETTINGS
        capture = w.capture
        role = self.role
        if role == A.ROLE_RETRIEVER:
            write_retrieval_output(w, result, s.max_documents)
        elif role == A.ROLE_RERANKER:
            write_output_documents(w, A.RERANKER_OUTPUT_DOCUMENTS, result, s.max_documents)
        elif role == A.ROLE_GENERATOR:
            write_llm_response(w, read_response(result))
        elif role == A.ROLE_TOOL:
            if capture and result is not None:
                _tool_output(w, result)
        else:
            if role == A.ROLE_PIPELINE and w.span is not None:
                LEDGER.forget(w.span)
            if capture and result is not None:
                info = read_response(result)
                text = info.text
                if text is None and not isinstance(result, (dict, list, tuple)):
                    text = str(result)
                if text is not None:
                    w.text(A.OUTPUT_VALUE, text)
        return w.finish()

    def stream_finished(self, state: StreamState, error: BaseException | None) -> None:
        span = state.span
        try:
            try:
                if span.is_recording():
                    set_span_attributes(span, self.stream_output_attributes(state, error is not None))
            except BaseException as exc:  # hostile chunks: keep what was collected, still record the app's error
                w = cast(_TracedStreamState, state).writer
                try:
                    w.attrs.update(state.stream_attributes(None, error is not None))
                except Exception:
                    pass
                _set_collected(span, w)
                safety.reraise_interrupt(exc)
                safety.report("stream.output", exc)
            if error is not None:
                _record_error(span, error)
        finally:
            span.end(end_time=state.end_time_ns())

    def stream_output_attributes(self, state: StreamState, failed: bool = False) -> dict:
        s = SETTINGS
        w = cast(_TracedStreamState, state).writer
        capture = w.capture
        role = self.role
        out_tokens = None
        if role in (A.ROLE_RETRIEVER, A.ROLE_RERANKER):
            if role == A.ROLE_RETRIEVER:
                write_retrieval_output(w, state.chunks, s.max_documents)
            else:
                write_output_documents(w, A.RERANKER_OUTPUT_DOCUMENTS, state.chunks, s.max_documents)
        else:
            info = read_chunks(state.chunks)
            if role == A.ROLE_GENERATOR:
                write_llm_response(w, info)
            elif capture and info.text is not None:
                w.text(A.OUTPUT_VALUE, info.text)
            if info.usage is not None:
                out_tokens = info.usage.output_tokens
        w.attrs.update(state.stream_attributes(out_tokens, failed))
        return w.finish()


def _tool_output(w: AttrWriter, result: Any) -> None:
    """A tool's result: ``gen_ai.tool.call.result`` (JSON) and ``output.value`` (the text, or the same JSON)."""
    texts: list[tuple[Any, Any]] = []
    holder = [clean_json(w, result, texts)]
    if type(holder[0]) is str:
        texts.append((holder, 0))
    if not w.json_value(A.GEN_AI_TOOL_CALL_RESULT, holder[0], texts):
        return
    if type(holder[0]) is str:
        w.put(A.OUTPUT_VALUE, holder[0])
    else:
        w.put(A.OUTPUT_VALUE, w.attrs[A.GEN_AI_TOOL_CALL_RESULT])
        w.attrs[A.OUTPUT_MIME_TYPE] = A.MIME_JSON


_JSON_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
    "dict": "object",
}


def _json_type(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return _JSON_TYPES.get(name.split("[", 1)[0].rsplit(".", 1)[-1].strip())


def _parameters_schema(params: list[inspect.Parameter], self_like: bool) -> dict[str, Any]:
    """OpenInference ``tool.parameters``: a JSON schema of what the tool takes, from its signature
    (types from plain annotations only)."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in params[1 if self_like else 0 :]:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        t = _json_type(p.annotation)
        props[p.name] = {"type": t} if t else {}
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required}


def _tool_params(params: list[inspect.Parameter], self_like: bool) -> list[tuple[str, int | None, bool]]:
    """(name, position or None for keyword-only, is ``*args``) for each parameter after ``self``."""
    out: list[tuple[str, int | None, bool]] = []
    for i, p in enumerate(params[1 if self_like else 0 :]):
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            out.append((p.name, None, True))
        else:
            out.append((p.name, None if p.kind is inspect.Parameter.KEYWORD_ONLY else i, False))
    return out


class _TracedStreamState(StreamState):
    __slots__ = ("writer",)
    writer: AttrWriter


def _redacted(redact: Any, text: str) -> str:
    try:
        out = redact(text)
        return out if type(out) is str else REDACTED
    except BaseException as exc:
        safety.reraise_interrupt(exc)
        safety.report("redact", exc)
        return REDACTED


def _record_error(span: Any, exc: BaseException) -> None:
    """Status ERROR, ``error.type`` and an ``exception`` event; the redaction hook also runs on
    the exception's message and stack trace, since an app's error text may quote its input."""
    try:
        if span.is_recording():
            span.set_attribute(A.ERROR_TYPE, type(exc).__qualname__)
            message = str(exc)
            extra = None
            redact = SETTINGS.redact
            if redact is not None:
                message = _redacted(redact, message)
                stack = _redacted(redact, "".join(traceback.format_exception(exc)))
                extra = {"exception.message": message, "exception.stacktrace": stack}
            span.record_exception(exc, attributes=extra)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"[:1024]))
    except BaseException as e:  # the app's exception's __str__ raised: the app still gets its exception
        safety.reraise_interrupt(e)
        safety.report("record_error", e)


def _set_collected(span: Any, w: AttrWriter) -> None:
    try:
        if span.is_recording():
            span.set_attributes(w.finish())
    except Exception as e:
        safety.report("record_inputs", e)


def _end(span: Any) -> None:
    try:
        span.end()
    except Exception as e:
        safety.report("span.end", e)


def _end_with(span: Any, w: AttrWriter) -> None:
    """End the span with the attributes collected so far (after a failure inside ragtrace)."""
    _set_collected(span, w)
    _end(span)


def _fail(span: Any, exc: BaseException, w: AttrWriter) -> None:
    """The app raised: record what was collected and the exception, end the span."""
    try:
        _set_collected(span, w)
        _record_error(span, exc)
    finally:
        _end(span)


def _is_stream(result: Any) -> bool:
    t = type(result)
    if t in _PLAIN_TYPES:
        return False
    if hasattr(t, "__next__") or hasattr(t, "__anext__"):
        return True
    # SDK stream objects that are only iterable (``openai.Stream``-like): recognised by name
    return "Stream" in t.__name__ and (hasattr(t, "__iter__") or hasattr(t, "__aiter__"))


def _new_state(spec: _Spec, span: Any, ctx: Any, w: AttrWriter, t0: float | None = None) -> _TracedStreamState:
    st = _TracedStreamState(span, spec.stream_finished, ctx, t0)
    st.writer = w
    return st


def _wrap_stream(spec: _Spec, span: Any, ctx: Any, w: AttrWriter, result: Any, t0: float) -> Any:
    state = _new_state(spec, span, ctx, w, t0)
    if isinstance(result, types.GeneratorType):
        run = new_private_context(ctx).run
        g = traced_generator(result, state, run)
        weakref.finalize(g, state.finish_abandoned)
        return g
    if isinstance(result, types.AsyncGeneratorType):
        ag = traced_async_generator(result, state)
        weakref.finalize(ag, state.finish_abandoned)
        return ag
    return StreamProxy(result, state)


def _done(spec: _Spec, span: Any, ctx: Any, w: AttrWriter, result: Any, t0: float) -> Any:
    """Record the result and end the span, or hand the span to a stream wrapper."""
    try:
        if _is_stream(result):
            return _wrap_stream(spec, span, ctx, w, result, t0)
        if span.is_recording():
            set_span_attributes(span, spec.output_attributes(result, w))
    except BaseException as exc:  # a hostile result: keep what was read (inputs, partial output)
        _set_collected(span, w)
        if isinstance(exc, safety.INTERRUPTS):
            _end(span)
            raise
        safety.report("finish", exc)
    _end(span)
    return result


# --- wrapper factories, one per function kind ---------------------------------------------
def _sync_factory(spec: _Spec) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            t0 = perf_counter()
            span, ctx, w = spec.start(instance, args, kwargs)
            token = attach(ctx)
        except Exception as exc:
            safety.report("start", exc)
            return wrapped(*args, **kwargs)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            detach(token)
            _fail(span, exc, w)
            raise
        detach(token)
        return _done(spec, span, ctx, w, result, t0)

    return wrapper


def _async_factory(spec: _Spec) -> Callable[..., Any]:
    async def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            t0 = perf_counter()
            span, ctx, w = spec.start(instance, args, kwargs)
            token = attach(ctx)
        except Exception as exc:
            safety.report("start", exc)
            return await wrapped(*args, **kwargs)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            detach(token)
            _fail(span, exc, w)
            raise
        detach(token)
        return _done(spec, span, ctx, w, result, t0)

    return wrapper


def _generator_factory(spec: _Spec) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            t0 = perf_counter()
            span, ctx, w = spec.start(instance, args, kwargs)
        except Exception as exc:
            safety.report("start", exc)
            return wrapped(*args, **kwargs)
        try:
            gen = wrapped(*args, **kwargs)
        except BaseException as exc:
            _fail(span, exc, w)
            raise
        try:
            return _wrap_stream(spec, span, ctx, w, gen, t0)
        except BaseException as exc:  # ragtrace's failure, not the app's: end the span, no error status
            _end_with(span, w)
            safety.reraise_interrupt(exc)
            safety.report("stream.wrap", exc)
            return gen

    return wrapper


_asyncgen_factory = _generator_factory  # same shape: the wrapper picks the async stream wrapper


def _kind_of(fn: Any) -> str:
    target = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
    target = inspect.unwrap(target) if callable(target) else target
    if inspect.isasyncgenfunction(target):
        return "asyncgen"
    if inspect.iscoroutinefunction(target):
        return "async"
    if inspect.isgeneratorfunction(target):
        return "generator"
    return "sync"


_FACTORIES = {
    "sync": _sync_factory,
    "async": _async_factory,
    "generator": _generator_factory,
    "asyncgen": _asyncgen_factory,
}


def _decorate(fn: Any, role: str, options: dict[str, Any]) -> Any:
    """The traced function; a callable ragtrace cannot make sense of is returned untraced
    (decoration runs at the app's import time, so it must not fail either)."""
    try:
        spec = _Spec(fn, role, **options)
        return wrapt.FunctionWrapper(fn, _FACTORIES[_kind_of(fn)](spec))
    except BaseException as exc:
        safety.reraise_interrupt(exc)
        safety.report("decorate", exc)
        return fn


def _make_decorator(role: str, fn: Any, options: dict[str, Any]) -> Any:
    if isinstance(fn, str):  # @ragtrace.retriever("name")
        options = {**options, "name": fn}
        fn = None
    if fn is None:
        return lambda f: _decorate(f, role, options)
    return _decorate(fn, role, options)


@overload
def pipeline(
    fn: classmethod[_T, _P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
) -> classmethod[_T, _P, _R]: ...
@overload
def pipeline(
    fn: staticmethod[_P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
) -> staticmethod[_P, _R]: ...
@overload
def pipeline(
    fn: Callable[_P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
) -> Callable[_P, _R]: ...
@overload
def pipeline(
    fn: str | None = None,
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
) -> Decorator: ...
def pipeline(
    fn: Any = None, *, name: str | None = None, query_arg: str | int | None = None, capture_content: bool | None = None
) -> Any:
    """Trace one request end to end: the root span (``ragtrace.span.role=pipeline``,
    OpenInference CHAIN) with the query as ``input.value`` and the answer as ``output.value``.

    ``name`` is both the span name and ``ragtrace.pipeline.name`` (default: the function's
    qualified name). ``query_arg`` names (or indexes) the query parameter; by default the
    first of query/question/user_input/q/input/prompt, else the first parameter.
    """
    return _make_decorator(
        A.ROLE_PIPELINE, fn, dict(name=name, query_arg=query_arg, capture_content=capture_content, pipeline_name=name)
    )


@overload
def retriever(
    fn: classmethod[_T, _P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
    data_source: str | None = None,
) -> classmethod[_T, _P, _R]: ...
@overload
def retriever(
    fn: staticmethod[_P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
    data_source: str | None = None,
) -> staticmethod[_P, _R]: ...
@overload
def retriever(
    fn: Callable[_P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
    data_source: str | None = None,
) -> Callable[_P, _R]: ...
@overload
def retriever(
    fn: str | None = None,
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
    data_source: str | None = None,
) -> Decorator: ...
def retriever(
    fn: Any = None,
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    capture_content: bool | None = None,
    data_source: str | None = None,
) -> Any:
    """Trace a retrieval: query in, documents out (in rank order, with id, content, score, metadata).

    The return value may be any document shape :mod:`ragtrace.documents` reads, or a
    container with a ``documents``/``nodes``/... list; a generator of documents works too.
    ``data_source`` sets ``gen_ai.data_source.id``.
    """
    return _make_decorator(
        A.ROLE_RETRIEVER,
        fn,
        dict(name=name, query_arg=query_arg, capture_content=capture_content, data_source=data_source),
    )


@overload
def reranker(
    fn: classmethod[_T, _P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    documents_arg: str | int | None = None,
    model: str | None = None,
    top_k: int | None = None,
    capture_content: bool | None = None,
) -> classmethod[_T, _P, _R]: ...
@overload
def reranker(
    fn: staticmethod[_P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    documents_arg: str | int | None = None,
    model: str | None = None,
    top_k: int | None = None,
    capture_content: bool | None = None,
) -> staticmethod[_P, _R]: ...
@overload
def reranker(
    fn: Callable[_P, _R],
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    documents_arg: str | int | None = None,
    model: str | None = None,
    top_k: int | None = None,
    capture_content: bool | None = None,
) -> Callable[_P, _R]: ...
@overload
def reranker(
    fn: str | None = None,
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    documents_arg: str | int | None = None,
    model: str | None = None,
    top_k: int | None = None,
    capture_content: bool | None = None,
) -> Decorator: ...
def reranker(
    fn: Any = None,
    *,
    name: str | None = None,
    query_arg: str | int | None = None,
    documents_arg: str | int | None = None,
    model: str | None = None,
    top_k: int | None = None,
    capture_content: bool | None = None,
) -> Any:
    """Trace a reranking step: ``reranker.input_documents`` from the documents argument,
    ``reranker.output_documents`` from the result, ``reranker.query``/``top_k``/``model_name``."""
    return _make_decorator(
        A.ROLE_RERANKER,
        fn,
        dict(
            name=name,
            query_arg=query_arg,
            documents_arg=documents_arg,
            model=model,
            top_k=top_k,
            capture_content=capture_content,
        ),
    )


@overload
def generator(
    fn: classmethod[_T, _P, _R],
    *,
    name: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    query_arg: str | int | None = None,
    messages_arg: str | int | None = None,
    contexts_arg: str | int | None = None,
    capture_content: bool | None = None,
    operation: str | None = None,
) -> classmethod[_T, _P, _R]: ...
@overload
def generator(
    fn: staticmethod[_P, _R],
    *,
    name: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    query_arg: str | int | None = None,
    messages_arg: str | int | None = None,
    contexts_arg: str | int | None = None,
    capture_content: bool | None = None,
    operation: str | None = None,
) -> staticmethod[_P, _R]: ...
@overload
def generator(
    fn: Callable[_P, _R],
    *,
    name: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    query_arg: str | int | None = None,
    messages_arg: str | int | None = None,
    contexts_arg: str | int | None = None,
    capture_content: bool | None = None,
    operation: str | None = None,
) -> Callable[_P, _R]: ...
@overload
def generator(
    fn: str | None = None,
    *,
    name: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    query_arg: str | int | None = None,
    messages_arg: str | int | None = None,
    contexts_arg: str | int | None = None,
    capture_content: bool | None = None,
    operation: str | None = None,
) -> Decorator: ...
def generator(
    fn: Any = None,
    *,
    name: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    query_arg: str | int | None = None,
    messages_arg: str | int | None = None,
    contexts_arg: str | int | None = None,
    capture_content: bool | None = None,
    operation: str | None = None,
) -> Any:
    """Trace answer generation (OpenInference LLM, GenAI ``chat``).

    Records the model (``model=`` or a ``model`` argument or ``self.model``), the prompt
    (a ``prompt``/``query``/... argument) or chat ``messages``, the contexts it was given
    (a ``contexts``/``documents``/... argument, or ``contexts_arg=``) as
    ``ragtrace.generator.contexts``, and from the result: answer, response model, token
    usage, finish reason. A function that yields, or returns a stream, is timed as a stream
    (see :mod:`ragtrace.streaming` for TTFT/TPOT).
    """
    return _make_decorator(
        A.ROLE_GENERATOR,
        fn,
        dict(
            name=name,
            model=model,
            provider=provider,
            query_arg=query_arg,
            messages_arg=messages_arg,
            contexts_arg=contexts_arg,
            capture_content=capture_content,
            operation=operation,
        ),
    )


@overload
def tool(
    fn: classmethod[_T, _P, _R],
    *,
    name: str | None = None,
    description: str | None = None,
    capture_content: bool | None = None,
) -> classmethod[_T, _P, _R]: ...
@overload
def tool(
    fn: staticmethod[_P, _R],
    *,
    name: str | None = None,
    description: str | None = None,
    capture_content: bool | None = None,
) -> staticmethod[_P, _R]: ...
@overload
def tool(
    fn: Callable[_P, _R],
    *,
    name: str | None = None,
    description: str | None = None,
    capture_content: bool | None = None,
) -> Callable[_P, _R]: ...
@overload
def tool(
    fn: str | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    capture_content: bool | None = None,
) -> Decorator: ...
def tool(
    fn: Any = None,
    *,
    name: str | None = None,
    description: str | None = None,
    capture_content: bool | None = None,
) -> Any:
    """Trace one tool call (OpenTelemetry GenAI ``execute_tool``, OpenInference TOOL).

    ``name`` is the tool's name, ``gen_ai.tool.name`` and ``tool.name`` (default: the function's
    name); the span is named ``execute_tool {name}``. ``description`` sets ``gen_ai.tool.description``.
    ``tool.parameters`` is a JSON schema of the function's parameters. Where content capture is on,
    the call's arguments by parameter name go to ``gen_ai.tool.call.arguments`` (JSON, also
    ``input.value``) and the result to ``gen_ai.tool.call.result`` (JSON; its text or JSON also
    ``output.value``). The collector reads these as the request's ``tools_called``; compare them with
    ``annotate(expected_tools=...)`` through the ``tool_correctness`` metric.
    """
    return _make_decorator(A.ROLE_TOOL, fn, dict(name=name, description=description, capture_content=capture_content))


def _expected_tool(w: AttrWriter, item: Any, texts: list[tuple[Any, Any]], capture: bool) -> dict[str, Any]:
    """One expected tool call as ``{"name", "args"?}`` (arguments, being content, only where capture is on)."""
    if isinstance(item, str):
        return {"name": item}
    if isinstance(item, dict):
        call: dict[str, Any] = {"name": str(item["name"])}
        args = item.get("args", item.get("arguments", item.get("input_parameters")))
        if isinstance(args, str):
            args = json.loads(args)
        if args is not None and not isinstance(args, dict):
            raise TypeError(f"expected tool arguments must be a dict, not {type(args).__name__}")
        if args and capture:
            call["args"] = clean_json(w, args, texts)
        return call
    raise TypeError(f"an expected tool is a name or a dict with a name, not {type(item).__name__}")


def _write_expected_tools(w: AttrWriter, expected_tools: Any, capture: bool) -> None:
    """``ragtrace.reference.tool_calls``; a malformed list is reported and left out (the other facts stay)."""
    try:
        texts: list[tuple[Any, Any]] = []
        calls = [_expected_tool(w, t, texts, capture) for t in expected_tools]
    except BaseException as exc:
        safety.reraise_interrupt(exc)
        safety.report("annotate.expected_tools", exc)
        return
    if not w.json_value(A.RAGTRACE_REFERENCE_TOOL_CALLS, calls, texts):  # too long for the limits
        for c in calls:  # the names alone, rather than nothing
            c.pop("args", None)
        w.json_value(A.RAGTRACE_REFERENCE_TOOL_CALLS, calls, [])


def annotate(
    *,
    reference: str | None = None,
    session_id: str | None = None,
    user_id: str | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    sample: bool | None = None,
    expected_tools: list[str | dict[str, Any]] | None = None,
) -> bool:
    """Attach request-level facts to the current pipeline (root) span.

    ``reference`` (a reference answer, e.g. for golden-set canaries) → ``ragtrace.reference``
    (text: not recorded when content capture is off); ``session_id`` → ``session.id`` and
    ``gen_ai.conversation.id``; ``user_id`` → ``user.id``; ``tags`` → ``tag.tags``;
    ``metadata`` → ``metadata`` (JSON); ``sample=True`` asks the collector to always score this
    request (``ragtrace.sample``); ``expected_tools`` (tool names, or ``{"name": ..., "args": {...}}``
    dicts) → ``ragtrace.reference.tool_calls`` (JSON), what the collector's ``tool_correctness``
    compares the request's tool calls with (arguments only recorded when content capture is on).
    Outside a pipeline it writes on the current span.
    Returns whether anything was recorded. Never raises.
    """
    try:
        span = cast("Span | None", get_value(PIPELINE_SPAN_KEY))
        if span is None:
            span = trace.get_current_span()
        if not span.is_recording():
            return False
        s = SETTINGS
        w = AttrWriter(s, s.capture_content, {})
        attrs = w.attrs
        if reference is not None and s.capture_content:
            w.text(A.RAGTRACE_REFERENCE, str(reference))
        if session_id is not None:
            attrs[A.SESSION_ID] = str(session_id)
            attrs[A.GEN_AI_CONVERSATION_ID] = str(session_id)
        if user_id is not None:
            attrs[A.USER_ID] = str(user_id)
        if tags:
            attrs[A.TAG_TAGS] = tuple(str(t) for t in tags)
        if metadata:
            w.text(A.METADATA, _json(metadata))
        if sample is not None:
            attrs[A.RAGTRACE_SAMPLE] = bool(sample)
        if expected_tools is not None:
            _write_expected_tools(w, expected_tools, s.capture_content)
        span.set_attributes(w.finish())
        return True
    except BaseException as exc:  # values whose str() raises
        safety.reraise_interrupt(exc)
        safety.report("annotate", exc)
        return False


def current_trace_id() -> str | None:
    """The current trace id as 32 hex digits (None outside a recording span)."""
    try:
        span = cast("Span | None", get_value(PIPELINE_SPAN_KEY)) or trace.get_current_span()
        sc = span.get_span_context()
        return format(sc.trace_id, "032x") if sc.is_valid else None
    except Exception as exc:
        safety.report("current_trace_id", exc)
        return None
