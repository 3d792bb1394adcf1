"""All four function kinds, methods, signatures, nesting, exception transparency, annotate."""

from __future__ import annotations

import asyncio
import inspect
import json

import pytest

import ragtrace
from ragtrace import attributes as A
from ragtrace import safety
from ragtrace.config import SETTINGS


@ragtrace.retriever
def search(query: str, k: int = 2) -> list[dict]:
    """Docstring kept."""
    return [{"id": f"d{i}", "content": f"passage {i}", "score": 1.0 - i / 10} for i in range(k)]


@ragtrace.retriever(name="async_search")
async def asearch(query: str) -> list[str]:
    await asyncio.sleep(0)
    return ["one", "two"]


@ragtrace.generator(model="openai/gpt-4o-mini")
def gen_tokens(question: str, contexts: list[str]):
    yield from ("Paris ", "is ", "the ", "capital.")


@ragtrace.generator(name="agen", model="m1", provider="acme")
async def agen_tokens(question: str, contexts: list[str]):
    for t in ("a", "b", "c"):
        await asyncio.sleep(0)
        yield t


@ragtrace.pipeline(name="rag")
def rag(question: str) -> str:
    docs = search(question)
    return "".join(gen_tokens(question, [d["content"] for d in docs]))


@ragtrace.pipeline(name="arag")
async def arag(question: str) -> str:
    docs = await asearch(question)
    return "".join([t async for t in agen_tokens(question, docs)])


def test_signature_and_kind_preserved():
    assert inspect.signature(search) == inspect.signature(search.__wrapped__)
    assert search.__doc__ == "Docstring kept."
    assert search.__name__ == "search"
    assert inspect.iscoroutinefunction(asearch)
    assert inspect.isasyncgenfunction(agen_tokens)
    assert inspect.isgeneratorfunction(gen_tokens)
    assert not inspect.iscoroutinefunction(search)


def test_sync_pipeline_nests_retriever_and_streaming_generator(spans):
    assert rag("capital of France?") == "Paris is the capital."
    root, ret, gen = spans.named("rag"), spans.named("search"), spans.named("gen_tokens")
    assert root.parent is None
    assert ret.parent.span_id == root.context.span_id
    assert gen.parent.span_id == root.context.span_id
    assert {root.context.trace_id, ret.context.trace_id, gen.context.trace_id} == {root.context.trace_id}
    ra = dict(root.attributes)
    assert ra[A.RAGTRACE_SPAN_ROLE] == "pipeline"
    assert ra[A.RAGTRACE_PIPELINE_NAME] == "rag"
    assert ra[A.OPENINFERENCE_SPAN_KIND] == "CHAIN"
    assert ra[A.INPUT_VALUE] == "capital of France?"
    assert ra[A.OUTPUT_VALUE] == "Paris is the capital."
    r = dict(ret.attributes)
    assert r[A.RAGTRACE_SPAN_ROLE] == "retriever" and r[A.OPENINFERENCE_SPAN_KIND] == "RETRIEVER"
    assert r[A.GEN_AI_OPERATION_NAME] == "retrieval"
    assert r[A.GEN_AI_RETRIEVAL_QUERY_TEXT] == "capital of France?"
    assert r[A.document_attr(0, "id")] == "d0" and r[A.document_attr(1, "content")] == "passage 1"
    assert json.loads(r[A.GEN_AI_RETRIEVAL_DOCUMENTS]) == [{"id": "d0", "score": 1.0}, {"id": "d1", "score": 0.9}]
    g = dict(gen.attributes)
    assert g[A.RAGTRACE_SPAN_ROLE] == "generator" and g[A.OPENINFERENCE_SPAN_KIND] == "LLM"
    assert g[A.GEN_AI_REQUEST_MODEL] == "openai/gpt-4o-mini" and g[A.GEN_AI_PROVIDER_NAME] == "openai"
    # the contexts are the retriever's documents: referred to, not sent again
    sid = f"{ret.context.span_id:016x}"
    assert g[A.RAGTRACE_CONTEXT_DOCUMENTS] == (f"{sid}:0", f"{sid}:1") and A.RAGTRACE_CONTEXTS not in g
    assert g[A.message_attr(0, "content")] == "capital of France?" and A.INPUT_VALUE not in g
    assert g[A.OUTPUT_VALUE] == "Paris is the capital."
    assert g[A.GEN_AI_REQUEST_STREAM] is True and g[A.RAGTRACE_CHUNK_COUNT] == 4


