"""The collector end to end, over real loopback sockets.

* The SDK's real OTLP exporters (HTTP and gRPC) → the collector's receivers → assembled record →
  sampled → queued → scored by the embedded judge → ``/metrics`` read back as OpenMetrics with the
  scored trace's ``trace_id`` exemplar.
* ``ragtrace-collector serve`` in a subprocess, killed with SIGKILL while records are queued and one
  is being scored; restarted: every record scored exactly once (one stored row per record and the
  restarted process counts exactly the records the first one had not recorded).
* A judge that fails and then recovers: the LLM judge through litellm against the scripted
  OpenAI-compatible server answering 503s first: records stay queued during the outage, all are
  scored once after.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import ragtrace
from ragtrace_collector.config import load_config
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.net import free_port
from tests.support.otlp_sink import OtlpSink
from tests.support.scripted_openai import Reply, ScriptedOpenAI

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
CORPUS = [
    {"id": "doc-1", "content": "Paris is the capital and largest city of France.", "score": 0.91},
    {"id": "doc-2", "content": "The Eiffel Tower was completed in 1889 in Paris.", "score": 0.72},
]

# --- the traced app (the SDK's real decorators) ---------------------------------------------------
_handle: Any = None
_split_requests = False


@ragtrace.retriever
def search(query: str) -> list[dict]:
    return CORPUS


@ragtrace.generator(model="demo-model", provider="demo")
def answer(question: str, contexts: list[str]) -> str:
    if "Spain" in question:
        return "Paris is in Spain."
    return "Paris is the capital of France."


@ragtrace.pipeline(name="support")
def handle(question: str) -> str:
    _trace_ids.append(ragtrace.current_trace_id())
    _root_span_ids.append(format(otel_trace.get_current_span().get_span_context().span_id, "016x"))
    docs = search(question)
    if _split_requests:
        _handle.force_flush()  # the retriever span leaves in its own OTLP request
    return answer(question, [d["content"] for d in docs])


_trace_ids: list[str | None] = []
_root_span_ids: list[str] = []


def send_traces(endpoint: str, protocol: str, questions: list[str], split: bool = False) -> list[str]:
    """Run the traced app once per question, export over OTLP; returns the trace ids."""
    global _handle, _split_requests
    provider = TracerProvider(resource=Resource.create({"service.name": "e2e-app"}))
    _handle = ragtrace.init(
        endpoint=endpoint, protocol=protocol, tracer_provider=provider, set_global=False, schedule_delay_ms=50
    )
    _split_requests = split
    _trace_ids.clear()
    _root_span_ids.clear()
    try:
        for q in questions:
            handle(q)
        assert _handle.force_flush(10.0)
    finally:
        _handle.shutdown()
        _split_requests = False
    assert all(_trace_ids) and len(_trace_ids) == len(questions)
    return list(_trace_ids)


# --- helpers ------------------------------------------------------------------------------------
def faithfulness_responder(body: dict) -> dict:
    """The scripted judge: one claim per answer; a claim about Spain is unsupported."""
    text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    bad = "Spain" in text
    claim = "Paris is in Spain" if bad else "Paris is the capital of France"
    return {
        "claims": [{"claim": claim, "relevant": "yes"}],
        "verdicts": [{"id": 1, "verdict": "no" if bad else "yes", "reason": "checked against the contexts"}],
    }


def base_config(tmp_path: Path, **over: Any) -> dict:
    cfg = {
        "data_dir": str(tmp_path / "data"),
        "listen": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "metrics_port": 0},
        "assembly": {"grace_seconds": 0.3, "max_wait_seconds": 10.0, "sweep_interval_seconds": 0.05},
        "sampling": {"rate": 1.0},
        "scoring": {"concurrency": 4, "lease_seconds": 30, "metrics": ["faithfulness"]},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


def scrape(port: int) -> str:
    resp = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": OPENMETRICS}, timeout=5)
    resp.raise_for_status()
    assert resp.headers["content-type"].startswith("application/openmetrics-text")
    return resp.text


def sample(text: str, name: str, **labels: str) -> float:
    """Sum of the samples ``name{labels...}`` in an exposition (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, rest = line.partition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(rest.split(" ")[0])
    return total


def exemplar_lines(text: str, trace_id: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if line.startswith("ragtrace_eval_score_bucket{") and f'# {{trace_id="{trace_id}"}}' in line
    ]


async def wait_until(predicate, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stored_keys(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    store = ResultsStore(path)
    try:
        return store.counts_per_key()
    finally:
        store.close()


# --- 1. SDK → receivers (HTTP and gRPC) → embedded judge → /metrics with exemplars ---------------
async def test_sdk_to_scored_metrics_with_exemplars_over_http_and_grpc(tmp_path):
    from ragtrace_collector.service.app import CollectorApp

    sink = OtlpSink()  # the downstream backend receiving the evaluation events
    sink_port = sink.start_http()
    cfg = load_config(
        overrides=base_config(
            tmp_path,
            judge={"model": "local"},
            scoring={"metrics": ["faithfulness", "answer_relevancy"]},
            export={"otlp_events": {"endpoint": f"http://127.0.0.1:{sink_port}"}},
        ),
        environ={},
    )
    app = CollectorApp(cfg)
    await app.start()
    roots = {}
    try:
        results = Path(cfg.results_path)
        for protocol, endpoint, split in (
            ("http/protobuf", f"http://127.0.0.1:{app.http_port}", True),  # spans of one trace in separate requests
            ("grpc", f"http://127.0.0.1:{app.grpc_port}", False),
        ):
            (tid,) = await asyncio.to_thread(send_traces, endpoint, protocol, ["What is the capital of France?"], split)
            roots[tid] = _root_span_ids[0]
            await wait_until(lambda tid=tid: stored_keys(results).get(tid) == 2, 60, f"trace {tid} scored ({protocol})")
            text = await asyncio.to_thread(scrape, app.metrics_port)
            assert exemplar_lines(text, tid), f"no trace_id exemplar for {tid} ({protocol})"
            store = ResultsStore(results)
            rows = {r.metric: r for r in store.get(tid)}
            store.close()
            assert rows["faithfulness"].pipeline == "support" and rows["faithfulness"].judge == "local"
            assert rows["faithfulness"].user_input == "What is the capital of France?"
        text = await asyncio.to_thread(scrape, app.metrics_port)
        assert sample(text, "ragtrace_evaluations_total", metric="faithfulness") == 2
        store = ResultsStore(results)
        scored = sum(1 for key in stored_keys(results) for r in store.get(key) if r.status == "scored")
        store.close()
        assert scored >= 2  # both traces produced scores (they carry the exemplars checked above)
        assert sample(text, "ragtrace_eval_score_count", pipeline="support", judge="local") == scored
        assert sample(text, "ragtrace_evaluations_total", outcome="scored") == scored
        assert sample(text, "ragtrace_queue_depth") == 0
        assert sample(text, "ragtrace_judge_latency_seconds_count", judge="local") > 0
        # every score also went downstream as a gen_ai.evaluation.result event (a log record) on the scored
        # request's root span; no span is added to any trace
        await wait_until(lambda: sink.log_count() >= scored, 15, "evaluation events downstream")
        for event in sink.logs():
            tid = event["trace_id"]
            assert tid in roots and event["span_id"] == roots[tid]
            assert event["event_name"] == "gen_ai.evaluation.result"
            attrs = event["attributes"]
            assert attrs["gen_ai.evaluation.name"] in ("faithfulness", "answer_relevancy")
            assert 0.0 <= attrs["gen_ai.evaluation.score.value"] <= 1.0
        assert sink.spans() == []
    finally:
        await app.stop(drain_timeout=5)
        sink.stop()


# --- 2. kill -9 with queued records, restart, exactly once ----------------------------------------
def _serve(config_path: Path, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)}
    env = {k: v for k, v in env.items() if not k.startswith("RAGTRACE_")}
    with open(log_path, "ab") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "ragtrace_collector.cli", "serve", "--config", str(config_path)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _queued_keys(path: Path) -> set[str]:
    if not path.exists():
        return set()
    db = sqlite3.connect(path, timeout=10)
    try:
        return {r[0] for r in db.execute("SELECT record_key FROM records")}
    except sqlite3.OperationalError:
        return set()
    finally:
        db.close()


def _wait_ready(port: int, proc: subprocess.Popen, log_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"collector exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"collector not ready after {timeout}s:\n{log_path.read_text()[-3000:]}")


async def test_kill_9_with_queued_records_then_restart_scores_each_exactly_once(tmp_path):
    n = 12
    with ScriptedOpenAI(responder=faithfulness_responder, delay=0.25) as judge_server:
        http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
        cfg = base_config(
            tmp_path,
            listen={"host": "127.0.0.1", "grpc_port": grpc_port, "http_port": http_port, "metrics_port": metrics_port},
            judge={
                "model": "openai/judge-model",
                "base_url": judge_server.base_url,
                "api_key": "test-key",
                "max_retries": 0,
                "concurrency": 1,
                "timeout_seconds": 10,
            },
            # the default 120 s lease: the restarted process must take back the dead one's leases at
            # once rather than wait them out (the wait below is shorter than the lease)
            scoring={"concurrency": 1, "lease_seconds": 120, "metrics": ["faithfulness"]},
        )
        config_path = tmp_path / "collector.yaml"
        config_path.write_text(yaml.safe_dump(cfg))
        data = Path(cfg["data_dir"]).resolve()
        results, queue_file = data / "results.sqlite", data / "queue.sqlite"
        log_path = tmp_path / "collector.log"

        first = _serve(config_path, log_path)
        try:
            _wait_ready(metrics_port, first, log_path)
            questions = [
                f"What is the capital of France? ({i})" if i % 3 else f"Is Paris in Spain? ({i})" for i in range(n)
            ]
            tids = await asyncio.to_thread(send_traces, f"http://127.0.0.1:{http_port}", "http/protobuf", questions)
            # every record accepted into the queue, some scored, some still waiting
            await wait_until(
                lambda: set(tids) <= (_queued_keys(queue_file) | set(stored_keys(results))), 30, "all records queued"
            )
            await wait_until(lambda: len(stored_keys(results)) >= 3, 30, "a few records scored")
            assert len(stored_keys(results)) < n, "scoring finished before the kill: make the judge slower"
            first.send_signal(signal.SIGKILL)
            assert first.wait(10) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
        before = stored_keys(results)
        assert all(v == 1 for v in before.values())
        assert set(tids) - set(before) <= _queued_keys(queue_file)  # nothing accepted was lost

        second = _serve(config_path, log_path)
        try:
            _wait_ready(metrics_port, second, log_path)
            await wait_until(
                lambda: len(stored_keys(results)) == n and not _queued_keys(queue_file),
                60,
                "every record scored after the restart",
                interval=0.2,
            )
            after = stored_keys(results)
            assert set(after) == set(tids) and all(v == 1 for v in after.values()), after
            text = await asyncio.to_thread(scrape, metrics_port)
            # the restarted process counted exactly the records the killed one had not recorded
            assert sample(text, "ragtrace_evaluations_total", metric="faithfulness") == n - len(before)
            assert sample(text, "ragtrace_eval_score_count", metric="faithfulness", pipeline="support") == n - len(
                before
            )
            second.send_signal(signal.SIGTERM)
            assert second.wait(20) == 0
        finally:
            if second.poll() is None:
                second.kill()

        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ragtrace_collector.cli",
                "results",
                "--metric",
                "faithfulness",
                "--below",
                "0.5",
                "--config",
                str(config_path),
                "--json",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        worst = [yaml.safe_load(line) for line in proc.stdout.splitlines()]
        assert {w["trace_id"] for w in worst} == {t for t, q in zip(tids, questions) if "Spain" in q}
        assert all(w["unsupported_claims"] == ["Paris is in Spain"] for w in worst)


# --- 3. a judge outage: records wait in the queue, then all are scored once ------------------------
async def test_judge_outage_keeps_records_queued_then_scores_them(tmp_path):
    from ragtrace_collector.service.app import CollectorApp

    with ScriptedOpenAI(responder=faithfulness_responder) as judge_server:
        judge_server.push(*[Reply(status=503) for _ in range(8)])
        cfg = load_config(
            overrides=base_config(
                tmp_path,
                judge={
                    "model": "openai/judge-model",
                    "base_url": judge_server.base_url,
                    "api_key": "test-key",
                    "max_retries": 0,
                    "timeout_seconds": 10,
                },
                scoring={"backoff_initial_seconds": 0.3, "backoff_max_seconds": 2},
            ),
            environ={},
        )
        app = CollectorApp(cfg)
        await app.start()
        try:
            tids = await asyncio.to_thread(
                send_traces,
                f"http://127.0.0.1:{app.http_port}",
                "http/protobuf",
                [f"What is the capital of France? ({i})" for i in range(4)],
            )
            registry = app.registry
            unavailable = {"judge": "openai/judge-model", "kind": "unavailable"}
            await wait_until(
                lambda: (registry.get_sample_value("ragtrace_judge_errors_total", unavailable) or 0) >= 1,
                30,
                "the judge outage to be noticed",
            )
            # during the outage nothing is scored and nothing is dropped: the records wait in the queue
            while judge_server.pending > 0:
                assert not stored_keys(Path(cfg.results_path))
                assert app.queue.depth() + len(stored_keys(Path(cfg.results_path))) == 4
                await asyncio.sleep(0.05)
            await wait_until(lambda: len(stored_keys(Path(cfg.results_path))) == 4, 60, "scoring after recovery")
            await wait_until(lambda: app.queue.depth() == 0, 10, "the queue to empty")
            assert stored_keys(Path(cfg.results_path)) == {t: 1 for t in tids}
            assert (
                registry.get_sample_value("ragtrace_evaluations_total", {"metric": "faithfulness", "outcome": "scored"})
                == 4
            )
            assert (
                registry.get_sample_value("ragtrace_evaluations_total", {"metric": "faithfulness", "outcome": "error"})
                is None
            )
            assert registry.get_sample_value("ragtrace_records_released_total", {"reason": "judge_unavailable"}) >= 1
        finally:
            await app.stop(drain_timeout=5)
