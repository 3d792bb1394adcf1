"""Scores in a REAL Arize Phoenix: annotations on the scored spans, and no trace's latency changed by scoring.

Phoenix (``arize-phoenix`` from the package index, in .phoenix-venv: ``bash scripts/phoenix/build.sh`` or
``make test-phoenix``) runs on loopback free ports with its own working directory. An app traced with ragtrace's
decorators exports to Phoenix; the same spans go to a served collector (``export.phoenix``), which scores them
with the embedded judge (annotator CODE) or an LLM judge (the scripted OpenAI-compatible server: annotator LLM,
the unsupported claims as explanation) and posts the scores to Phoenix's REST API. Read back through Phoenix's
REST and GraphQL APIs: each score is an annotation of its trace's root span, traces filter by it, and every trace
keeps its spans, duration and the project's p99 latency. Figures go to test-output/phoenix_live_<judge>.json.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace_collector.config import load_config
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.phoenix import PhoenixServer, missing_reason
from tests.support.scripted_openai import ScriptedOpenAI, faithfulness_reply

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
PROJECT = "ragtrace-phoenix-live"  # + the judge kind: one Phoenix project per test
CORPUS = [
    {"id": "doc-1", "content": "Paris is the capital and largest city of France.", "score": 0.91},
    {"id": "doc-2", "content": "The Eiffel Tower was completed in 1889 in Paris.", "score": 0.72},
]
QUESTIONS = ["What is the capital of France?", "When was the Eiffel Tower completed?", "Where is Paris, in Spain?"]
# judge kind -> (metrics, annotator kind, annotation identifier)
JUDGES = {
    "local": (["faithfulness", "answer_relevancy"], "CODE", "ragtrace/local"),
    "llm": (["faithfulness"], "LLM", "ragtrace/openai/judge-model"),
}

_roots: dict[str, str] = {}


@ragtrace.retriever
def search(query: str) -> list[dict]:
    return CORPUS


@ragtrace.generator(model="demo-model", provider="demo")
def answer(question: str, contexts: list[str]) -> str:
    time.sleep(0.05)  # a request of some 50 ms: an evaluation span stamped seconds later would be plain to see
    if "Spain" in question:
        return "Paris is in Spain."
    if "Eiffel" in question:
        return "The Eiffel Tower was completed in 1889."
    return "Paris is the capital of France."


@ragtrace.pipeline(name="support")
def handle(question: str) -> str:
    ctx = otel_trace.get_current_span().get_span_context()
    _roots[format(ctx.trace_id, "032x")] = format(ctx.span_id, "016x")
    return answer(question, [d["content"] for d in search(question)])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    server = PhoenixServer.start(tmp_path_factory.mktemp("phoenix"))
    yield server
    server.stop()


def run_app(phoenix: PhoenixServer, project: str) -> InMemorySpanExporter:
    """The traced app, exporting to Phoenix; its finished spans are also kept to send to the collector."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": project, "openinference.project.name": project})
    )
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    handle_ = ragtrace.init(
        endpoint=phoenix.base_url, protocol="http/protobuf", tracer_provider=provider, set_global=False
    )
    _roots.clear()
    try:
        for q in QUESTIONS:
            handle(q)
        assert handle_.force_flush(10.0)
    finally:
        handle_.shutdown()
    return kept


def phoenix_version() -> str:
    freeze = ROOT / ".phoenix-venv" / "freeze.txt"
    lines = freeze.read_text().splitlines() if freeze.exists() else []
    return next((line for line in lines if line.lower().startswith("arize-phoenix==")), "unknown")