async def test_async_pipeline_with_async_function_and_async_generator(spans):
    assert await arag("q") == "abc"
    root, ret, gen = spans.named("arag"), spans.named("async_search"), spans.named("agen")
    assert ret.parent.span_id == root.context.span_id
    assert gen.parent.span_id == root.context.span_id
    g = dict(gen.attributes)
    assert g[A.OUTPUT_VALUE] == "abc" and g[A.RAGTRACE_CHUNK_COUNT] == 3
    assert g[A.GEN_AI_PROVIDER_NAME] == "acme"
    assert g[A.RAGTRACE_CONTEXT_DOCUMENTS] == tuple(f"{ret.context.span_id:016x}:{i}" for i in range(2))


class Service:
    model = "svc-model"

    def __init__(self) -> None:
        self.calls = 0

    @ragtrace.retriever
    def retrieve(self, query: str) -> list[str]:
        self.calls += 1
        return [f"doc for {query}"]

    @ragtrace.generator
    async def generate(self, prompt: str) -> str:
        return prompt.upper()

    @classmethod
    @ragtrace.retriever(name="cls_retrieve")
    def cls_retrieve(cls, query: str) -> list[str]:
        return [cls.__name__ + query]

    @staticmethod
    @ragtrace.retriever(name="static_retrieve")
    def static_retrieve(query: str) -> list[str]:
        return [query * 2]

    @ragtrace.pipeline(name="svc")
    def run(self, question: str) -> str:
        return self.retrieve(question)[0]


async def test_methods_classmethods_staticmethods(spans):
    svc = Service()
    assert svc.run("x") == "doc for x" and svc.calls == 1
    assert await svc.generate("hi") == "HI"
    assert Service.cls_retrieve("q") == ["Serviceq"]
    assert Service.static_retrieve("ab") == ["abab"]
    assert Service.retrieve(svc, "unbound") == ["doc for unbound"]
    assert spans.attrs("svc")[A.INPUT_VALUE] == "x"
    gen = spans.attrs("Service.generate")
    assert gen[A.message_attr(0, "content")] == "hi" and gen[A.OUTPUT_VALUE] == "HI"
    assert gen[A.GEN_AI_REQUEST_MODEL] == "svc-model"
    assert spans.attrs("cls_retrieve")[A.INPUT_VALUE] == "q"
    assert spans.attrs("static_retrieve")[A.INPUT_VALUE] == "ab"
    inputs = sorted(dict(s.attributes).get(A.INPUT_VALUE) for s in spans.all() if s.name == "Service.retrieve")
    assert inputs == ["unbound", "x"]


class Boom(Exception):
    pass


# Raised by the functions below: the test checks the app sees these very objects.
SYNC_ERR, ASYNC_ERR, GEN_ERR, AGEN_ERR = (Boom("sync"), Boom("async"), Boom("in generator"), Boom("in async generator"))


@ragtrace.pipeline
def failing(question):
    raise SYNC_ERR


@ragtrace.retriever
async def afailing(query):
    raise ASYNC_ERR


@ragtrace.generator
def gfailing(prompt):
    yield "partial "
    raise GEN_ERR


@ragtrace.generator
async def agfailing(prompt):
    yield "x"
    raise AGEN_ERR


