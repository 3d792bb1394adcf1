"""A broken or hostile LLM judge must not destroy, falsify or bloat what the collector keeps.

Every test drives the real worker (or the real ``evaluate`` CLI) and the real LLM judge, which talks
through litellm over loopback HTTP to the scripted OpenAI-compatible server; the judge code knows
nothing about it.

1. A judge that refuses our credentials or our configuration (401, 403, 404, a 400 for every request)
   is an outage: records stay queued, scoring pauses, ``ragtrace_judge_unavailable_total{reason}``
   rises, one log line names the cause; once the judge answers again every record is scored once.
   A 400 caused by one record's content is that record's error, and never stalls the others.
2. Contradictory verdicts (two for one id, an id that was not asked about) are not scores: the judge
   is asked once to repair them, and a second bad reply is a clear error.
3. The judge's reply is bounded: ``max_tokens`` on the request, an oversized reply is refused with a
   clear error, and stored reasons are capped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.cli import main
from ragtrace_collector.config import CollectorConfig, load_config
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue.sqlite import SQLiteQueue
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.service.scoring import build_worker
from tests.support.scripted_openai import Reply, ScriptedOpenAI, faithfulness_reply, judge_task

JUDGE = "openai/judge"


def rec(i: int, response: str | None = None) -> RagRecord:
    return RagRecord(
        trace_id=f"{i + 1:032x}",
        pipeline="qa",
        user_input=f"What is item {i}?",
        response=response or f"Item {i} is blue. Item {i} weighs {i} kg.",
        retrieved_contexts=[f"Item {i} is blue and weighs {i} kg."],
    )


def config(tmp_path: Path, server: ScriptedOpenAI, metrics: list[str], **judge: Any) -> CollectorConfig:
    return load_config(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "judge": {
                "model": JUDGE,
                "base_url": server.base_url,
                "api_key": "k",
                "max_retries": 0,
                "timeout_seconds": 10,
                **judge,
            },
            "scoring": {
                "metrics": metrics,
                "concurrency": 4,
                "lease_seconds": 30,
                "backoff_initial_seconds": 0.1,
                "backoff_max_seconds": 0.5,
            },
        },
        environ={},
    )


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stored(cfg: CollectorConfig) -> dict[str, list[Any]]:
    """Stored rows per record key."""
    store = ResultsStore(cfg.results_path)
    try:
        return {key: store.get(key) for key in store.counts_per_key()}
    finally:
        store.close()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


class Running:
    """A worker built from the configuration, running on the event loop until ``stop``."""

    def __init__(self, cfg: CollectorConfig, queue: SQLiteQueue) -> None:
        self.registry = CollectorRegistry()
        self.worker = build_worker(cfg, self.registry, queue)
        self.worker.poll_interval = 0.05
        self.task = asyncio.create_task(self.worker.run())

    async def stop(self) -> None:
        await self.worker.stop(drain_timeout=5)
        await self.task


# --- 1. a judge that refuses our credentials or configuration is an outage ------------------------

REFUSALS = {  # status: (reason label, the judge's reply, the setting the log line points at)
    401: ("credentials", Reply(status=401, error_message="Incorrect API key provided: k."), "judge.api_key"),
    403: ("permission", Reply(status=403, error_message="Project has no access to model judge"), "judge.api_key"),
    404: ("config", Reply(status=404, error_message="The model `judge` does not exist"), "judge.model"),
    400: ("config", Reply(status=400, error_message="Unrecognized request argument: response_format"), "judge"),
}


async def _outage_then_recovery(tmp_path: Path, caplog: Any, status: int, n_records: int) -> None:
    reason, refusal, setting = REFUSALS[status]
    broken = {"on": True}

    def responder(body: dict[str, Any]) -> Any:
        return refusal if broken["on"] else faithfulness_reply(body, lambda i: True)

    caplog.set_level(logging.WARNING, logger="ragtrace_collector")
    with ScriptedOpenAI(responder=responder) as server:
        cfg = config(tmp_path, server, ["faithfulness"])
        queue = SQLiteQueue(tmp_path / "q.sqlite")
        for i in range(n_records):
            assert queue.put(rec(i))
        run = Running(cfg, queue)
        try:
            refused = lambda: sum(1 for r in server.chat_requests() if r.status == status)  # noqa: E731
            await until(lambda: refused() >= 6 or bool(stored(cfg)), 10, f"the judge to answer {status} a few times")
            rows = stored(cfg)
            assert not rows, f"{len(rows)} records stored during a {status} outage, e.g. {next(iter(rows.values()))}"
            assert queue.depth() == n_records
            assert sample(run.registry, "ragtrace_judge_unavailable_total", judge=JUDGE, reason=reason) >= 1
            # scoring pauses: one probe at a time after the first failures, not the whole backlog
            before = len(server.chat_requests())
            await asyncio.sleep(1.0)
            assert len(server.chat_requests()) - before <= 6, "the worker kept hammering a judge that refuses us"
            logged = [r.getMessage() for r in caplog.records if r.name.startswith("ragtrace")]
            causes = [m for m in logged if f"({status})" in m]
            assert len(causes) == 1, f"expected one log line naming the cause, got {causes}"
            assert setting in causes[0] and r"judge openai/judge" in causes[0], causes[0]

            broken["on"] = False  # the key / the proxy is fixed
            await until(lambda: queue.depth() == 0, 15, "the backlog to be scored after the fix")
        finally:
            await run.stop()
    rows = stored(cfg)
    assert {key: [r.status for r in rs] for key, rs in rows.items()} == {
        rec(i).key: ["scored"] for i in range(n_records)
    }
    assert sample(run.registry, "ragtrace_evaluations_total", metric="faithfulness", outcome="scored") == n_records
    assert sample(run.registry, "ragtrace_evaluations_total", metric="faithfulness", outcome="error") == 0


async def test_rejected_credentials_keep_the_backlog_queued_until_the_key_works(tmp_path, caplog):
    """40 queued records meet a 401: none is stored as an error; after the fix each is scored once."""
    await _outage_then_recovery(tmp_path, caplog, 401, 40)


@pytest.mark.parametrize("status", [403, 404, 400])
async def test_a_judge_misconfiguration_is_an_outage_not_a_verdict(tmp_path, caplog, status):
    """Permission denied, an unknown model, a parameter the endpoint refuses on every request."""
    await _outage_then_recovery(tmp_path, caplog, status, 6)


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9999 tokens.",
        "Invalid 'messages[1].content': string contains an unsupported character sequence.",
    ],
    ids=["context_window", "unrecognised_400"],
)
async def test_a_400_for_one_records_content_is_that_records_error(tmp_path, message):
    """A 400 the judge gives one record while it answers the others is that record's error (stored,
    with the judge's words), never an endless outage that stalls the queue behind it."""

    def responder(body: dict[str, Any]) -> Any:
        if "POISON" in json.dumps(body):
            return Reply(status=400, error_message=message)
        return faithfulness_reply(body, lambda i: True)

    with ScriptedOpenAI(responder=responder) as server:
        cfg = config(tmp_path, server, ["faithfulness"])
        queue = SQLiteQueue(tmp_path / "q.sqlite")
        queue.put(rec(0, response="POISON. Item 0 is blue."))  # first in line
        for i in range(1, 6):
            queue.put(rec(i))
        run = Running(cfg, queue)
        try:
            await until(lambda: queue.depth() == 0, 12, "every record to leave the queue")
        finally:
            await run.stop()
    rows = stored(cfg)
    assert {k: [r.status for r in rs] for k, rs in rows.items()} == {
        **{rec(i).key: ["scored"] for i in range(1, 6)},
        rec(0).key: ["error"],
    }
    reason = rows[rec(0).key][0].reason
    assert "400" in reason and message[:30] in reason, reason


