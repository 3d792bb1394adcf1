"""One recorder per role: what a retriever, reranker, generator, tool or pipeline span says.

A recorder is built once per decorated function (span name, kind, static attributes, where its
arguments sit) and then, on every call, reads the call's inputs and its result (or stream) into the
span's attributes. :class:`Recorder` holds what every role shares (starting the span, ending a
stream); each subclass holds one role's reading and nothing else. The wrapping (sync, async,
generator functions) is :mod:`ragtrace.decorators`'.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, cast

from opentelemetry.context import Context, create_key, get_value, set_value
from opentelemetry.trace import SpanKind, set_span_in_context

from . import attributes as A
from . import safety
from .arguments import (
    CONTEXT_NAMES,
    MESSAGES_NAMES,
    MODEL_NAMES,
    PROMPT_NAMES,
    QUERY_NAMES,
    RERANK_DOC_NAMES,
    SELF_NAMES,
    SYSTEM_NAMES,
    TOPK_NAMES,
    ArgRef,
    find,
    params_of,
)
from .config import SETTINGS
from .outcome import end_with, record_error, set_collected
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
from .streaming import StreamState
from .usage import read_chunks, read_response

PIPELINE_SPAN_KEY = create_key("ragtrace.pipeline-span")
PIPELINE_NAME_KEY = create_key("ragtrace.pipeline-name")  # its name, known before the span ends


def _int64(v: Any) -> bool:
    return type(v) is int and -(1 << 63) <= v < 1 << 63


def _clean_static(v: Any) -> Any:
    """Decorator options go on every span without the SDK's cleaning: make them valid OTLP values."""
    if type(v) in (str, bool, float) or _int64(v):
        return v
    return str(v)


class TracedStreamState(StreamState):
    """A stream's state with the call's attribute writer (inputs collected when the call started)."""

    __slots__ = ("writer",)
    writer: AttrWriter


