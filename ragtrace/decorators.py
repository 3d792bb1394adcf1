"""``@pipeline``, ``@retriever``, ``@reranker``, ``@generator``, ``@tool``: one wrapper factory per
function kind (sync, ``async def``, generator, async generator), built on ``wrapt`` so
signatures, ``inspect.iscoroutinefunction``/``isasyncgenfunction`` and method binding are
preserved; what each role records is its recorder's (:mod:`ragtrace.roles`), built once per
decorated function.

Contract with the app: a failure inside ragtrace is reported to :mod:`ragtrace.safety`
and the call proceeds untraced; the app's own exceptions propagate as the same object and
are recorded on the span (status ERROR, ``exception`` event, ``error.type``). What the app's
objects raise while ragtrace reads them is contained, ``BaseException`` included, except
interrupts (see :mod:`ragtrace.safety`), which end the span and propagate.
"""

from __future__ import annotations

import inspect
import json
import types
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast, overload

import wrapt
from opentelemetry import trace
from opentelemetry.context import attach, detach, get_value
from opentelemetry.trace import Span

from . import attributes as A
from . import safety
from .config import SETTINGS
from .outcome import end, end_with, fail, set_collected
from .recording import AttrWriter, _json, clean_json, set_span_attributes
from .roles import (
    PIPELINE_SPAN_KEY,
    GeneratorRecorder,
    PipelineRecorder,
    Recorder,
    RerankerRecorder,
    RetrieverRecorder,
    ToolRecorder,
    TracedStreamState,
)
from .streaming import StreamProxy, new_private_context, traced_async_generator, traced_generator

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")
_O = ParamSpec("_O")  # a role's options (``name=``, ``model=``...)


class Decorator(Protocol):
    """What ``@ragtrace.retriever(name=...)`` (and the other decorators called with options)
    returns: a decorator that keeps the decorated function's signature."""

    @overload
    def __call__(self, fn: classmethod[_T, _P, _R], /) -> classmethod[_T, _P, _R]: ...
    @overload
    def __call__(self, fn: staticmethod[_P, _R], /) -> staticmethod[_P, _R]: ...
    @overload
    def __call__(self, fn: Callable[_P, _R], /) -> Callable[_P, _R]: ...


class RoleDecorator(Protocol[_O]):
    """What every role's decorator is to a type checker, its options ``_O`` taken from its signature: used bare
    (``@ragtrace.retriever``) it keeps the function's signature; called with a name or options it is a
    :class:`Decorator`."""

    @overload
    def __call__(
        self, fn: classmethod[_T, _P, _R], /, *args: _O.args, **kwargs: _O.kwargs
    ) -> classmethod[_T, _P, _R]: ...
    @overload
    def __call__(self, fn: staticmethod[_P, _R], /, *args: _O.args, **kwargs: _O.kwargs) -> staticmethod[_P, _R]: ...
    @overload
    def __call__(self, fn: Callable[_P, _R], /, *args: _O.args, **kwargs: _O.kwargs) -> Callable[_P, _R]: ...
    @overload
    def __call__(self, fn: str | None = None, /, *args: _O.args, **kwargs: _O.kwargs) -> Decorator: ...


def _role_decorator(f: Callable[Concatenate[Any, _O], Any]) -> RoleDecorator[_O]:
    """Types a role's decorator function as a :class:`RoleDecorator` over its keyword options; at run time the
    function itself (its signature and docstring unchanged)."""
    return cast("RoleDecorator[_O]", f)


_PLAIN_TYPES = frozenset({str, bytes, dict, list, tuple, int, float, bool, type(None), set, frozenset})


def _is_stream(result: Any) -> bool:
    t = type(result)
    if t in _PLAIN_TYPES:
        return False
    if hasattr(t, "__next__") or hasattr(t, "__anext__"):
        return True
    # SDK stream objects that are only iterable (``openai.Stream``-like): recognised by name
    return "Stream" in t.__name__ and (hasattr(t, "__iter__") or hasattr(t, "__aiter__"))


def _wrap_stream(rec: Recorder, span: Any, ctx: Any, w: AttrWriter, result: Any, t0: float) -> Any:
    state = TracedStreamState(span, rec.stream_finished, ctx, t0)
    state.writer = w
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


