"""Scores in a REAL Arize Phoenix: annotations on the scored spans, and no trace's latency changed by scoring.

Phoenix (``arize-phoenix`` from the package index, in .phoenix-venv: ``bash scripts/phoenix/build.sh`` or
``make test-phoenix``) runs on loopback free ports with its own working directory. An app traced with ragtrace's
decorators exports to Phoenix; the same spans go to a served collector (``export.phoenix``), which scores them
with the embedded judge (annotator CODE) or an LLM judge (the scripted OpenAI-compatible server: annotator LLM,
the unsupported claims as explanation) and posts the scores to Phoenix's REST API. Read back through Phoenix's
REST and GraphQL APIs: each score is an annotation of its trace's root span and one of the trace itself (Phoenix's
trace annotations), traces filter by it, and every trace keeps its spans, duration and the project's p99 latency. Figures go to test-output/phoenix_live_<judge>.json.

Then what a person sees, in Phoenix's own web UI in headless chromium (tests.support.browser; Phoenix serves its
assets, nothing is downloaded): the traces list (root chain span, question, answer, scores, pre-scoring latency,
tokens) and the worst trace (span tree; the root span's annotations with the judge's explanation; the retriever's
documents; the LLM's messages and its prompt/completion tokens), each asserted on visible text before its
screenshot in test-output/phoenix/<judge>/.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from dataclasses import dataclass
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
from tests.support.browser import headless_chromium, screenshot, wait_shown
from tests.support.phoenix import PhoenixServer, missing_reason
from tests.support.scripted_openai import ScriptedOpenAI, faithfulness_reply

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
PROJECT = "ragtrace-phoenix-live"  # + the judge kind: one Phoenix project per test
CORPUS = [
    {"id": "doc-1", "content": "Paris is the capital and largest city of France.", "score": 0.91},
    {"id": "doc-2", "content": "The Eiffel Tower was completed in 1889 in Paris.", "score": 0.72},
]
USAGE = {"prompt_tokens": 37, "completion_tokens": 12}  # every answer's: 49 tokens in all
QUESTIONS = ["What is the capital of France?", "When was the Eiffel Tower completed?", "Where is Paris, in Spain?"]
# judge kind -> (metrics, annotator kind, annotation identifier)
JUDGES = {
    "local": (["faithfulness", "answer_relevancy"], "CODE", "ragtrace/local"),
    "llm": (["faithfulness"], "LLM", "ragtrace/openai/judge-model"),
}

_roots: dict[str, str] = {}


@dataclass
class Fed:
    """What a test fed to Phoenix and read back: for the browser test to look for."""

    project: str
    project_id: str
    roots: dict[str, str]  # trace id -> root span id, in the order of QUESTIONS
    scores: dict[str, dict[str, float]]  # trace id -> metric -> score
    durations_ms: dict[str, float]  # trace id -> duration before scoring
    annotations: dict[tuple[str, str], dict[str, Any]]  # (span id, metric) -> Phoenix's annotation


_fed: dict[str, Fed] = {}  # judge -> what its test fed


@ragtrace.retriever
def search(query: str) -> list[dict]:
    return CORPUS


@ragtrace.generator(model="demo-model", provider="demo")
def answer(question: str, contexts: list[str]) -> dict:
    """An OpenAI-shaped reply, with the token usage ragtrace records (and Phoenix shows)."""
    time.sleep(0.05)  # a request of some 50 ms: an evaluation span stamped seconds later would be plain to see
    if "Spain" in question:
        text = "Paris is in Spain."
    elif "Eiffel" in question:
        text = "The Eiffel Tower was completed in 1889."
    else:
        text = "Paris is the capital of France."
    message = {"role": "assistant", "content": text}
    return {"model": "demo-model", "choices": [{"message": message, "finish_reason": "stop"}], "usage": USAGE}


@ragtrace.pipeline(name="support")
def handle(question: str) -> str:
    ctx = otel_trace.get_current_span().get_span_context()
    _roots[format(ctx.trace_id, "032x")] = format(ctx.span_id, "016x")
    return answer(question, [d["content"] for d in search(question)])["choices"][0]["message"]["content"]


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


async def scores_in_phoenix(phoenix: PhoenixServer, tmp_path: Path, judge: str, judge_server: ScriptedOpenAI) -> Fed:
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

        def trace_annotations() -> list[dict[str, Any]] | None:
            path = f"/v1/projects/{project}/trace_annotations"
            found = phoenix.get(path, trace_ids=list(roots), limit=1000)["data"]
            return found if len(found) >= expected else None

        found = await asyncio.to_thread(wait_for, "the annotations in Phoenix", annotations)
        on_traces = await asyncio.to_thread(wait_for, "the trace annotations in Phoenix", trace_annotations)
        sent = {
            kind: app.registry.get_sample_value("ragtrace_phoenix_annotations_total", {"kind": kind, "outcome": "sent"})
            for kind in ("span", "trace")
        }
    finally:
        await app.stop(drain_timeout=5)

    # each score is an annotation of its trace's root span, with the stored score
    by_span = {(a["span_id"], a["name"]): a for a in found}
    assert len(by_span) == len(found) == expected == sent["span"]
    # and of the trace itself, the same: what Phoenix's traces table shows in its trace annotations column
    by_trace = {(a["trace_id"], a["name"]): a for a in on_traces}
    assert len(by_trace) == len(on_traces) == expected == sent["trace"]
    for tid, metric_scores in scores.items():
        for metric, score in metric_scores.items():
            for a in (by_span[(roots[tid], metric)], by_trace[(tid, metric)]):
                assert a["result"]["score"] == pytest.approx(score)
                assert a["annotator_kind"] == annotator and a["identifier"] == identifier
                assert a["metadata"]["trace_id"] == tid and a["metadata"]["pipeline"] == "support"
            assert by_trace[(tid, metric)]["result"] == by_span[(roots[tid], metric)]["result"]
    # as Phoenix's traces table reads them (GraphQL Trace.traceAnnotations): the scores on each trace
    per_trace = """query ($id: ID!, $tid: ID!) { node(id: $id) { ... on Project {
        trace(traceId: $tid) { traceAnnotations { name score annotatorKind } } } } }"""
    for tid, metric_scores in scores.items():
        shown = phoenix.graphql(per_trace, {"id": project_id, "tid": tid})["node"]["trace"]["traceAnnotations"]
        assert {a["name"]: a["score"] for a in shown} == pytest.approx(metric_scores)
        assert {a["annotatorKind"] for a in shown} == {annotator}

    if judge == "llm":  # the scripted judge finds the answer about Spain unsupported, and says which claim
        spain = next(tid for tid, root in roots.items() if by_span[(root, "faithfulness")]["result"]["score"] == 0)
        explained = by_span[(roots[spain], "faithfulness")]["result"]["explanation"]
        assert explained == "Unsupported: Paris is in Spain (r)"  # an LLM judge's "no": contradicted or not found
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
        "trace_annotations": sorted(
            [a["trace_id"], a["name"], a["result"]["score"], a["annotator_kind"], a["result"].get("explanation")]
            for a in on_traces
        ),
    }
    out = ROOT / "test-output"
    out.mkdir(exist_ok=True)
    (out / f"phoenix_live_{judge}.json").write_text(json.dumps(figures, indent=2))
    durations = {tid: d * 1000 for tid, (_, d) in before["rest_traces"].items()}
    _fed[judge] = Fed(project, project_id, roots, scores, durations, by_span)
    return _fed[judge]


# --- what a person sees: Phoenix's own web UI (served by Phoenix itself, no CDN) in headless chromium -------------

SHOTS = ROOT / "test-output" / "phoenix"
TREE, DETAILS = "ul[data-testid=trace-tree]", "[data-testid=span-details]"
ANSWERS = ["Paris is in Spain.", "The Eiffel Tower was completed in 1889.", "Paris is the capital of France."]
TOKENS = str(USAGE["prompt_tokens"] + USAGE["completion_tokens"])


@pytest.fixture(scope="module")
def browser():
    with headless_chromium(1600, 1000) as driver:
        yield driver


@pytest.mark.parametrize("judge", sorted(JUDGES))
async def test_phoenix_ui_shows_span_kinds_documents_messages_tokens_and_annotations(phoenix, browser, tmp_path, judge):
    fed = _fed.get(judge)
    if fed is None:  # run alone (-k): feed and score the traces here
        with ScriptedOpenAI(responder=judge_reply) as judge_server:
            fed = await scores_in_phoenix(phoenix, tmp_path, judge, judge_server)
    shots = SHOTS / judge
    await asyncio.to_thread(traces_list, browser, phoenix, fed, shots)
    await asyncio.to_thread(scored_trace, browser, phoenix, fed, shots)


def score_shown(metric: str, score: float) -> tuple[str, ...]:
    """How Phoenix writes a mean score: two decimals, rounded or cut."""
    return tuple(f"{metric}\nμ {v:.2f}" for v in (score, math.floor(score * 100) / 100))


def latencies_ms(text: str) -> list[float]:
    """The latencies a text shows ("50ms", "1.2s"), in ms."""
    found = re.findall(r"^(\d+(?:\.\d+)?)(ms|s)$", text, flags=re.M)
    return [float(v) * (1 if unit == "ms" else 1000) for v, unit in found]


def assert_latency_shown(text: str, duration_ms: float) -> None:
    """The text shows the trace's duration from before scoring (to Phoenix's rounding): scoring changed none."""
    assert any(abs(ms - duration_ms) <= 1 for ms in latencies_ms(text)), (duration_ms, latencies_ms(text))


def traces_list(driver, phoenix: PhoenixServer, fed: Fed, shots: Path) -> None:
    """The project's traces: per trace its root (chain) span, question, answer, scores, latency and tokens."""
    from selenium.webdriver.common.by import By

    driver.set_window_size(2600, 1000)  # wide enough for the annotations, latency and token columns
    driver.get(f"{phoenix.base_url}/projects/{fed.project_id}/traces")
    wanted = [(*score_shown(*next(iter(s.items()))), f"+{len(s)}") for s in fed.scores.values()]  # a score, or +N
    wait_shown(driver, "table tbody", *QUESTIONS, *ANSWERS, *wanted)
    rows = {r.text.split("\n")[2]: r for r in driver.find_elements(By.CSS_SELECTOR, "table tbody tr")}
    assert sorted(rows) == sorted(QUESTIONS), rows  # one row per trace, showing its question
    for tid, question in zip(fed.roots, QUESTIONS):
        row, scores = rows[question].text, fed.scores[tid]
        assert row.startswith("chain\nsupport\n"), row  # the root span's kind and name
        assert scores_in(row, scores) or f"\n+{len(scores)}\n" in row, row  # several: "+N", a hover shows them
        assert_latency_shown(row, fed.durations_ms[tid])
        assert f"\n{TOKENS}\n" in row, row  # the trace's total tokens
    worst = min(fed.scores, key=lambda t: fed.scores[t].get("faithfulness", 1.0))
    row, scores = rows[QUESTIONS[list(fed.roots).index(worst)]], fed.scores[worst]
    if not scores_in(row.text, scores):  # point at the "+N" chip: Phoenix lists the trace's scores
        row.find_elements(By.XPATH, f".//*[normalize-space(.)='+{len(scores)}']")[-1].click()
        wait_shown(driver, "[role=tooltip], [role=dialog]", *(score_shown(m, v) for m, v in scores.items()), timeout=15)
    screenshot(driver, shots / "traces-list.png")
    driver.set_window_size(1600, 1000)


