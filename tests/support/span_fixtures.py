"""Span fixtures for the collector tests, written with the real OpenTelemetry SDK.

The peer conventions' fixtures are hand-written (the peer packages are not installed here: installing
them would move pinned packages) and follow their documented attribute names:
OpenInference semantic conventions (``openinference.span.kind``, ``retrieval.documents.N.document.*``,
``llm.input_messages.N.message.*``, ``llm.token_count.*``) as its LangChain and LlamaIndex
instrumentations write them; OpenLLMetry (``traceloop.span.kind``, ``traceloop.entity.input/output``,
``gen_ai.prompt.N.*``, ``gen_ai.completion.N.*``, ``gen_ai.usage.*``, ``llm.request.type``); OpenLIT
(``gen_ai.*`` with ``gen_ai.content.prompt``/``gen_ai.content.completion`` events and
``gen_ai.server.time_to_first_token``).

A fixture is a list of :class:`Spec` in parent-before-child order; :func:`emit` creates them as real
spans on a tracer (nesting by ``parent``), :func:`to_request` encodes them as an OTLP request the way
the OTLP exporters do.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

QUESTION = "What does the warranty cover?"
ANSWER = "The warranty covers manufacturing defects for two years."
DOCS = [
    ("doc-1", "The warranty covers manufacturing defects for two years from purchase.", 0.91),
    ("doc-2", "Accidental damage is not covered by the warranty.", 0.72),
    ("doc-3", "Returns are accepted within 30 days.", 0.35),
]


@dataclass
class Spec:
    name: str
    parent: int | None  # index of the parent spec, None for the root
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    duration: float = 0.0  # seconds to sleep inside the span (keeps durations ordered)


def openinference_langchain() -> list[Spec]:
    """A LangChain RetrievalQA-style chain as openinference-instrumentation-langchain records it."""
    retriever = {"openinference.span.kind": "RETRIEVER", "input.value": QUESTION, "input.mime_type": "text/plain"}
    for i, (doc_id, text, _score) in enumerate(DOCS):
        retriever[f"retrieval.documents.{i}.document.content"] = text
        retriever[f"retrieval.documents.{i}.document.metadata"] = json.dumps({"source": f"{doc_id}.md"})
    llm = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.provider": "openai",
        "llm.system": "openai",
        "llm.invocation_parameters": json.dumps({"temperature": 0}),
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "Answer from the context.\n" + DOCS[0][1],
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": QUESTION,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": ANSWER,
        "llm.token_count.prompt": 52,
        "llm.token_count.completion": 11,
        "llm.token_count.total": 63,
        "input.value": json.dumps({"messages": [[{"content": QUESTION}]]}),
        "input.mime_type": "application/json",
    }
    return [
        Spec(
            "RetrievalQA",
            None,
            {
                "openinference.span.kind": "CHAIN",
                "input.value": json.dumps({"query": QUESTION}),
                "input.mime_type": "application/json",
                "output.value": json.dumps({"result": ANSWER}),
                "output.mime_type": "application/json",
                "session.id": "sess-lc",
                "user.id": "user-lc",
                "metadata": json.dumps({"tenant": "acme"}),
            },
        ),
        Spec("VectorStoreRetriever", 0, retriever, duration=0.01),
        Spec("ChatOpenAI", 0, llm, duration=0.02),
    ]


def openinference_unlabelled_prompt() -> list[Spec]:
    """The chain of :func:`openinference_langchain` with its passages looked up outside any traced retriever and
    pasted into the system message under no label: no span recorded a retrieval and the prompt labels no passage as
    context, so the record has no contexts and the completeness log says ``no retriever span found``. (The real
    captures of bare model calls all label their context block, which the prompt reader now takes.)"""
    chain, _retriever, llm = openinference_langchain()
    notes = "Answer using these notes.\n" + "\n".join(text for _, text, _ in DOCS)
    attributes = {**llm.attributes, "llm.input_messages.0.message.content": notes}
    return [chain, Spec(llm.name, 0, attributes, duration=llm.duration)]


def openinference_llamaindex() -> list[Spec]:
    """A LlamaIndex query engine with a reranker, as openinference-instrumentation-llama-index records it."""
    retriever = {"openinference.span.kind": "RETRIEVER", "input.value": QUESTION}
    for i, (doc_id, text, score) in enumerate(DOCS):
        retriever[f"retrieval.documents.{i}.document.id"] = doc_id
        retriever[f"retrieval.documents.{i}.document.content"] = text
        retriever[f"retrieval.documents.{i}.document.score"] = score
    reranker = {
        "openinference.span.kind": "RERANKER",
        "reranker.query": QUESTION,
        "reranker.model_name": "cross-encoder/ms-marco-MiniLM-L-6-v2",
        "reranker.top_k": 2,
    }
    for i, (doc_id, text, _score) in enumerate(DOCS):
        reranker[f"reranker.input_documents.{i}.document.id"] = doc_id
        reranker[f"reranker.input_documents.{i}.document.content"] = text
    for i, (doc_id, text, _score) in enumerate([DOCS[1], DOCS[0]]):
        reranker[f"reranker.output_documents.{i}.document.id"] = doc_id
        reranker[f"reranker.output_documents.{i}.document.content"] = text
        reranker[f"reranker.output_documents.{i}.document.score"] = 5.0 - i
    return [
        Spec(
            "query",
            None,
            {"openinference.span.kind": "CHAIN", "input.value": QUESTION, "output.value": ANSWER},
        ),
        Spec("retrieve", 0, retriever, duration=0.01),
        Spec("CohereRerank.postprocess", 0, reranker),
        Spec(
            "OpenAI.chat",
            0,
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "Context: ...\nQuery: " + QUESTION,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": ANSWER,
                "llm.token_count.prompt": 120,
                "llm.token_count.completion": 12,
                "output.value": ANSWER,
            },
            duration=0.02,
        ),
    ]


def openllmetry() -> list[Spec]:
    """A traceloop-sdk ``@workflow`` with a ``@task`` retriever and the OpenAI instrumentation's chat span."""
    documents = [{"page_content": text, "metadata": {"id": doc_id}} for doc_id, text, _ in DOCS]
    return [
        Spec(
            "rag_answer.workflow",
            None,
            {
                "traceloop.span.kind": "workflow",
                "traceloop.entity.name": "rag_answer",
                "traceloop.workflow.name": "rag_answer",
                "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
                "traceloop.entity.output": json.dumps(ANSWER),
                "traceloop.association.properties.session_id": "sess-tl",
                "traceloop.association.properties.user_id": "user-tl",
            },
        ),
        Spec(
            "retrieve_documents.task",
            0,
            {
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "retrieve_documents",
                "traceloop.workflow.name": "rag_answer",
                "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
                "traceloop.entity.output": json.dumps(documents),
            },
            duration=0.01,
        ),
        Spec(
            "openai.chat",
            0,
            {
                "llm.request.type": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.prompt.0.role": "system",
                "gen_ai.prompt.0.content": "Answer from the context.",
                "gen_ai.prompt.1.role": "user",
                # the task's passages stuffed into the prompt, as a RAG app does (how its retrieval is recognised)
                "gen_ai.prompt.1.content": "\n".join(d[1] for d in DOCS) + "\n\nQuestion: " + QUESTION,
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": ANSWER,
                "gen_ai.completion.0.finish_reason": "stop",
                "gen_ai.usage.prompt_tokens": 40,
                "gen_ai.usage.completion_tokens": 9,
                "llm.usage.total_tokens": 49,
                "llm.is_streaming": False,
            },
            duration=0.02,
        ),
    ]