class Recorder:
    """What every role shares: the span's name and kind, its static attributes, starting it, ending a stream.

    Subclasses set :attr:`role` and read their inputs (:meth:`read_inputs`) and results
    (:meth:`write_output`, :meth:`write_stream_output`)."""

    role: ClassVar[str]
    kind: ClassVar[SpanKind] = SpanKind.INTERNAL

    def __init__(self, fn: Any, name: str | None, capture_content: bool | None) -> None:
        target = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
        self.target = target
        qual = getattr(target, "__qualname__", "") or getattr(target, "__name__", "call")
        if "<locals>" in qual:  # a function defined inside another: its own name reads better
            qual = qual.rsplit("<locals>.", 1)[-1]
        self.name = name or qual
        self.capture = capture_content
        self.params = params_of(target)
        self.self_like = bool(self.params) and self.params[0].name in SELF_NAMES and not isinstance(fn, staticmethod)
        self.query: ArgRef | None = None
        self.static: dict[str, Any] = {}

    def arg(self, explicit: Any, names: tuple[str, ...], fallback_first: bool = False) -> ArgRef | None:
        """The parameter the option names (or indexes), else the first of ``names``, else (optionally) the first."""
        return find(self.params, explicit if explicit is not None else names, fallback_first, self.self_like)

    def set_static(self, attrs: dict[str, Any]) -> None:
        """The attributes every span of this function carries (the role first)."""
        self.static = {k: _clean_static(v) for k, v in {A.RAGTRACE_SPAN_ROLE: self.role, **attrs}.items()}

    # --- call start -----------------------------------------------------------------------
    def enter(self, span: Any, ctx: Context) -> tuple[Context, Any]:
        """The context the call runs in, and the span that owns the documents recorded under it."""
        return ctx, span

    def start(self, instance: Any, args: tuple, kwargs: dict) -> tuple[Any, Context, AttrWriter]:
        """Start the span and collect its input attributes; returns (span, otel context, writer).

        Input attributes are kept in the writer and set on the span together with the
        output ones when it ends: one pass through the SDK's attribute cleaning, not two."""
        s = SETTINGS
        capture = s.capture_content if self.capture is None else self.capture
        span = s.tracer.start_span(self.name, kind=self.kind)
        ctx, ledger_span = self.enter(span, set_span_in_context(span))
        if not span.is_recording():  # no provider yet, or sampled out: read nothing
            return span, ctx, AttrWriter(s, capture, {})
        w = AttrWriter(s, capture, self.static.copy(), ledger_span)
        try:
            self.read_inputs(w, instance is not None and self.self_like, instance, args, kwargs)
        except BaseException as exc:  # a hostile argument: keep the span, with what was read
            if isinstance(exc, safety.INTERRUPTS):  # Ctrl-C before the call: end the span, let it through
                end_with(span, w)
                raise
            safety.report("inputs", exc)
        return span, ctx, w

    def read_inputs(self, w: AttrWriter, bound: bool, instance: Any, args: tuple, kwargs: dict) -> None:
        """The call's inputs; by default the query as ``input.value`` (content)."""
        self.read_query(w, bound, args, kwargs)

    def read_query(self, w: AttrWriter, bound: bool, args: tuple, kwargs: dict) -> bool:
        """The query's text as ``input.value`` where capture is on; whether it was offered (the writer may still
        leave it out, over the span's budget)."""
        q = self.query.get(bound, args, kwargs) if self.query is not None else None
        if q is None:
            return False
        text = query_text(q)
        if text is None or not w.capture:
            return False
        w.text(A.INPUT_VALUE, text)  # text: OpenInference's default mime type, not written
        return True

    # --- call end ---------------------------------------------------------------------------
    def output_attributes(self, result: Any, w: AttrWriter) -> dict:
        """Add what the result says to the call's writer; returns all the span's attributes."""
        self.write_output(w, result)
        return w.finish()

    def write_output(self, w: AttrWriter, result: Any) -> None:
        """The answer as ``output.value`` (its text, else ``str()`` of a non-container)."""
        if w.capture and result is not None:
            text = read_response(result).text
            if text is None and not isinstance(result, (dict, list, tuple)):
                text = str(result)
            if text is not None:
                w.text(A.OUTPUT_VALUE, text)

    def write_stream_output(self, w: AttrWriter, chunks: list) -> int | None:
        """What the chunks say (their text as ``output.value``); returns the output token count if reported."""
        info = read_chunks(chunks)
        if w.capture and info.text is not None:
            w.text(A.OUTPUT_VALUE, info.text)
        return info.usage.output_tokens if info.usage is not None else None

    def stream_output_attributes(self, state: StreamState, failed: bool = False) -> dict:
        w = cast(TracedStreamState, state).writer
        out_tokens = self.write_stream_output(w, state.chunks)
        w.attrs.update(state.stream_attributes(out_tokens, failed))
        return w.finish()

    def stream_finished(self, state: StreamState, error: BaseException | None) -> None:
        span = state.span
        try:
            try:
                if span.is_recording():
                    set_span_attributes(span, self.stream_output_attributes(state, error is not None))
            except BaseException as exc:  # hostile chunks: keep what was collected, still record the app's error
                w = cast(TracedStreamState, state).writer
                try:
                    w.attrs.update(state.stream_attributes(None, error is not None))
                except Exception:
                    pass
                set_collected(span, w)
                safety.reraise_interrupt(exc)
                safety.report("stream.output", exc)
            if error is not None:
                record_error(span, error)
        finally:
            span.end(end_time=state.end_time_ns())


class PipelineRecorder(Recorder):
    """The request's root span (OpenInference CHAIN, GenAI workflow): query in, answer out."""

    role = A.ROLE_PIPELINE

    def __init__(
        self,
        fn: Any,
        *,
        name: str | None = None,
        query_arg: str | int | None = None,
        capture_content: bool | None = None,
    ) -> None:
        super().__init__(fn, name, capture_content)
        self.query = self.arg(query_arg, QUERY_NAMES, fallback_first=True)
        self.set_static(
            {
                A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_CHAIN,
                A.RAGTRACE_PIPELINE_NAME: name or self.name,
                A.GEN_AI_OPERATION_NAME: A.GEN_AI_OPERATION_WORKFLOW,
            }
        )
        self.pipeline_name = self.static[A.RAGTRACE_PIPELINE_NAME]

    def enter(self, span: Any, ctx: Context) -> tuple[Context, Any]:
        """Marks the context as inside this pipeline (for ``annotate`` and ``feedback``); only the outermost
        pipeline owns the trace's documents (it forgets them when it ends: ``DocumentLedger``)."""
        ledger_span = None if get_value(PIPELINE_SPAN_KEY, ctx) is not None else span
        ctx = set_value(PIPELINE_SPAN_KEY, span, ctx)
        return set_value(PIPELINE_NAME_KEY, self.pipeline_name, ctx), ledger_span

    def write_output(self, w: AttrWriter, result: Any) -> None:
        if w.span is not None:
            LEDGER.forget(w.span)
        super().write_output(w, result)

    def write_stream_output(self, w: AttrWriter, chunks: list) -> int | None:
        if w.span is not None:  # a pipeline that returns a stream ends when the stream does
            LEDGER.forget(w.span)
        return super().write_stream_output(w, chunks)