def scores_in(text: str, scores: dict[str, float]) -> bool:
    return all(any(s in text for s in score_shown(m, v)) for m, v in scores.items())


def hover(driver, element) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(element).perform()


def scored_trace(driver, phoenix: PhoenixServer, fed: Fed, shots: Path) -> None:
    """The worst-scored trace: its span tree (chain, retriever, LLM), the scores on the root span with the judge's
    explanation, the retriever's documents, the LLM's messages and tokens, and its latency from before scoring."""
    tid = min(fed.scores, key=lambda t: fed.scores[t].get("faithfulness", 1.0))
    root, scores = fed.roots[tid], fed.scores[tid]
    driver.get(f"{phoenix.base_url}/projects/{fed.project_id}/traces/{tid}")
    wanted = [score_shown(m, s) for m, s in scores.items()]
    tree = wait_shown(driver, TREE, "support", "search", "answer", TOKENS, *wanted)
    lines = tree.split("\n")
    assert lines[0] == "support" and lines.index("search") < lines.index("answer"), tree  # the root, then its children
    drawer = wait_shown(driver, "section[data-testid=dialog]", f"Trace\n{tid}", "Latency\n")
    assert_latency_shown(drawer.split("Latency\n", 1)[1].split("\n", 1)[0], fed.durations_ms[tid])

    # the root span (selected first) with its annotations as a table: score, annotator, explanation, identifier
    wait_shown(driver, DETAILS, "chain\nsupport\n", root, "Annotations")
    annotations_table(driver)
    rows = [fed.annotations[(root, m)] for m in scores]
    explained = [a["result"]["explanation"] for a in rows if a["result"].get("explanation")]
    assert explained, rows  # the worst trace's low score says why
    kinds = {a["annotator_kind"] for a in rows} | {a["identifier"] for a in rows}
    wait_shown(driver, DETAILS, *scores, *kinds, *explained, "Where is Paris, in Spain?", "Paris is in Spain.")
    screenshot(driver, shots / "trace-with-annotations.png")

    # the retriever: its documents, with their ids, scores and text
    click_span(driver, "search")
    docs = [(f"document {d['id']}", f"score {d['score']}", d["content"]) for d in CORPUS]
    wait_shown(driver, DETAILS, "retriever\nsearch\n", "Documents", *(t for d in docs for t in d))
    screenshot(driver, shots / "retriever-documents.png")

    # the LLM: model, the user's message and the assistant's, its tokens split in and out. The contexts are the
    # retriever's documents above, sent once: a generator given a prompt and contexts records the prompt as its one
    # user message (the SDK writes each text once, never a made-up message the model was not shown)
    click_span(driver, "answer")
    messages = ("user", "Where is Paris, in Spain?", "assistant", "Paris is in Spain.")
    wait_shown(driver, DETAILS, "llm\nanswer\n", "demo-model", "Messages", *messages, TOKENS)
    hover_tokens(driver, f"{USAGE['prompt_tokens']} prompt → {USAGE['completion_tokens']} completion")
    screenshot(driver, shots / "llm-messages-tokens.png")


