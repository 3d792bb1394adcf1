"""BaseExceptions from the app's objects, and the app's own (issue 13).

Only ragtrace calls ``str()``/``repr()``/attribute reads on arguments, results, documents, chunks
and ``annotate`` values to record them, so what those raise is ragtrace's problem: a
``BaseException`` that is not an ``Exception`` (a custom one, ``GeneratorExit``,
``asyncio.CancelledError``) must not reach the app, which gets its normal result. The other side:
``KeyboardInterrupt``/``SystemExit``/``GeneratorExit`` raised by the app's own decorated function,
generator, async generator or stream propagate unchanged (same object), and so does a real
Ctrl-C or ``SIGTERM`` → ``sys.exit`` that lands while ragtrace is recording (never swallowed).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace import attributes as A
from ragtrace import config, safety


class Boom(BaseException):
    """Not an ``Exception``: what an ``except Exception`` guard lets through."""


CONTAINED = [Boom, GeneratorExit, asyncio.CancelledError]
CONTAINED_IDS = ["custom", "GeneratorExit", "CancelledError"]


class Hostile:
    """Raises ``exc_type`` from ``str``, ``repr`` and every attribute read."""

    def __init__(self, exc_type: type[BaseException]) -> None:
        object.__setattr__(self, "_exc", exc_type)

    def __getattr__(self, name: str) -> Any:
        raise object.__getattribute__(self, "_exc")(f"getattr {name}")

    def __str__(self) -> str:
        raise object.__getattribute__(self, "_exc")("str")

    def __repr__(self) -> str:
        raise object.__getattribute__(self, "_exc")("repr")

    def __float__(self) -> float:
        raise object.__getattribute__(self, "_exc")("float")


class Spans:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def named(self, name: str) -> Any:
        found = [s for s in self.exporter.get_finished_spans() if s.name == name]
        assert len(found) == 1, f"{len(found)} ended spans named {name!r}"
        return found[0]


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spans]:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("RAGTRACE_CAPTURE_CONTENT", raising=False)
    exporter = InMemorySpanExporter()
    tp = TracerProvider(shutdown_on_exit=False)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    safety.reset()
    ragtrace.init(tracer_provider=tp, set_global=False)
    yield Spans(exporter)
    s = config.SETTINGS
    s.capture_content, s.redact = True, None
    s.tracer = trace.get_tracer(config.TRACER_NAME)
    tp.shutdown()


def contained() -> int:
    return safety.internal_error_total()


@contextlib.contextmanager
def nothing_escapes() -> Iterator[None]:
    """Turn an escape into a plain failure (pytest cannot even print some of these exceptions)."""
    try:
        yield
    except BaseException as exc:
        msg = f"{type(exc).__qualname__} escaped from ragtrace into the app"
        raise pytest.fail.Exception(msg, pytrace=False) from None


# --- ragtrace's own reads of the app's objects: contained -------------------------------------
@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
def test_sync_argument_and_result(spans: Spans, exc: type[BaseException]) -> None:
    result = Hostile(exc)

    @ragtrace.pipeline(name="sync")
    def handle(question: Any) -> Any:
        return result

    with nothing_escapes():
        assert handle(Hostile(exc)) is result
    assert spans.named("sync").end_time is not None
    assert contained() >= 2  # the argument and the result


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
async def test_async_argument_and_result(spans: Spans, exc: type[BaseException]) -> None:
    result = Hostile(exc)

    @ragtrace.pipeline(name="async")
    async def handle(question: Any) -> Any:
        await asyncio.sleep(0)
        return result

    with nothing_escapes():
        assert await handle(Hostile(exc)) is result
    assert spans.named("async").end_time is not None
    assert contained() >= 2


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
def test_documents_and_contexts(spans: Spans, exc: type[BaseException]) -> None:
    docs = [Hostile(exc), {"id": "d1", "content": "fine", "score": Hostile(exc)}]

    @ragtrace.retriever
    def retrieve(query: str) -> list:
        return docs

    @ragtrace.reranker
    def rerank(query: str, documents: list) -> list:
        return documents

    @ragtrace.generator(model="m")
    def generate(question: str, contexts: list) -> str:
        return "answer"

    with nothing_escapes():
        assert rerank("q", retrieve("q")) is docs
        assert generate("q", docs) == "answer"
    for name in ("retrieve", "rerank", "generate"):
        assert spans.named(name).end_time is not None
    assert dict(spans.named("retrieve").attributes)[A.INPUT_VALUE] == "q"  # inputs survive a failed output read


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
def test_annotate_values(spans: Spans, exc: type[BaseException]) -> None:
    @ragtrace.pipeline(name="annotated")
    def handle(question: str) -> str:
        h = Hostile(exc)
        ragtrace.annotate(reference=h, session_id=h, user_id=h, tags=[h], metadata={"k": h})  # type: ignore[arg-type]
        ragtrace.annotate(metadata={h: 1}, sample=True)  # type: ignore[dict-item]
        return "ok"

    with nothing_escapes():
        assert handle("q") == "ok"
    assert spans.named("annotated").end_time is not None
    assert contained() >= 1


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
def test_streamed_chunks_from_a_generator(spans: Spans, exc: type[BaseException]) -> None:
    chunks = [Hostile(exc), Hostile(exc)]

    @ragtrace.generator(model="m")
    def stream(prompt: Any) -> Iterator[Any]:
        yield from chunks

    with nothing_escapes():
        assert list(stream(Hostile(exc))) == chunks
    span = spans.named("stream")
    assert span.end_time is not None and dict(span.attributes)[A.RAGTRACE_CHUNK_COUNT] == 2


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
async def test_streamed_chunks_from_an_async_generator(spans: Spans, exc: type[BaseException]) -> None:
    chunks = [Hostile(exc), Hostile(exc)]

    @ragtrace.generator(model="m")
    async def astream(prompt: Any) -> AsyncIterator[Any]:
        for c in chunks:
            yield c

    with nothing_escapes():
        assert [c async for c in astream(Hostile(exc))] == chunks
    assert spans.named("astream").end_time is not None


class Chunks:
    """A returned stream object (like ``openai.Stream``): iterable once."""

    def __init__(self, items: list, fail: BaseException | None = None) -> None:
        self.items = list(items)
        self.fail = fail

    def __iter__(self) -> Chunks:
        return self

    def __next__(self) -> Any:
        if not self.items:
            if self.fail is not None:
                raise self.fail
            raise StopIteration
        return self.items.pop(0)


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
def test_streamed_chunks_from_a_returned_stream(spans: Spans, exc: type[BaseException]) -> None:
    chunks = [Hostile(exc), Hostile(exc)]

    @ragtrace.generator(model="m")
    def call(prompt: Any) -> Chunks:
        return Chunks(chunks)

    with nothing_escapes():
        assert list(call(Hostile(exc))) == chunks
    assert spans.named("call").end_time is not None


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
def test_app_exception_whose_str_raises(spans: Spans, exc: type[BaseException]) -> None:
    """Recording the app's error calls its ``__str__``: the app must still get its own exception."""

    class AppError(Exception):
        def __str__(self) -> str:
            raise exc("str of the app's error")

    err = AppError()

    @ragtrace.pipeline(name="failing")
    def handle(question: str) -> str:
        raise err

    with nothing_escapes(), pytest.raises(AppError) as info:
        handle("q")
    assert info.value is err
    assert spans.named("failing").end_time is not None