def wait_for(what: str, probe, timeout: float = 60.0, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def judge_reply(body: dict) -> dict:
    """The scripted LLM judge: a claim of an answer about Spain is unsupported."""
    text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    return faithfulness_reply(body, lambda i: "Spain" not in text)


def snapshot(phoenix: PhoenixServer, project: str, project_id: str) -> dict[str, Any]:
    """What Phoenix shows of the project: per trace its span count and duration (REST and GraphQL), the p99."""
    traces = phoenix.get(f"/v1/projects/{project}/traces", include_spans="true", limit=100)["data"]
    rest = {t["trace_id"]: (len(t["spans"]), seconds(t["start_time"], t["end_time"])) for t in traces}
    query = """query ($id: ID!) { node(id: $id) { ... on Project {
        traceCount latencyMsQuantile(probability: 0.99)
        spans(first: 100, filterCondition: "parent_id is None") {
            edges { node { context { traceId } trace { latencyMs numSpans } } } }
    } } }"""
    shown = phoenix.graphql(query, {"id": project_id})["node"]
    graphql = {
        e["node"]["context"]["traceId"]: (e["node"]["trace"]["numSpans"], e["node"]["trace"]["latencyMs"])
        for e in shown["spans"]["edges"]
    }
    spans = phoenix.get(f"/v1/projects/{project}/spans", limit=1000)["data"]
    return {
        "rest_traces": rest,
        "graphql_traces": graphql,
        "trace_count": shown["traceCount"],
        "p99_latency_ms": shown["latencyMsQuantile"],
        "span_count": len(spans),
        "span_kinds": sorted({s["span_kind"] for s in spans}),
    }


@pytest.mark.parametrize("judge", sorted(JUDGES))
async def test_scores_become_annotations_and_no_trace_latency_changes(phoenix, tmp_path, judge):
    with ScriptedOpenAI(responder=judge_reply) as judge_server:
        await scores_in_phoenix(phoenix, tmp_path, judge, judge_server)


async def scores_in_phoenix(phoenix: PhoenixServer, tmp_path: Path, judge: str, judge_server: ScriptedOpenAI) -> None:
    from ragtrace_collector.service.app import CollectorApp

    metrics, annotator, identifier = JUDGES[judge]
    project = f"{PROJECT}-{judge}"
    kept = await asyncio.to_thread(run_app, phoenix, project)
    roots = dict(_roots)
    assert len(roots) == len(QUESTIONS)

    def project_id_of() -> str | None:
        return {p["name"]: p["id"] for p in phoenix.get("/v1/projects")["data"]}.get(project)

    project_id = await asyncio.to_thread(wait_for, "the project in Phoenix", project_id_of)

    def all_in() -> dict[str, Any] | None:
        snap = snapshot(phoenix, project, project_id)
        done = set(snap["rest_traces"]) == set(roots) and all(n == 3 for n, _ in snap["rest_traces"].values())
        return snap if done else None

    before = await asyncio.to_thread(wait_for, "the traces in Phoenix", all_in)
    assert before["span_kinds"] == ["CHAIN", "LLM", "RETRIEVER"]
    await asyncio.sleep(1.0)  # scoring comes later than the request, as it does in production

    cfg = load_config(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"host": "127.0.0.1", "grpc_port": None, "http_port": 0, "metrics_port": None},
            "assembly": {"grace_seconds": 0.2, "sweep_interval_seconds": 0.05},
            "judge": (
                {"model": "local"}
                if judge == "local"
                else {
                    "model": "openai/judge-model",
                    "base_url": judge_server.base_url,
                    "api_key": "k",
                    "max_retries": 0,
                }
            ),
            "scoring": {"metrics": metrics},
            "export": {"phoenix": {"endpoint": phoenix.base_url}},
        },
        environ={},
    )
    app = CollectorApp(cfg)
    await app.start()
    try:
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{app.http_port}/v1/traces")
        await asyncio.to_thread(exporter.export, kept.get_finished_spans())
        exporter.shutdown()

        def scored() -> dict[str, dict[str, float]] | None:
            store = ResultsStore(cfg.results_path)
            try:
                rows = {tid: store.get(tid) for tid in roots}
            finally:
                store.close()
            if not all(len(r) == len(metrics) for r in rows.values()):
                return None
            return {tid: {r.metric: r.score for r in rs if r.status == "scored"} for tid, rs in rows.items()}

        scores = await asyncio.to_thread(wait_for, "every trace scored", scored)
        expected = sum(len(s) for s in scores.values())
        assert expected >= len(roots)  # every trace has at least one score to show

        def annotations() -> list[dict[str, Any]] | None:
            path = f"/v1/projects/{project}/span_annotations"
            found = phoenix.get(path, span_ids=list(roots.values()), limit=1000)["data"]
            return found if len(found) >= expected else None

        found = await asyncio.to_thread(wait_for, "the annotations in Phoenix", annotations)
        sent = app.registry.get_sample_value("ragtrace_phoenix_annotations_total", {"outcome": "sent"})
    finally:
        await app.stop(drain_timeout=5)

    # each score is an annotation of its trace's root span, with the stored score
    by_span = {(a["span_id"], a["name"]): a for a in found}
    assert len(by_span) == len(found) == expected == sent
    for tid, metric_scores in scores.items():
        for metric, score in metric_scores.items():
            a = by_span[(roots[tid], metric)]
            assert a["result"]["score"] == pytest.approx(score)
            assert a["annotator_kind"] == annotator and a["identifier"] == identifier
            assert a["metadata"]["trace_id"] == tid and a["metadata"]["pipeline"] == "support"

    if judge == "llm":  # the scripted judge finds the answer about Spain unsupported, and says which claim
        spain = next(tid for tid, root in roots.items() if by_span[(root, "faithfulness")]["result"]["score"] == 0)
        explained = by_span[(roots[spain], "faithfulness")]["result"]["explanation"]
        assert explained == "Unsupported claims: Paris is in Spain"
        assert sorted(s["faithfulness"] for s in scores.values()) == [0.0, 1.0, 1.0]

    # traces filter by the score (what Phoenix users do with annotations)
    query = """query ($id: ID!, $cond: String) { node(id: $id) { ... on Project {
        spans(first: 100, filterCondition: $cond) { edges { node { context { traceId } } } }
    } } }"""
    faithful = {tid for tid, s in scores.items() if "faithfulness" in s}
    cond = "parent_id is None and annotations['faithfulness'].score >= 0"
    edges = phoenix.graphql(query, {"id": project_id, "cond": cond})["node"]["spans"]["edges"]
    assert {e["node"]["context"]["traceId"] for e in edges} == faithful

    # scoring changed no trace: same spans, same durations, same p99, no new (orphan) traces
    after = snapshot(phoenix, project, project_id)
    assert after == before
    figures = {
        "phoenix": phoenix_version(),
        "trace_durations_ms_before": {t: round(d * 1000, 3) for t, (_, d) in before["rest_traces"].items()},
        "trace_durations_ms_after": {t: round(d * 1000, 3) for t, (_, d) in after["rest_traces"].items()},
        "p99_latency_ms_before": before["p99_latency_ms"],
        "p99_latency_ms_after": after["p99_latency_ms"],
        "trace_count_before_after": [before["trace_count"], after["trace_count"]],
        "annotations": sorted(
            [a["span_id"], a["name"], a["result"]["score"], a["annotator_kind"], a["result"].get("explanation")]
            for a in found
        ),
    }
    out = ROOT / "test-output"
    out.mkdir(exist_ok=True)
    (out / f"phoenix_live_{judge}.json").write_text(json.dumps(figures, indent=2))
