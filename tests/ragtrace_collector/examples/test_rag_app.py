"""The example RAG app: real BM25 over the shipped corpus, traced end to end, faults visible."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace import attributes as A
from ragtrace import config
from ragtrace_collector.examples.rag_app import PIPELINE_NAME, QUESTIONS, RagApp
from ragtrace_collector.examples.rag_app.app import load_corpus
from tests.support.otlp_sink import OtlpSink
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def app():
    return RagApp(token_delay=0.0)


@pytest.fixture
def exporter():
    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    ragtrace.init(tracer_provider=tp, set_global=False)
    yield exp
    config.SETTINGS.tracer = trace.get_tracer(config.TRACER_NAME)
    tp.shutdown()


def by_name(exp):
    return {s.name: s for s in exp.get_finished_spans()}


def test_corpus_and_questions_ship_with_the_repo():
    corpus = load_corpus()
    assert 250 <= len(corpus) <= 400
    ids = {p["id"] for p in corpus}
    assert len(ids) == len(corpus)
    assert len(QUESTIONS) >= 50
    for q in QUESTIONS:
        assert q["reference"] and set(q["reference_doc_ids"]) <= ids


def test_bm25_finds_the_supporting_passage(app):
    hits = 0
    for q in QUESTIONS:
        top = [h.id for h in app.index.search(q["question"], 3)]
        hits += q["reference_doc_ids"][0] in top
    assert hits / len(QUESTIONS) >= 0.9


def referred_contexts(spans: dict, generator: dict) -> list[str]:
    """The generator's contexts: the reranked documents its ``ragtrace.generator.context_documents`` name (the
    SDK sends each text once, on the span that returned it)."""
    by_id = {format(s.context.span_id, "016x"): dict(s.attributes) for s in spans.values()}
    assert A.RAGTRACE_CONTEXTS not in generator
    out = []
    for ref in generator[A.RAGTRACE_CONTEXT_DOCUMENTS]:
        span_id, _, i = ref.partition(":")
        out.append(by_id[span_id][A.document_attr(int(i), "content", A.RERANKER_OUTPUT_DOCUMENTS)])
    return out


def test_answer_is_traced_with_every_role(app, exporter):
    q = next(x for x in QUESTIONS if x["question"].startswith("Who discovered"))
    ans = app.answer(q["question"], reference=q["reference"], session_id="s1")
    assert "discovered" in ans.text.lower()
    assert ans.trace_id and len(ans.trace_id) == 32
    spans = by_name(exporter)
    root = spans[PIPELINE_NAME]
    assert format(root.context.trace_id, "032x") == ans.trace_id
    for name in ("bm25_search", "overlap_rerank", "extractive_answer"):
        assert spans[name].parent.span_id == root.context.span_id
    ra = dict(root.attributes)
    assert ra[A.RAGTRACE_PIPELINE_NAME] == PIPELINE_NAME and ra[A.RAGTRACE_REFERENCE] == q["reference"]
    assert ra[A.OUTPUT_VALUE] == ans.text
    ga = dict(spans["extractive_answer"].attributes)
    assert referred_contexts(spans, ga) == ans.contexts
    assert ga[A.RAGTRACE_CHUNK_COUNT] > 3 and ga[A.GEN_AI_REQUEST_STREAM] is True
    # the offline generator ends with an OpenAI-shaped usage chunk: one output token per text chunk
    assert ga[A.GEN_AI_USAGE_OUTPUT_TOKENS] == ga[A.RAGTRACE_CHUNK_COUNT] - 1
    assert ga[A.GEN_AI_USAGE_INPUT_TOKENS] > ga[A.GEN_AI_USAGE_OUTPUT_TOKENS]
    assert ga[A.RAGTRACE_TPOT_BASIS] == "tokens" and list(ga[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]
    assert ga[A.OUTPUT_VALUE].strip() == ans.text
    ret = dict(spans["bm25_search"].attributes)
    assert ret[A.GEN_AI_DATA_SOURCE_ID] == "elements-corpus"
    assert ret[A.document_attr(0, "id")] in {d for d in json.loads(ret[A.GEN_AI_RETRIEVAL_DOCUMENTS])[0].values()}


def test_degrade_moves_what_the_collector_measures(app, exporter):
    q = next(x for x in QUESTIONS if x["question"].startswith("Who discovered"))
    good = app.answer(q["question"])
    bad = app.answer(q["question"], drop_best=True, add_unsupported_claim=True, slow_first_token=0.2)
    assert q["reference_doc_ids"][0] in good.context_ids
    assert q["reference_doc_ids"][0] not in bad.context_ids  # the best passage was dropped
    assert "Niels Bohr" in bad.text and "Niels Bohr" not in " ".join(bad.contexts)  # unsupported claim
    gens = [s for s in exporter.get_finished_spans() if s.name == "extractive_answer"]
    ttft = [dict(s.attributes)[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] for s in gens]
    assert ttft[1] >= 0.2 > ttft[0]


def test_cli_sends_requests_over_otlp(tmp_path):
    sink = OtlpSink()
    port = sink.start_http()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGTRACE_", "OTEL_"))}
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "ragtrace_collector.examples.rag_app",
                "--requests",
                "3",
                "--endpoint",
                f"http://127.0.0.1:{port}",
                "--token-delay",
                "0",
                "--degrade-every",
                "3",
                "-q",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        spans = sink.wait_for_spans(12, timeout=20)
    finally:
        sink.stop()
    roots = [s for s in spans if s["attributes"].get(A.RAGTRACE_SPAN_ROLE) == "pipeline"]
    assert len(roots) == 3
    assert sum("degraded" in (r["attributes"].get(A.TAG_TAGS) or []) for r in roots) == 1
    assert all(r["resource"]["service.name"] == "ragtrace-example" for r in roots)


def test_litellm_generator_streams_from_an_openai_compatible_server(exporter, monkeypatch):
    from tests.support.scripted_openai import ScriptedOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    q = QUESTIONS[1]
    with ScriptedOpenAI() as server:
        server.push("Helium was discovered in 1868 by Pierre Janssen and Norman Lockyer.")
        app = RagApp(model="openai/scripted-model", api_base=server.base_url, token_delay=0.0)
        ans = app.answer(q["question"], add_unsupported_claim=True, slow_first_token=0.2)
        sent = server.chat_requests()[0].body
    assert ans.text.startswith("Helium was discovered in 1868") and "Niels Bohr" in ans.text
    assert sent["stream"] is True and "Context:" in sent["messages"][-1]["content"]
    spans = by_name(exporter)
    assert set(spans) == {PIPELINE_NAME, "bm25_search", "overlap_rerank", "llm_answer"}  # every span ended
    assert dict(spans[PIPELINE_NAME].attributes)[A.OUTPUT_VALUE] == ans.text
    g = dict(spans["llm_answer"].attributes)
    assert g[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] >= 0.2  # the slow-first-token fault, litellm path too
    assert g[A.GEN_AI_REQUEST_MODEL] == "openai/scripted-model" and g[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert g[A.OUTPUT_VALUE].startswith("Helium was discovered in 1868")
    assert g[A.GEN_AI_USAGE_OUTPUT_TOKENS] > 1 and g[A.RAGTRACE_TPOT_BASIS] == "tokens"
    assert referred_contexts(spans, g) == ans.contexts
    assert json.loads(g[A.GEN_AI_INPUT_MESSAGES])[0]["role"] == "system"