async def test_app_exceptions_propagate_as_the_same_object_and_are_recorded(spans):
    errors = []
    with pytest.raises(Boom) as ei:
        failing("q")
    errors.append(ei.value)
    with pytest.raises(Boom) as ei:
        await afailing("q")
    errors.append(ei.value)
    seen = []
    with pytest.raises(Boom) as ei:
        for c in gfailing("p"):
            seen.append(c)
    assert seen == ["partial "]
    errors.append(ei.value)
    with pytest.raises(Boom) as ei:
        async for _ in agfailing("p"):
            pass
    errors.append(ei.value)
    for got, raised in zip(errors, (SYNC_ERR, ASYNC_ERR, GEN_ERR, AGEN_ERR)):
        assert got is raised
    for name, err in zip(("failing", "afailing", "gfailing", "agfailing"), errors):
        span = spans.named(name)
        assert span.status.status_code.name == "ERROR"
        assert dict(span.attributes)["error.type"] == "Boom"
        ev = [e for e in span.events if e.name == "exception"]
        assert ev and ev[0].attributes["exception.message"] == str(err)
    assert dict(spans.named("gfailing").attributes)[A.OUTPUT_VALUE] == "partial "


def test_exception_identity_is_preserved(spans):
    sentinel = Boom("same object")

    @ragtrace.generator
    def raises(prompt):
        raise sentinel

    with pytest.raises(Boom) as ei:
        raises("p")
    assert ei.value is sentinel


async def test_exception_thrown_into_a_stream_by_the_consumer_comes_back_unchanged(spans):
    """``gen.throw(exc)`` is forwarded into the traced body; if the body does not handle it, the
    consumer gets the same object back and the span records it."""
    thrown = Boom("thrown in")

    @ragtrace.generator
    def body(prompt):
        yield "a"
        yield "b"

    @ragtrace.generator
    async def abody(prompt):
        yield "a"
        yield "b"

    g = body("p")
    next(g)
    with pytest.raises(Boom) as ei:
        g.throw(thrown)
    assert ei.value is thrown
    ag = abody("p")
    await ag.__anext__()
    with pytest.raises(Boom) as ei:
        await ag.athrow(thrown)
    assert ei.value is thrown
    for name in ("body", "abody"):
        assert spans.named(name).status.status_code.name == "ERROR"


def test_internal_errors_never_reach_the_app(spans, caplog):
    class BrokenTracer:
        def start_span(self, *a, **k):
            raise RuntimeError("tracer exploded")

    safety.reset()
    saved = SETTINGS.tracer
    SETTINGS.tracer = BrokenTracer()
    try:
        for _ in range(5):
            assert rag("still works") == "Paris is the capital."
    finally:
        SETTINGS.tracer = saved
    assert safety.internal_errors().get("start", 0) >= 10  # pipeline + retriever + generator per call
    assert sum("tracer exploded" in r.getMessage() for r in caplog.records) == 1  # logged once, rate-limited


def test_broken_result_reading_is_contained(spans):
    class Weird:
        @property
        def choices(self):
            raise RuntimeError("property blew up")

    @ragtrace.generator
    def odd(prompt):
        return Weird()

    result = odd("p")
    assert isinstance(result, Weird)
    assert spans.named("odd").end_time is not None


def test_annotate_writes_on_the_pipeline_root(spans):
    @ragtrace.retriever
    def inner(query):
        ragtrace.annotate(
            reference="Paris",
            session_id="s-1",
            user_id="u-9",
            tags=["canary", "golden"],
            metadata={"tenant": "t1"},
            sample=True,
        )
        return []

    @ragtrace.pipeline(name="annotated")
    def outer(question):
        inner(question)
        return ragtrace.current_trace_id()

    tid = outer("q")
    root = spans.named("annotated")
    a = dict(root.attributes)
    assert a[A.RAGTRACE_REFERENCE] == "Paris"
    assert a[A.SESSION_ID] == "s-1" and a[A.USER_ID] == "u-9"
    assert list(a[A.TAG_TAGS]) == ["canary", "golden"]
    assert json.loads(a[A.METADATA]) == {"tenant": "t1"}
    assert a[A.RAGTRACE_SAMPLE] is True
    assert tid == format(root.context.trace_id, "032x")
    assert A.RAGTRACE_REFERENCE not in dict(spans.named("inner").attributes)
    assert ragtrace.annotate(reference="outside") is False  # no span: nothing to write, no error