class RetrieverRecorder(Recorder):
    """A retrieval (OpenInference RETRIEVER, GenAI retrieval): query in, ranked documents out."""

    role = A.ROLE_RETRIEVER

    def __init__(
        self,
        fn: Any,
        *,
        name: str | None = None,
        query_arg: str | int | None = None,
        capture_content: bool | None = None,
        data_source: str | None = None,
    ) -> None:
        super().__init__(fn, name, capture_content)
        self.query = self.arg(query_arg, QUERY_NAMES, fallback_first=True)
        static: dict[str, Any] = {
            A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_RETRIEVER,
            A.GEN_AI_OPERATION_NAME: A.GEN_AI_OPERATION_RETRIEVAL,
        }
        if data_source:
            static[A.GEN_AI_DATA_SOURCE_ID] = data_source
        self.set_static(static)

    def read_inputs(self, w: AttrWriter, bound: bool, instance: Any, args: tuple, kwargs: dict) -> None:
        if self.read_query(w, bound, args, kwargs):
            w.attrs[A.GEN_AI_RETRIEVAL_QUERY_TEXT] = w.attrs.get(A.INPUT_VALUE, "")

    def write_output(self, w: AttrWriter, result: Any) -> None:
        write_retrieval_output(w, result, SETTINGS.max_documents)

    def write_stream_output(self, w: AttrWriter, chunks: list) -> int | None:
        write_retrieval_output(w, chunks, SETTINGS.max_documents)
        return None


class RerankerRecorder(Recorder):
    """A reranking (OpenInference RERANKER): query and input documents in, reordered documents out."""

    role = A.ROLE_RERANKER

    def __init__(
        self,
        fn: Any,
        *,
        name: str | None = None,
        query_arg: str | int | None = None,
        documents_arg: str | int | None = None,
        model: str | None = None,
        top_k: int | None = None,
        capture_content: bool | None = None,
    ) -> None:
        super().__init__(fn, name, capture_content)
        self.query = self.arg(query_arg, QUERY_NAMES, fallback_first=True)
        self.documents = self.arg(documents_arg, RERANK_DOC_NAMES)
        self.top_k_ref = None if top_k is not None else self.arg(None, TOPK_NAMES)
        static: dict[str, Any] = {A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_RERANKER}
        if model:
            static[A.RERANKER_MODEL_NAME] = model
        if top_k is not None:
            static[A.RERANKER_TOP_K] = top_k
        self.set_static(static)

    def read_inputs(self, w: AttrWriter, bound: bool, instance: Any, args: tuple, kwargs: dict) -> None:
        attrs = w.attrs
        if self.read_query(w, bound, args, kwargs):
            attrs[A.RERANKER_QUERY] = attrs.get(A.INPUT_VALUE, "")
        if self.documents is not None:
            docs = self.documents.get(bound, args, kwargs)
            if docs is not None:
                write_documents(w, A.RERANKER_INPUT_DOCUMENTS, docs, SETTINGS.max_documents)
        if self.top_k_ref is not None:
            k = self.top_k_ref.get(bound, args, kwargs)
            if _int64(k):
                attrs[A.RERANKER_TOP_K] = k

    def write_output(self, w: AttrWriter, result: Any) -> None:
        write_output_documents(w, A.RERANKER_OUTPUT_DOCUMENTS, result, SETTINGS.max_documents)

    def write_stream_output(self, w: AttrWriter, chunks: list) -> int | None:
        write_output_documents(w, A.RERANKER_OUTPUT_DOCUMENTS, chunks, SETTINGS.max_documents)
        return None


