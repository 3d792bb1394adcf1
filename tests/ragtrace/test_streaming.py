"""Streams: TTFT/TPOT with controlled delays, abandoned streams, errors, returned stream objects."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from opentelemetry import trace

import ragtrace
from ragtrace import attributes as A

FIRST = 0.08
GAP = 0.02


@ragtrace.generator(model="m")
def slow_tokens(prompt: str, n: int = 5):
    time.sleep(FIRST)
    for i in range(n):
        if i:
            time.sleep(GAP)
        yield f"t{i} "


@ragtrace.generator(model="m")
async def aslow_tokens(prompt: str, n: int = 5):
    await asyncio.sleep(FIRST)
    for i in range(n):
        if i:
            await asyncio.sleep(GAP)
        yield f"t{i} "


def _check_timing(a: dict, chunks: int) -> None:
    ttft = a[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    tpot = a[A.RAGTRACE_TIME_PER_OUTPUT_TOKEN]
    assert a[A.RAGTRACE_CHUNK_COUNT] == chunks
    assert a[A.RAGTRACE_TPOT_BASIS] == "chunks"
    assert FIRST * 0.9 <= ttft < FIRST + 1.0
    assert GAP * 0.9 <= tpot < GAP + 0.5
    assert tpot < ttft  # ordering: the first token was made slow on purpose


def test_sync_generator_ttft_and_tpot(spans):
    out = "".join(slow_tokens("p"))
    assert out == "t0 t1 t2 t3 t4 "
    span = spans.named("slow_tokens")
    a = dict(span.attributes)
    _check_timing(a, 5)
    assert a[A.GEN_AI_REQUEST_STREAM] is True and a[A.OUTPUT_VALUE] == out
    assert A.RAGTRACE_STREAM_ABANDONED not in a
    assert (span.end_time - span.start_time) / 1e9 >= FIRST + 4 * GAP * 0.9


async def test_async_generator_ttft_and_tpot(spans):
    out = "".join([t async for t in aslow_tokens("p")])
    assert out == "t0 t1 t2 t3 t4 "
    _check_timing(spans.attrs("aslow_tokens"), 5)


def test_consumer_time_between_chunks_counts_in_tpot_not_ttft(spans):
    for _ in slow_tokens("p", n=3):
        time.sleep(0.03)  # the consumer is slow too
    a = spans.attrs("slow_tokens")
    assert a[A.RAGTRACE_TIME_PER_OUTPUT_TOKEN] >= 0.03 + GAP * 0.9
    assert a[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] < FIRST + 1.0


def test_abandoned_by_break_ends_span_and_leaks_no_context(spans):
    outer = trace.get_current_span()
    for i, _ in enumerate(slow_tokens("p", n=10)):
        assert trace.get_current_span() is outer  # the span is not current in the consumer
        if i == 1:
            break
    gc.collect()
    a = spans.attrs("slow_tokens")
    assert a[A.RAGTRACE_STREAM_ABANDONED] is True
    assert a[A.RAGTRACE_CHUNK_COUNT] == 2 and a[A.OUTPUT_VALUE] == "t0 t1 "
    assert A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in a
    assert A.RAGTRACE_TIME_PER_OUTPUT_TOKEN not in a  # only completed streams get a TPOT
    assert trace.get_current_span() is outer


def test_abandoned_by_close(spans):
    g = slow_tokens("p", n=10)
    next(g)
    g.close()
    span = spans.named("slow_tokens")
    assert dict(span.attributes)[A.RAGTRACE_STREAM_ABANDONED] is True
    assert span.status.status_code.name == "UNSET"


def test_never_started_stream_is_ended_on_gc(spans):
    g = slow_tokens("p")
    del g
    gc.collect()
    span = spans.named("slow_tokens")
    assert span.end_time is not None


async def test_async_abandoned_stream_ends(spans):
    agen = aslow_tokens("p", n=10)
    async for _ in agen:
        break
    await agen.aclose()
    a = spans.attrs("aslow_tokens")
    assert a[A.RAGTRACE_STREAM_ABANDONED] is True and a[A.RAGTRACE_CHUNK_COUNT] == 1


def test_send_and_return_value_are_forwarded(spans):
    @ragtrace.generator
    def echo(prompt):
        got = yield "ready"
        while got is not None:
            got = yield got.upper()
        return "done"

    g = echo("p")
    assert next(g) == "ready"
    assert g.send("abc") == "ABC"
    with pytest.raises(StopIteration) as stop:
        g.send(None)
    assert stop.value.value == "done"
    assert spans.attrs("echo")[A.OUTPUT_VALUE] == "readyABC"


def test_spans_created_inside_the_generator_body_nest_under_it(spans):
    @ragtrace.retriever
    def lookup(query):
        return ["x"]

    @ragtrace.generator
    def body(prompt):
        yield "a"
        lookup("inside")
        yield "b"

    @ragtrace.pipeline(name="outer")
    def outer(q):
        return "".join(body(q))

    outer("q")
    assert spans.named("lookup").parent.span_id == spans.named("body").context.span_id
    assert spans.named("body").parent.span_id == spans.named("outer").context.span_id


class Chunk:
    """OpenAI-shaped stream chunk (attribute access)."""

    def __init__(self, text=None, usage=None, finish=None, model="gpt-test-2024"):
        delta = type("Delta", (), {"content": text})()
        choice = type("Choice", (), {"delta": delta, "finish_reason": finish})()
        self.choices = [choice] if text is not None or finish else []
        self.usage = usage
        self.model = model
        self.id = "chatcmpl-9"


class FakeStream:
    """Stands for an SDK stream object: iterable, closable, with extra attributes."""

    def __init__(self, chunks, delay=0.0):
        self._chunks = list(chunks)
        self.delay = delay
        self.closed = False
        self.response = "http-response"

    def __iter__(self):
        for c in self._chunks:
            time.sleep(self.delay)
            yield c

    def close(self):
        self.closed = True


def test_returned_stream_object_with_usage_gives_token_based_tpot(spans):
    usage = type("U", (), {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29})()
    chunks = [Chunk("Hel"), Chunk("lo"), Chunk(" world", finish="stop"), Chunk(None, usage=usage)]

    @ragtrace.generator(model="openai/gpt-test")
    def complete(prompt):
        return FakeStream(chunks, delay=0.01)

    stream = complete("p")
    assert stream.response == "http-response"  # attributes of the real stream still reachable
    text = "".join(c.choices[0].delta.content for c in stream if c.choices)
    assert text == "Hello world"
    a = spans.attrs("complete")
    assert a[A.OUTPUT_VALUE] == "Hello world"
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 9 and a[A.GEN_AI_USAGE_INPUT_TOKENS] == 20
    assert a[A.RAGTRACE_TPOT_BASIS] == "tokens" and a[A.RAGTRACE_CHUNK_COUNT] == 4
    assert a[A.GEN_AI_RESPONSE_MODEL] == "gpt-test-2024"
    assert list(a[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]
    # 3 gaps of >= 10 ms spread over 8 token intervals
    assert 0.03 * 0.9 / 8 <= a[A.RAGTRACE_TIME_PER_OUTPUT_TOKEN] < 1.0


def test_returned_stream_closed_early(spans):
    fs = FakeStream([Chunk("a"), Chunk("b"), Chunk("c")])

    @ragtrace.generator
    def complete(prompt):
        return fs

    s = complete("p")
    next(iter(s))
    s.close()
    assert fs.closed
    assert spans.attrs("complete")[A.RAGTRACE_STREAM_ABANDONED] is True


def test_returned_stream_dropped_is_ended_on_gc(spans):
    @ragtrace.generator
    def complete(prompt):
        return FakeStream([Chunk("a"), Chunk("b")])

    s = complete("p")
    next(iter(s))
    del s
    gc.collect()
    a = spans.attrs("complete")
    assert a[A.RAGTRACE_STREAM_ABANDONED] is True and a[A.RAGTRACE_CHUNK_COUNT] == 1


async def test_async_function_returning_async_stream(spans):
    class AStream:
        def __init__(self):
            self.items = ["x", "y"]

        def __aiter__(self):
            return self

        async def __anext__(self):
            if not self.items:
                raise StopAsyncIteration
            await asyncio.sleep(0.01)
            return self.items.pop(0)

    @ragtrace.generator
    async def acomplete(prompt):
        return AStream()

    out = [c async for c in await acomplete("p")]
    assert out == ["x", "y"]
    a = spans.attrs("acomplete")
    assert a[A.OUTPUT_VALUE] == "xy" and a[A.RAGTRACE_CHUNK_COUNT] == 2


def test_exception_inside_returned_stream_is_recorded_and_propagates(spans):
    err = ValueError("stream broke")

    def broken():
        yield Chunk("a")
        raise err

    class ChunkStream:  # iterable-only SDK-style stream, recognised by its name
        def __iter__(self):
            return broken()

    @ragtrace.generator
    def complete(prompt):
        return ChunkStream()

    with pytest.raises(ValueError) as ei:
        for _ in complete("p"):
            pass
    assert ei.value is err
    span = spans.named("complete")
    assert span.status.status_code.name == "ERROR"
    assert dict(span.attributes)[A.OUTPUT_VALUE] == "a"


def test_pipeline_that_streams_records_joined_output(spans):
    @ragtrace.pipeline(name="streaming_rag")
    def answer(question):
        yield "Par"
        yield "is"

    assert "".join(answer("q")) == "Paris"
    a = spans.attrs("streaming_rag")
    assert a[A.OUTPUT_VALUE] == "Paris" and a[A.RAGTRACE_SPAN_ROLE] == "pipeline"


def test_retriever_generator_of_documents(spans):
    @ragtrace.retriever
    def docs(query):
        yield {"id": "a", "content": "first", "score": 0.9}
        yield {"id": "b", "content": "second", "score": 0.5}

    assert len(list(docs("q"))) == 2
    a = spans.attrs("docs")
    assert a[A.document_attr(1, "id")] == "b" and A.RAGTRACE_DOCUMENTS_TOTAL not in a  # both recorded


async def test_async_stream_dropped_without_aclose_is_ended(spans):
    """No ``aclose()``: the event loop's async-generator finalizer closes it, and the span ends."""
    outer = trace.get_current_span()
    agen = aslow_tokens("p", n=10)
    assert await agen.__anext__() == "t0 "
    del agen
    gc.collect()
    for _ in range(10):  # let the loop run the aclose() it scheduled
        await asyncio.sleep(0)
    a = spans.attrs("aslow_tokens")
    assert a[A.RAGTRACE_STREAM_ABANDONED] is True and a[A.RAGTRACE_CHUNK_COUNT] == 1
    assert A.RAGTRACE_TIME_PER_OUTPUT_TOKEN not in a
    assert trace.get_current_span() is outer
