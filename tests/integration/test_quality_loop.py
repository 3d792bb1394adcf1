"""The quality loop end to end, as a team runs it, over real loopback (issue 32's "must show"):

an app traced by the SDK answers requests and, after they returned, sends its users' feedback; a reviewer posts
verdicts through the API (refused without a credential that may review); ``/metrics`` shows the feedback and the
judge-vs-human agreement; ``dataset export --reviewed`` writes the reviewed records with their labels; ``evaluate``
on that file measures the judge against them; ``rescore`` adds a metric to the stored records, with provenance.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import ragtrace
from ragtrace_collector.examples.rag_app.app import RagApp
from tests.support.explorer_stack import TOKEN, q, served_collector
from tests.support.review_stack import INGEST, READ, REVIEW, bearer

pytestmark = pytest.mark.integration

N = 8
METRICS = ["faithfulness", "hallucination"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragtrace_collector.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_feedback_reviews_agreement_dataset_evaluate_rescore(tmp_path):
    auth = {"read_tokens": [READ], "review_tokens": [REVIEW], "ingest_tokens": [INGEST]}
    review = {"sample_rate": 1.0, "agreement_cache_seconds": 0}
    with served_collector(tmp_path, auth=auth, extra={"review": review, "scoring": {"metrics": METRICS}}) as fed:
        # 1. the app: requests answered and exported, then (after they returned) its users' feedback by saved id
        provider = TracerProvider(resource=Resource.create({"service.name": "shop-assistant"}))
        handle = ragtrace.init(
            endpoint=fed.otlp,
            protocol="http/protobuf",
            headers=bearer(TOKEN),
            tracer_provider=provider,
            set_global=False,
            schedule_delay_ms=50,
        )
        app = RagApp(token_delay=0.0)
        degraded: dict[str, bool] = {}
        try:
            for i in range(N):
                answer = app.answer(q(i)["question"], degrade=i % 2 == 0, reference=q(i)["reference"])
                degraded[answer.trace_id] = i % 2 == 0
            for trace_id, bad in degraded.items():  # a thumbs-down where the app's faults were on
                ragtrace.feedback(not bad, trace_id=trace_id, comment="<script>alert(1)</script>" if bad else None)
            assert handle.force_flush(10.0)
        finally:
            handle.shutdown()

        def record(trace_id: str) -> dict:
            return httpx.get(f"{fed.base}/api/v1/records/{trace_id}", headers=bearer(READ), timeout=10).json()

        deadline = time.monotonic() + 90
        while not all(len(record(t).get("metrics", [])) == len(METRICS) and record(t)["feedback"] for t in degraded):
            assert time.monotonic() < deadline, fed.log.read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        shown = record(next(iter(degraded)))
        assert shown["feedback"][0]["value"] == 0.0 and shown["feedback"][0]["comment"] == "<script>alert(1)</script>"

        # 2. a reviewer's verdicts: refused without a credential that may review, stored with one
        url = f"{fed.base}/api/v1/records/{next(iter(degraded))}/reviews"
        verdict = {"metric": "faithfulness", "verdict": "unfaithful", "reviewer": "ana"}
        assert httpx.post(url, json=verdict, timeout=10).status_code == 401
        assert httpx.post(url, json=verdict, headers=bearer(READ), timeout=10).status_code == 403
        for trace_id, bad in degraded.items():
            body = {**verdict, "verdict": "unfaithful" if bad else "faithful"}
            reply = httpx.post(
                f"{fed.base}/api/v1/records/{trace_id}/reviews", json=body, headers=bearer(REVIEW), timeout=10
            )
            assert reply.status_code == 201, reply.text

        # 3. /metrics: the feedback counted with bounded labels, the agreement of the judge with the reviewer
        metrics = httpx.get(f"{fed.base}/metrics", headers=bearer(READ), timeout=10).text
        assert 'ragtrace_feedback_total{name="user_feedback",pipeline=' in metrics, metrics[-2000:]
        agreement = [
            line
            for line in metrics.splitlines()
            if line.startswith("ragtrace_judge_agreement{") and 'metric="faithfulness"' in line
        ]
        reviewed = [line for line in agreement if 'statistic="reviewed"' in line and 'population="all"' in line]
        assert reviewed and float(reviewed[0].rsplit(" ", 1)[1]) == N, agreement
        api = httpx.get(f"{fed.base}/api/v1/agreement", headers=bearer(READ), timeout=10).json()
        assert "faithfulness" in json.dumps(api)

        # 4. a dataset out of production: the reviewed records, with the reviewer's labels
        out = tmp_path / "reviewed.jsonl"
        done = cli("dataset", "export", "--out", str(out), "--reviewed", "--store", str(fed.store))
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == N
        assert {r["trace_id"]: r["hallucinated"] for r in rows} == degraded
        assert all(r["user_input"] and r["retrieved_contexts"] and r["response"] for r in rows)

        # 5. evaluate measures the judge on those labelled rows
        scored = tmp_path / "scored.jsonl"
        done = cli("evaluate", str(out), "--judge", "local", "--metrics", "faithfulness", "--out", str(scored))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "balanced" in done.stdout.lower() and "kappa" in done.stdout.lower(), done.stdout

        # 6. rescore adds a metric to the stored records, with the provenance of the judge that made it
        done = cli("rescore", "--metrics", "answer_relevancy", "--judge", "local", "--store", str(fed.store), "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        for trace_id in degraded:
            added = [s for s in record(trace_id)["metrics"] if s["metric"] == "answer_relevancy"]
            assert added and added[0]["provenance"]["judge_model"].startswith("local"), added