class GeneratorRecorder(Recorder):
    """A model call (OpenInference LLM, GenAI chat, span kind CLIENT): model, prompt or messages, the contexts
    it was given; answer, response model, usage and finish reason from the result or its stream."""

    role = A.ROLE_GENERATOR
    kind = SpanKind.CLIENT

    def __init__(
        self,
        fn: Any,
        *,
        name: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        query_arg: str | int | None = None,
        messages_arg: str | int | None = None,
        contexts_arg: str | int | None = None,
        capture_content: bool | None = None,
        operation: str | None = None,
    ) -> None:
        super().__init__(fn, name, capture_content)
        self.model = model
        self.provider = provider or (split_model(model)[0] if model else None)
        self.model_ref = None if model else self.arg(None, MODEL_NAMES)
        self.messages = self.arg(messages_arg, MESSAGES_NAMES)
        self.query = self.arg(query_arg, PROMPT_NAMES)
        self.contexts = self.arg(contexts_arg, CONTEXT_NAMES)
        self.system = self.arg(None, SYSTEM_NAMES)
        static: dict[str, Any] = {
            A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_LLM,
            A.GEN_AI_OPERATION_NAME: operation or A.GEN_AI_OPERATION_CHAT,
        }
        if model:
            static[A.GEN_AI_REQUEST_MODEL] = model
            static[A.LLM_MODEL_NAME] = split_model(model)[1]
        if self.provider:
            static[A.GEN_AI_PROVIDER_NAME] = self.provider
            static[A.LLM_PROVIDER] = self.provider
        self.set_static(static)

    def read_inputs(self, w: AttrWriter, bound: bool, instance: Any, args: tuple, kwargs: dict) -> None:
        if self.model is None:
            self._model(w, bound, instance, args, kwargs)
        if not w.capture:
            return
        if self.contexts is not None:
            c = self.contexts.get(bound, args, kwargs)
            if c is not None:
                write_contexts(w, c, SETTINGS.max_documents)
        first = 0
        if self.system is not None:
            system = self.system.get(bound, args, kwargs)
            if isinstance(system, str) and system:
                first = write_system(w, system)
        # the input is the messages (OpenInference and GenAI), not again in input.value
        msgs = self.messages.get(bound, args, kwargs) if self.messages is not None else None
        if isinstance(msgs, (list, tuple)):
            write_messages(w, msgs, first)
            return
        q = self.query.get(bound, args, kwargs) if self.query is not None else None
        text = query_text(q) if q is not None else None
        if text is not None:
            write_prompt(w, text, first)

    def _model(self, w: AttrWriter, bound: bool, instance: Any, args: tuple, kwargs: dict) -> None:
        """The model from a ``model`` argument or ``self.model``/``self.model_name`` (no ``model=`` option)."""
        m = self.model_ref.get(bound, args, kwargs) if self.model_ref is not None else None
        if m is None and instance is not None:
            m = getattr(instance, "model", None) or getattr(instance, "model_name", None)
        if isinstance(m, str) and m:
            p, name = split_model(m)
            attrs = w.attrs
            attrs[A.GEN_AI_REQUEST_MODEL] = m
            attrs[A.LLM_MODEL_NAME] = name
            if self.provider is None and p:
                attrs[A.GEN_AI_PROVIDER_NAME] = p
                attrs[A.LLM_PROVIDER] = p

    def write_output(self, w: AttrWriter, result: Any) -> None:
        write_llm_response(w, read_response(result))

    def write_stream_output(self, w: AttrWriter, chunks: list) -> int | None:
        info = read_chunks(chunks)
        write_llm_response(w, info)
        return info.usage.output_tokens if info.usage is not None else None


class ToolRecorder(Recorder):
    """A tool call (GenAI ``execute_tool``, OpenInference TOOL): the arguments by parameter name and the result,
    both as JSON (content: only where capture is on), and the function's parameters as a JSON schema."""

    role = A.ROLE_TOOL

    def __init__(
        self,
        fn: Any,
        *,
        name: str | None = None,
        description: str | None = None,
        capture_content: bool | None = None,
    ) -> None:
        super().__init__(fn, name, capture_content)
        tool_name = name or getattr(self.target, "__name__", None) or self.name
        self.name = f"{A.GEN_AI_OPERATION_EXECUTE_TOOL} {tool_name}"  # the GenAI span name
        static: dict[str, Any] = {
            A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_TOOL,
            A.GEN_AI_OPERATION_NAME: A.GEN_AI_OPERATION_EXECUTE_TOOL,
            A.GEN_AI_TOOL_NAME: tool_name,
            A.TOOL_NAME: tool_name,
            A.GEN_AI_TOOL_TYPE: "function",
        }
        if description:
            static[A.GEN_AI_TOOL_DESCRIPTION] = static[A.TOOL_DESCRIPTION] = description
        static[A.TOOL_PARAMETERS] = _json(_parameters_schema(self.params, self.self_like))
        self.set_static(static)
        self.tool_params = _tool_params(self.params, self.self_like)

    def read_inputs(self, w: AttrWriter, bound: bool, instance: Any, args: tuple, kwargs: dict) -> None:
        """The call's arguments by parameter name (as passed: defaults are not filled in), as one JSON object in
        ``gen_ai.tool.call.arguments`` and ``input.value``; extra positional ones under ``args``."""
        if not w.capture:
            return
        called: dict[str, Any] = {}
        skip = 1 if self.self_like and not bound else 0  # an unbound method call passes self first
        positional = list(args[skip:])
        rest: list[Any] = []
        for pname, index, var in self.tool_params:
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

    def write_output(self, w: AttrWriter, result: Any) -> None:
        """``gen_ai.tool.call.result`` (JSON) and ``output.value`` (the text, or the same JSON)."""
        if not w.capture or result is None:
            return
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