@pytest.mark.parametrize("exc", CONTAINED, ids=CONTAINED_IDS)
def test_redaction_hook_raising(spans: Spans, exc: type[BaseException]) -> None:
    def redact(text: str) -> str:
        raise exc("hook")

    ragtrace.configure_limits(redact=redact)

    @ragtrace.generator(model="m")
    def generate(question: str, contexts: list) -> str:
        return "secret answer"

    with nothing_escapes():
        assert generate("secret question", ["secret context"]) == "secret answer"
    attrs = dict(spans.named("generate").attributes)
    assert not any("secret" in str(v) for v in attrs.values())  # nothing leaks unredacted


def test_a_hostile_exception_repr_does_not_break_reporting(spans: Spans) -> None:
    """ragtrace logs what it contained: that exception's own ``repr`` may raise too."""

    class Nasty(BaseException):
        def __repr__(self) -> str:
            raise Nasty()

        def __str__(self) -> str:
            raise Nasty()

    @ragtrace.pipeline(name="nasty")
    def handle(question: Any) -> str:
        return "ok"

    with nothing_escapes():
        assert handle(Hostile(Nasty)) == "ok"
    assert spans.named("nasty").end_time is not None


# --- the app's own BaseExceptions: propagate unchanged -----------------------------------------
APP_RAISES = [KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError]
APP_IDS = ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "CancelledError"]


