"""Each retrieved text goes on the wire once: a generator given the documents a span of its trace sent refers
to them (``ragtrace.generator.context_documents``); whatever it cannot refer to, it sends itself."""

from __future__ import annotations

import json

import ragtrace
from ragtrace import attributes as A
from ragtrace.config import SETTINGS
from ragtrace.recording import LEDGER

PASSAGES = ["Paris is the capital of France.", "Lyon is a city in France."]


@ragtrace.retriever
def search(query):
    return [{"id": f"d{i}", "content": text, "score": 0.9 - i / 10} for i, text in enumerate(PASSAGES)]


@ragtrace.generator(model="m")
def answer(question, contexts):
    return "Paris."


def refs(spans, name="search", n=2):
    sid = f"{spans.named(name).context.span_id:016x}"
    return tuple(f"{sid}:{i}" for i in range(n))


def test_equal_texts_are_referred_to_even_when_they_are_other_objects(spans):
    @ragtrace.pipeline
    def rag(q):
        docs = search(q)
        return answer(q, [json.loads(json.dumps(d["content"])) for d in docs])  # copies, not the same objects

    rag("capital?")
    g = spans.attrs("answer")
    assert g[A.RAGTRACE_CONTEXT_DOCUMENTS] == refs(spans) and A.RAGTRACE_CONTEXTS not in g


def test_a_context_no_span_sent_makes_the_generator_send_them_all(spans):
    @ragtrace.pipeline
    def rag(q):
        docs = search(q)
        return answer(q, [d["content"] for d in docs] + ["a passage from elsewhere"])

    rag("capital?")
    g = spans.attrs("answer")
    assert json.loads(g[A.RAGTRACE_CONTEXTS]) == [*PASSAGES, "a passage from elsewhere"]
    assert A.RAGTRACE_CONTEXT_DOCUMENTS not in g


def test_a_document_cut_by_the_attribute_cap_is_not_referred_to(spans):
    ragtrace.init(tracer_provider=SETTINGS._handle.provider, set_global=False, max_attribute_length=20)

    @ragtrace.pipeline
    def rag(q):
        docs = search(q)
        return answer(q, [d["content"] for d in docs])

    rag("capital?")
    assert spans.attrs("search")[A.document_attr(0, "content")] == PASSAGES[0][:20]
    g = spans.attrs("answer")  # a reference would name a shortened text: the generator sends its own, whole JSON
    sent = json.loads(g[A.RAGTRACE_CONTEXTS])
    assert len(sent) == 2 and all(PASSAGES[i].startswith(t) for i, t in enumerate(sent))
    assert A.RAGTRACE_CONTEXT_DOCUMENTS not in g and g[A.RAGTRACE_TRUNCATED] is True


def test_documents_of_another_trace_are_not_referred_to(spans):
    texts = [d["content"] for d in search("capital?")]  # its own trace
    answer("capital?", texts)
    g = spans.attrs("answer")
    assert json.loads(g[A.RAGTRACE_CONTEXTS]) == PASSAGES and A.RAGTRACE_CONTEXT_DOCUMENTS not in g


def test_reranked_documents_are_referred_to_where_they_were_reranked(spans):
    @ragtrace.reranker
    def rerank(query, documents):
        return list(reversed(documents))

    @ragtrace.pipeline
    def rag(q):
        docs = rerank(q, search(q))
        return answer(q, [d["content"] for d in docs])

    rag("capital?")
    assert spans.attrs("answer")[A.RAGTRACE_CONTEXT_DOCUMENTS] == refs(spans, "rerank")
    reranked = spans.attrs("rerank")
    assert reranked[A.document_attr(0, "content", A.RERANKER_OUTPUT_DOCUMENTS)] == PASSAGES[1]


def test_the_outermost_pipeline_forgets_its_trace_when_it_ends(spans):
    @ragtrace.pipeline
    def inner(q):
        return search(q)

    @ragtrace.pipeline
    def outer(q):
        docs = inner(q)  # an inner pipeline ending does not forget what the outer one's generator needs
        return answer(q, [d["content"] for d in docs])

    outer("capital?")
    assert spans.attrs("answer")[A.RAGTRACE_CONTEXT_DOCUMENTS] == refs(spans)
    assert spans.named("outer").context.trace_id not in LEDGER.traces


def test_a_pipeline_returning_a_stream_forgets_its_trace_when_the_stream_ends(spans):
    @ragtrace.pipeline
    def streamed(q):
        docs = search(q)
        yield from answer(q, [d["content"] for d in docs]).split()

    assert list(streamed("capital?"))
    assert spans.named("streamed").context.trace_id not in LEDGER.traces


def test_without_content_capture_there_is_nothing_to_refer_to(spans):
    @ragtrace.retriever(capture_content=False)
    def quiet(query):
        return [{"id": "d0", "content": PASSAGES[0], "score": 0.5}]

    @ragtrace.pipeline
    def rag(q):
        return answer(q, [d["content"] for d in quiet(q)])

    rag("capital?")
    assert json.loads(spans.attrs("answer")[A.RAGTRACE_CONTEXTS]) == PASSAGES[:1]