def test_generator_reads_openai_shaped_response_and_messages(spans):
    class Obj(dict):
        __getattr__ = dict.get

    response = Obj(
        id="chatcmpl-1",
        model="gpt-4o-mini-2024",
        choices=[Obj(message=Obj(content="Hello."), finish_reason="stop")],
        usage=Obj(prompt_tokens=12, completion_tokens=3, total_tokens=15),
    )

    @ragtrace.generator
    def chat(messages, model="gpt-4o-mini", documents=None):
        return response

    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert chat(msgs, documents=[{"page_content": "ctx one"}]) is response
    a = spans.attrs("chat")
    assert a[A.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini" and a[A.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini-2024"
    assert a[A.GEN_AI_USAGE_INPUT_TOKENS] == 12 and a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert a[A.LLM_TOKEN_COUNT_TOTAL] == 15
    assert list(a[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]
    assert a[A.OUTPUT_VALUE] == "Hello."
    assert a[A.message_attr(1, "role")] == "user" and a[A.message_attr(1, "content")] == "hi"
    system = {"role": "system", "parts": [{"type": "text", "content": "be brief"}]}
    assert json.loads(a[A.GEN_AI_INPUT_MESSAGES])[0] == system
    assert json.loads(a[A.RAGTRACE_CONTEXTS]) == ["ctx one"]


def test_contexts_arg_option_and_usage_dict(spans):
    @ragtrace.generator(contexts_arg="evidence")
    def answer(question, evidence):
        return {"answer": "42", "usage": {"input_tokens": 7, "output_tokens": 1}}

    answer("meaning?", ["the answer is 42"])
    a = spans.attrs("answer")
    assert json.loads(a[A.RAGTRACE_CONTEXTS]) == ["the answer is 42"]
    assert a[A.OUTPUT_VALUE] == "42" and a[A.GEN_AI_USAGE_INPUT_TOKENS] == 7


def test_reranker_records_input_and_output_documents(spans):
    @ragtrace.reranker(model="cross-encoder-x")
    def rerank(query, documents, top_k=2):
        return sorted(documents, key=len)[:top_k]

    rerank("q", ["long passage", "tiny", "mid one"], top_k=2)
    a = spans.attrs("rerank")
    assert a[A.OPENINFERENCE_SPAN_KIND] == "RERANKER" and a[A.RAGTRACE_SPAN_ROLE] == "reranker"
    assert a[A.RERANKER_QUERY] == "q" and a[A.RERANKER_TOP_K] == 2 and a[A.RERANKER_MODEL_NAME] == "cross-encoder-x"
    assert a[A.document_attr(0, "content", A.RERANKER_INPUT_DOCUMENTS)] == "long passage"
    assert a[A.document_attr(0, "content", A.RERANKER_OUTPUT_DOCUMENTS)] == "tiny"


def test_works_without_init_as_a_noop():
    from opentelemetry import trace

    SETTINGS.tracer = trace.get_tracer("ragtrace")  # global proxy: no-op unless an app set a provider
    assert rag("no tracing configured") == "Paris is the capital."


def test_sampled_out_requests_record_nothing_and_still_nest_context():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    from tests.support.sdk import reset_settings

    exporter = InMemorySpanExporter()
    tp = TracerProvider(sampler=ALWAYS_OFF)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    ragtrace.init(tracer_provider=tp, set_global=False)
    try:
        assert rag("not sampled") == "Paris is the capital."
        assert exporter.get_finished_spans() == ()
    finally:
        reset_settings()
        tp.shutdown()


def test_default_endpoint_and_protocol(monkeypatch):
    from tests.support.sdk import reset_settings

    for k in (
        "RAGTRACE_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "RAGTRACE_PROTOCOL",
    ):
        monkeypatch.delenv(k, raising=False)
    h = ragtrace.init(set_global=False)
    g = ragtrace.init(protocol="grpc", set_global=False)
    try:
        assert (h.protocol, h.endpoint) == ("http/protobuf", "http://127.0.0.1:4318/v1/traces")
        assert (g.protocol, g.endpoint) == ("grpc", "http://127.0.0.1:4317")
        with pytest.raises(ValueError):
            ragtrace.init(protocol="http/json", set_global=False)
    finally:
        h.shutdown(1.0)
        g.shutdown(1.0)
        reset_settings()