@pytest.mark.parametrize("exc", APP_RAISES, ids=APP_IDS)
def test_sync_function_raising(spans: Spans, exc: type[BaseException]) -> None:
    err = exc()

    @ragtrace.pipeline(name="p")
    def handle(question: str) -> str:
        raise err

    with pytest.raises(exc) as info:
        handle("q")
    assert info.value is err
    assert spans.named("p").status.status_code.name == "ERROR"


@pytest.mark.parametrize("exc", APP_RAISES, ids=APP_IDS)
async def test_async_function_raising(spans: Spans, exc: type[BaseException]) -> None:
    err = exc()

    @ragtrace.pipeline(name="p")
    async def handle(question: str) -> str:
        await asyncio.sleep(0)
        raise err

    with pytest.raises(exc) as info:
        await handle("q")
    assert info.value is err
    assert spans.named("p").end_time is not None


@pytest.mark.parametrize("exc", APP_RAISES, ids=APP_IDS)
def test_generator_raising(spans: Spans, exc: type[BaseException]) -> None:
    err = exc()

    @ragtrace.generator(model="m")
    def stream(prompt: str) -> Iterator[str]:
        yield "a"
        raise err

    with pytest.raises(exc) as info:
        list(stream("q"))
    assert info.value is err
    assert spans.named("stream").end_time is not None


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit], ids=["KeyboardInterrupt", "SystemExit"])
def test_generator_cleanup_raising_on_close(spans: Spans, exc: type[BaseException]) -> None:
    err = exc()

    @ragtrace.generator(model="m")
    def stream(prompt: str) -> Iterator[str]:
        try:
            yield "a"
            yield "b"
        finally:
            raise err

    g = stream("q")
    assert next(g) == "a"
    with pytest.raises(exc) as info:
        g.close()
    assert info.value is err
    assert spans.named("stream").end_time is not None


@pytest.mark.parametrize("exc", APP_RAISES, ids=APP_IDS)
async def test_async_generator_raising(spans: Spans, exc: type[BaseException]) -> None:
    err = exc()

    @ragtrace.generator(model="m")
    async def astream(prompt: str) -> AsyncIterator[str]:
        yield "a"
        raise err

    with pytest.raises(exc) as info:
        [c async for c in astream("q")]
    assert info.value is err
    assert spans.named("astream").end_time is not None


@pytest.mark.parametrize("exc", APP_RAISES, ids=APP_IDS)
def test_returned_stream_raising(spans: Spans, exc: type[BaseException]) -> None:
    err = exc()

    @ragtrace.generator(model="m")
    def call(prompt: str) -> Chunks:
        return Chunks(["a"], fail=err)

    with pytest.raises(exc) as info:
        list(call("q"))
    assert info.value is err
    assert spans.named("call").end_time is not None


# --- a real interrupt landing while ragtrace records: never swallowed ---------------------------
class SignalsWhenRead:
    """Delivers a real signal to this process the moment ragtrace reads it."""

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def __str__(self) -> str:
        signal.raise_signal(self.sig)
        return "unreachable"

    __repr__ = __str__


def test_ctrl_c_while_recording_an_argument_reaches_the_app(spans: Spans) -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    @ragtrace.pipeline(name="interrupted")
    def handle(question: Any) -> str:
        return "ok"

    with pytest.raises(KeyboardInterrupt):
        handle(SignalsWhenRead(signal.SIGINT))
    assert spans.named("interrupted").end_time is not None  # the span is not left open


def test_sigterm_exit_while_recording_a_result_reaches_the_app(spans: Spans) -> None:
    def on_term(signum: int, frame: Any) -> None:
        sys.exit(3)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:

        @ragtrace.pipeline(name="terminated")
        def handle(question: str) -> Any:
            return SignalsWhenRead(signal.SIGTERM)

        with pytest.raises(SystemExit) as info:
            handle("q")
        assert info.value.code == 3
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert spans.named("terminated").end_time is not None