def _done(rec: Recorder, span: Any, ctx: Any, w: AttrWriter, result: Any, t0: float) -> Any:
    """Record the result and end the span, or hand the span to a stream wrapper."""
    try:
        if _is_stream(result):
            return _wrap_stream(rec, span, ctx, w, result, t0)
        if span.is_recording():
            set_span_attributes(span, rec.output_attributes(result, w))
    except BaseException as exc:  # a hostile result: keep what was read (inputs, partial output)
        set_collected(span, w)
        if isinstance(exc, safety.INTERRUPTS):
            end(span)
            raise
        safety.report("finish", exc)
    end(span)
    return result


# --- wrapper factories, one per function kind ---------------------------------------------
def _sync_factory(rec: Recorder) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            t0 = perf_counter()
            span, ctx, w = rec.start(instance, args, kwargs)
            token = attach(ctx)
        except Exception as exc:
            safety.report("start", exc)
            return wrapped(*args, **kwargs)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            detach(token)
            fail(span, exc, w)
            raise
        detach(token)
        return _done(rec, span, ctx, w, result, t0)

    return wrapper


def _async_factory(rec: Recorder) -> Callable[..., Any]:
    async def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            t0 = perf_counter()
            span, ctx, w = rec.start(instance, args, kwargs)
            token = attach(ctx)
        except Exception as exc:
            safety.report("start", exc)
            return await wrapped(*args, **kwargs)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            detach(token)
            fail(span, exc, w)
            raise
        detach(token)
        return _done(rec, span, ctx, w, result, t0)

    return wrapper


def _generator_factory(rec: Recorder) -> Callable[..., Any]:
    """Generator and async generator functions alike: the wrapper picks the stream wrapper by the object made."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            t0 = perf_counter()
            span, ctx, w = rec.start(instance, args, kwargs)
        except Exception as exc:
            safety.report("start", exc)
            return wrapped(*args, **kwargs)
        try:
            gen = wrapped(*args, **kwargs)
        except BaseException as exc:
            fail(span, exc, w)
            raise
        try:
            return _wrap_stream(rec, span, ctx, w, gen, t0)
        except BaseException as exc:  # ragtrace's failure, not the app's: end the span, no error status
            end_with(span, w)
            safety.reraise_interrupt(exc)
            safety.report("stream.wrap", exc)
            return gen

    return wrapper


def _factory_for(fn: Any) -> Callable[[Recorder], Callable[..., Any]]:
    target = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
    target = inspect.unwrap(target) if callable(target) else target
    if inspect.isasyncgenfunction(target) or inspect.isgeneratorfunction(target):
        return _generator_factory
    if inspect.iscoroutinefunction(target):
        return _async_factory
    return _sync_factory


def _decorate(fn: Any, recorder: Callable[..., Recorder], options: dict[str, Any]) -> Any:
    """The traced function; a callable ragtrace cannot make sense of is returned untraced
    (decoration runs at the app's import time, so it must not fail either)."""
    try:
        return wrapt.FunctionWrapper(fn, _factory_for(fn)(recorder(fn, **options)))
    except BaseException as exc:
        safety.reraise_interrupt(exc)
        safety.report("decorate", exc)
        return fn


def _make_decorator(recorder: Callable[..., Recorder], fn: Any, options: dict[str, Any]) -> Any:
    """Bare (``@ragtrace.retriever``), named (``@ragtrace.retriever("search")``) or with options."""
    if isinstance(fn, str):  # @ragtrace.retriever("name")
        options = {**options, "name": fn}
        fn = None
    if fn is None:
        return lambda f: _decorate(f, recorder, options)
    return _decorate(fn, recorder, options)


@_role_decorator
def pipeline(
    fn: Any = None, *, name: str | None = None, query_arg: str | int | None = None, capture_content: bool | None = None
) -> Any:
    """Trace one request end to end: the root span (``ragtrace.span.role=pipeline``,
    OpenInference CHAIN) with the query as ``input.value`` and the answer as ``output.value``.

    ``name`` is both the span name and ``ragtrace.pipeline.name`` (default: the function's
    qualified name). ``query_arg`` names (or indexes) the query parameter; by default the
    first of query/question/user_input/q/input/prompt, else the first parameter.
    """
    return _make_decorator(PipelineRecorder, fn, dict(name=name, query_arg=query_arg, capture_content=capture_content))


@_role_decorator
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
        RetrieverRecorder,
        fn,
        dict(name=name, query_arg=query_arg, capture_content=capture_content, data_source=data_source),
    )


@_role_decorator
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
        RerankerRecorder,
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


@_role_decorator
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
        GeneratorRecorder,
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


@_role_decorator
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
    return _make_decorator(ToolRecorder, fn, dict(name=name, description=description, capture_content=capture_content))


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