def openlit() -> list[Spec]:
    """OpenLIT's auto-instrumentation: a vector-DB query span and a streamed chat span with content events."""
    return [
        Spec(
            "rag.request",
            None,
            {},
        ),
        Spec(
            "chroma.query",
            0,
            {"db.system": "chroma", "db.operation": "query", "db.collection.name": "kb", "db.n_results": 3},
            duration=0.01,
        ),
        Spec(
            "chat gpt-4o-mini",
            0,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini",
                "gen_ai.request.is_stream": True,
                "gen_ai.usage.input_tokens": 33,
                "gen_ai.usage.output_tokens": 10,
                "gen_ai.server.time_to_first_token": 0.012,
                "gen_ai.response.finish_reasons": ["stop"],
            },
            events=[
                ("gen_ai.content.prompt", {"gen_ai.prompt": f"user: {QUESTION}"}),
                ("gen_ai.content.completion", {"gen_ai.completion": ANSWER}),
            ],
            duration=0.03,
        ),
    ]


def ragtrace_shaped(n_docs: int = 3, error: str | None = None, reference: str | None = None) -> list[Spec]:
    """Spans with ragtrace's attribute names (as the SDK's decorators write them)."""
    retriever = {
        "ragtrace.span.role": "retriever",
        "openinference.span.kind": "RETRIEVER",
        "gen_ai.operation.name": "retrieval",
        "input.value": QUESTION,
        "gen_ai.retrieval.query.text": QUESTION,
    }
    for i in range(n_docs):
        doc_id, text, score = DOCS[i % len(DOCS)]
        retriever[f"retrieval.documents.{i}.document.id"] = doc_id
        retriever[f"retrieval.documents.{i}.document.content"] = text
        retriever[f"retrieval.documents.{i}.document.score"] = score
    root = {
        "ragtrace.span.role": "pipeline",
        "openinference.span.kind": "CHAIN",
        "ragtrace.pipeline.name": "support",
        "input.value": QUESTION,
        "output.value": ANSWER,
        "session.id": "s-1",
        "user.id": "u-1",
    }
    if reference:
        root["ragtrace.reference"] = reference
    return [
        Spec("support", None, root, error=error),
        Spec("search", 0, retriever, duration=0.01),
        Spec(
            "answer",
            0,
            {
                "ragtrace.span.role": "generator",
                "openinference.span.kind": "LLM",
                "gen_ai.operation.name": "chat",
                "llm.model_name": "offline-extractive",
                "gen_ai.request.model": "offline-extractive",
                "gen_ai.provider.name": "ragtrace",
                "gen_ai.request.stream": True,
                "gen_ai.response.time_to_first_chunk": 0.004,
                "ragtrace.response.time_per_output_token": 0.001,
                "gen_ai.usage.input_tokens": 30,
                "gen_ai.usage.output_tokens": 9,
                "output.value": ANSWER,
            },
            duration=0.02,
        ),
    ]