# --- 2. contradictory verdicts are not scores -----------------------------------------------------

BAD_VERDICTS = {
    "duplicate_id": (
        {"verdicts": [{"id": 1, "verdict": "no", "reason": "absent"}, {"id": 1, "verdict": "yes", "reason": "there"}]},
        {"verdicts": [{"id": 1, "useful": False}, {"id": 1, "useful": True}]},
        "duplicate",
    ),
    "id_not_asked": (
        {"verdicts": [{"id": 1, "verdict": "no", "reason": "absent"}, {"id": 2, "verdict": "yes", "reason": "x"}]},
        {"verdicts": [{"id": 1, "useful": False}, {"id": 7, "useful": True}]},
        "out of range",
    ),
}


def contradicting(kind: str, repaired: bool) -> Callable[[dict[str, Any]], Any]:
    """A judge whose verdicts contradict themselves; with ``repaired`` it answers the repair request
    with a valid 'no' (so the scores are 0, never the 1.0 a last-one-wins reading gives)."""
    verdicts, useful, _ = BAD_VERDICTS[kind]

    def respond(body: dict[str, Any]) -> Any:
        task = judge_task(body)
        repair = len(body["messages"]) > 2
        if task == "extract_claims":
            return {"claims": [{"claim": "Item 0 is blue.", "relevant": "yes"}]}
        if task == "verify_claims":
            return {"verdicts": [{"id": 1, "verdict": "no", "reason": "r"}]} if repaired and repair else verdicts
        if task == "chunk_relevance":
            return {"verdicts": [{"id": 1, "useful": False}]} if repaired and repair else useful
        return {}

    return respond


METRICS = ["faithfulness", "context_precision"]


@pytest.mark.parametrize("kind", list(BAD_VERDICTS))
async def test_contradictory_verdicts_in_the_worker_are_errors_never_scores(tmp_path, kind):
    problem = BAD_VERDICTS[kind][2]
    with ScriptedOpenAI(responder=contradicting(kind, repaired=False)) as server:
        cfg = config(tmp_path, server, METRICS)
        queue = SQLiteQueue(tmp_path / "q.sqlite")
        queue.put(rec(0, response="Item 0 is blue."))
        run = Running(cfg, queue)
        try:
            await until(lambda: queue.depth() == 0, 10, "the record to be recorded")
        finally:
            await run.stop()
        repairs = [r for r in server.chat_requests() if len(r.messages) > 2]
    rows = {r.metric: r for r in stored(cfg)[rec(0).key]}
    for metric in METRICS:
        assert rows[metric].status == "error" and rows[metric].score is None, (metric, rows[metric])
        assert problem in rows[metric].reason, rows[metric].reason
        assert sample(run.registry, "ragtrace_evaluations_total", metric=metric, outcome="error") == 1
    assert len(repairs) == 2 and all(problem in r.messages[-1]["content"] for r in repairs)