def click_span(driver, name: str) -> None:
    """Select a span by clicking its name in the trace tree, as a person does."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, TREE).find_element(By.XPATH, f".//*[normalize-space(text())='{name}']").click()


def annotations_table(driver) -> None:
    """Open the selected span's Annotations card (when closed) in its table view, which shows explanations."""
    from selenium.webdriver.common.by import By

    details = driver.find_element(By.CSS_SELECTOR, DETAILS)
    table = details.find_elements(By.XPATH, ".//button[normalize-space(.)='Table']")
    if not table:
        details.find_element(By.XPATH, ".//h3[normalize-space(text())='Annotations']").click()
        wait_shown(driver, DETAILS, "List\nTable")
        table = details.find_elements(By.XPATH, ".//button[normalize-space(.)='Table']")
    table[0].click()
    wait_shown(driver, DETAILS, "explanation")


def hover_tokens(driver, split: str, tries: int = 6) -> None:
    """Point at the selected span's token count until Phoenix's card shows the prompt and completion tokens."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    for attempt in range(tries):  # the panel re-renders while it loads: a hover on a replaced element shows nothing
        try:
            details = driver.find_element(By.CSS_SELECTOR, DETAILS)
            count = details.find_element(By.XPATH, f".//*[normalize-space(text())='{TOKENS}']")
            ActionChains(driver).move_to_element(details.find_element(By.TAG_NAME, "h3")).perform()
            ActionChains(driver).move_to_element(count).perform()
            wait_shown(driver, "[role=tooltip]", split, timeout=5)
            return
        except (AssertionError, WebDriverException):
            if attempt == tries - 1:
                raise