def emit(tracer: trace.Tracer, specs: list[Spec], only: set[int] | None = None) -> str:
    """Create the fixture's spans on ``tracer``; returns the trace id (hex)."""
    spans: list[Any] = []
    ctx_spans: dict[int, Any] = {}
    trace_id = None

    def run(i: int) -> None:
        nonlocal trace_id
        spec = specs[i]
        parent = ctx_spans.get(spec.parent) if spec.parent is not None else None
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        with tracer.start_as_current_span(
            spec.name, context=ctx, attributes=spec.attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            ctx_spans[i] = span
            trace_id = format(span.get_span_context().trace_id, "032x")
            for name, attrs in spec.events:
                span.add_event(name, attrs)
            if spec.duration:
                time.sleep(spec.duration)
            for j, child in enumerate(specs):
                if child.parent == i:
                    run(j)
            if spec.error:
                exc = RuntimeError(spec.error)
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, spec.error))
        spans.append(span)

    for i, spec in enumerate(specs):
        if spec.parent is None:
            run(i)
    assert trace_id is not None
    return trace_id


def finished_spans(specs: list[Spec], service: str = "svc") -> tuple[str, list]:
    """The fixture as finished SDK spans (in-memory exporter)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id = emit(provider.get_tracer("fixtures"), specs)
    provider.shutdown()
    return trace_id, list(exporter.get_finished_spans())


def to_request(specs: list[Spec], service: str = "svc"):
    """(trace_id, ExportTraceServiceRequest) encoded exactly as the OTLP exporters encode it."""
    trace_id, spans = finished_spans(specs, service)
    return trace_id, encode_spans(spans)