async def test_a_valid_repair_of_contradictory_verdicts_is_what_scores(tmp_path):
    with ScriptedOpenAI(responder=contradicting("duplicate_id", repaired=True)) as server:
        cfg = config(tmp_path, server, METRICS)
        queue = SQLiteQueue(tmp_path / "q.sqlite")
        queue.put(rec(0, response="Item 0 is blue."))
        run = Running(cfg, queue)
        try:
            await until(lambda: queue.depth() == 0, 10, "the record to be recorded")
        finally:
            await run.stop()
    rows = {r.metric: r for r in stored(cfg)[rec(0).key]}
    assert (rows["faithfulness"].status, rows["faithfulness"].score) == ("scored", 0.0)
    assert (rows["context_precision"].status, rows["context_precision"].score) == ("scored", 0.0)


@pytest.mark.parametrize("kind", list(BAD_VERDICTS))
def test_contradictory_verdicts_in_evaluate_are_errors_never_scores(tmp_path, capsys, kind):
    problem = BAD_VERDICTS[kind][2]
    data = tmp_path / "in.jsonl"
    row = {"id": "r1", "user_input": "What is item 0?", "response": "Item 0 is blue.", "retrieved_contexts": ["x."]}
    data.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out.jsonl"
    key = tmp_path / "judge.key"
    key.write_text("k")
    with ScriptedOpenAI(responder=contradicting(kind, repaired=False)) as server:
        status = main(
            [
                "evaluate", str(data), "--judge", JUDGE, "--judge-base-url", server.base_url,
                "--judge-api-key-file", str(key),
                "--max-retries", "0", "--metrics", ",".join(METRICS), "--no-progress", "--out", str(out),
            ]
        )  # fmt: skip
    [entry] = [json.loads(line) for line in out.read_text().splitlines()]
    assert entry["scores"] == {m: None for m in METRICS}, entry["scores"]
    for metric in METRICS:
        result = entry["results"][metric]
        assert result["status"] == "error" and problem in result["reason"], result
    assert status == 1 and "no score came out" in capsys.readouterr().err


# --- 3. the judge's reply is bounded --------------------------------------------------------------


def verifying(reason: str) -> Callable[[dict[str, Any]], Any]:
    def respond(body: dict[str, Any]) -> Any:
        if judge_task(body) == "verify_claims":
            return {"verdicts": [{"id": 1, "verdict": "yes", "reason": reason}]}
        return faithfulness_reply(body, lambda i: True)

    return respond


async def test_a_20_mb_judge_reply_is_refused_with_a_clear_error(tmp_path):
    with ScriptedOpenAI(responder=verifying("A" * 20_000_000)) as server:
        cfg = config(tmp_path, server, ["faithfulness"])
        queue = SQLiteQueue(tmp_path / "q.sqlite")
        queue.put(rec(0, response="Item 0 is blue."))
        run = Running(cfg, queue)
        try:
            await until(lambda: queue.depth() == 0, 12, "the record to be recorded")
        finally:
            await run.stop()
        bodies = [r.body for r in server.chat_requests()]
    assert all(isinstance(b.get("max_tokens"), int) and 0 < b["max_tokens"] <= 100_000 for b in bodies), [
        b.get("max_tokens") for b in bodies
    ]
    assert len(bodies) == 2, "an oversized reply must not be sent back to the judge in a repair request"
    [row] = stored(cfg)[rec(0).key]
    assert row.status == "error" and row.score is None
    assert re.search(r"reply of \d+ characters .*max_reply_chars", row.reason or ""), row.reason
    assert len(json.dumps(row.to_dict())) < 10_000
    assert sample(run.registry, "ragtrace_evaluations_total", metric="faithfulness", outcome="error") == 1
    assert sample(run.registry, "ragtrace_judge_errors_total", judge=JUDGE, kind="failed") == 1


async def test_stored_judge_reasons_are_capped(tmp_path):
    with ScriptedOpenAI(responder=verifying("because " * 7_000)) as server:  # 56 kB: under the reply cap
        cfg = config(tmp_path, server, ["faithfulness"])
        queue = SQLiteQueue(tmp_path / "q.sqlite")
        queue.put(rec(0, response="Item 0 is blue."))
        run = Running(cfg, queue)
        try:
            await until(lambda: queue.depth() == 0, 10, "the record to be recorded")
        finally:
            await run.stop()
    [row] = stored(cfg)[rec(0).key]
    assert (row.status, row.score) == ("scored", 1.0)
    [claim] = row.details["claims"]
    assert claim["reason"].startswith("because because") and len(claim["reason"]) <= 1_100, len(claim["reason"])
    assert "truncated" in claim["reason"]
